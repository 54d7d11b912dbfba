"""A PostgreSQL server from the system's packages and PgBouncer in transaction mode in front of it,
on loopback ports, for the second CI pass (`make test-pgbouncer`) and the soak's restart phase.

Debian's `postgresql` and `pgbouncer` packages (installed by .ci/run). Neither runs as root, so
when we are root (CI) both run as the `postgres` user. Data lives under /tmp/rfp-<name>-…, thrown
away afterwards.

    python tests/pgservers.py -- <command …>   # run a command with DATABASE_URL (PostgreSQL
                                               # itself) and PGBOUNCER_URL set; stop both after
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bindir() -> Path:
    """The newest /usr/lib/postgresql/<major>/bin (Debian's layout), or $PG_BINDIR."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("no PostgreSQL server found under /usr/lib/postgresql "
                           "(apt-get install -y postgresql)")
    return Path(found[-1]).parent


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL and PgBouncer refuse to run as root: run them as `postgres` when we are root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class SystemPostgres:
    """initdb + postgres on 127.0.0.1:<port>, trust authentication (loopback, a throwaway cluster)."""

    def __init__(self, base: Path, port: int | None = None) -> None:
        self.base = base
        self.data = base / "data"
        self.port = port or free_port()
        self.bindir = pg_bindir()
        self.log = base / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        subprocess.run(_as_postgres([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                                     "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]),
                       check=True, stdout=subprocess.DEVNULL)

    def start(self) -> None:
        # Durability off: a test server. Enough connections for PgBouncer's pools of several
        # databases at once plus the direct ones.
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                                     "-o", options, "-w", "-t", "60", "start"]),
                       check=True, stdout=subprocess.DEVNULL)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode,
                                     "-w", "stop"]),
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class PgBouncer:
    """PgBouncer in transaction mode: every database of `server` under its own name (`*`)."""

    def __init__(self, base: Path, server: SystemPostgres, port: int | None = None,
                 pool_size: int = 20) -> None:
        self.base = base
        self.server = server
        self.port = port or free_port()
        self.ini = base / "pgbouncer.ini"
        self.pool_size = pool_size
        self.process: subprocess.Popen | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def write_config(self) -> None:
        # auth_type = any: the loopback test set-up only; DEPLOYMENT.md shows scram-sha-256.
        self.ini.write_text(f"""[databases]
* = host=127.0.0.1 port={self.server.port} user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = {self.pool_size}
max_client_conn = 2000
max_db_connections = 0
server_reset_query =
ignore_startup_parameters = extra_float_digits
query_wait_timeout = 10
server_login_retry = 1
logfile = {self.base / "pgbouncer.log"}
pidfile = {self.base / "pgbouncer.pid"}
""")
        if os.geteuid() == 0:
            shutil.chown(self.ini, "postgres", "postgres")

    def start(self) -> None:
        self.write_config()
        self.process = subprocess.Popen(_as_postgres(["pgbouncer", str(self.ini)]),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start; see {self.base / 'pgbouncer.log'}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is None:
            return
        # runuser passes the signal on; SIGINT is PgBouncer's "safe shutdown" without waiting
        # for clients, SIGTERM its immediate one.
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@contextlib.contextmanager
def servers(name: str = "pgbouncer") -> Iterator[tuple[SystemPostgres, PgBouncer]]:
    # Under /tmp, not the checkout: the `postgres` user must reach it, and a checkout under
    # /root (CI's) is closed to other users.
    import tempfile

    top = Path(tempfile.mkdtemp(prefix=f"rfp-{name}-"))
    top.chmod(0o755)  # mkdtemp's 0700 would keep the `postgres` user out
    postgres = SystemPostgres(top / "cluster")
    bouncer = PgBouncer(top / "cluster", postgres)
    try:
        postgres.init()
        postgres.start()
        bouncer.start()
        yield postgres, bouncer
    finally:
        bouncer.stop()
        postgres.stop("immediate")
        shutil.rmtree(top, ignore_errors=True)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1:]
    with servers() as (postgres, bouncer):
        env = {**os.environ, "DATABASE_URL": postgres.url(), "PGBOUNCER_URL": bouncer.url()}
        print(f"PostgreSQL ({postgres.bindir}) on :{postgres.port}, PgBouncer (transaction mode) on "
              f":{bouncer.port}", flush=True)
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
