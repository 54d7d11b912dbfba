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
import tempfile
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
    """PgBouncer in transaction mode: every database of the server on `server_port` under its
    own name (`*`), every request run as `server_user` whoever the client says it is."""

    def __init__(self, base: Path, server_port: int, port: int | None = None,
                 pool_size: int = 20, server_user: str = "postgres") -> None:
        self.base = base
        self.server_port = server_port
        self.server_user = server_user
        self.port = port or free_port()
        self.ini = base / "pgbouncer.ini"
        self.log = base / "pgbouncer.log"
        self.pool_size = pool_size
        self.process: subprocess.Popen | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def write_config(self) -> None:
        # auth_type = any with a forced user: the loopback test set-up only (DEPLOYMENT.md shows
        # scram-sha-256). Not `trust` with `auth_user`'s look-up of each client's role: with that,
        # PgBouncer 1.18 stopped a quarter into a CI pass, every later connection refused (the
        # pooler's put_in_order FATALs with auth_user, pgbouncer/pgbouncer#314, #502, #1116, are
        # the likeliest cause; its log was lost). A test that needs requests run as another
        # role starts a pooler of its own forcing that role (tests/service/test_runtime_role.py).
        self.ini.write_text(f"""[databases]
* = host=127.0.0.1 port={self.server_port} user={self.server_user}

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
logfile = {self.log}
pidfile = {self.base / "pgbouncer.pid"}
""")
        if os.geteuid() == 0:
            shutil.chown(self.ini, "postgres", "postgres")

    def start(self) -> None:
        self.write_config()
        # Its soft limit on open files raised to the hard one first: PgBouncer keeps the 1,024 it
        # is given (runuser's PAM session sets it back) while max_client_conn wants 2,012
        # descriptors, and past them accept() fails and clients are refused.
        command = ["sh", "-c", 'ulimit -n "$(ulimit -Hn)"; exec pgbouncer "$0"', str(self.ini)]
        self.process = subprocess.Popen(_as_postgres(command),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"

    def died(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.died():  # the log goes with its directory: say why it stopped while we can
            print(f"PgBouncer had stopped (exit {self.process.returncode}) before the end; the end "
                  f"of its log:\n{self.log_tail()}", file=sys.stderr, flush=True)
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


def _scratch(name: str) -> Path:
    # Under /tmp, not the checkout: the `postgres` user must reach it, and a checkout under
    # /root (CI's) is closed to other users.
    top = Path(tempfile.mkdtemp(prefix=f"rfp-{name}-"))
    top.chmod(0o755)  # mkdtemp's 0700 would keep the `postgres` user out
    return top


@contextlib.contextmanager
def pooler(server_port: int, server_user: str) -> Iterator[PgBouncer]:
    """A PgBouncer of its own in front of the server on `server_port`, running every request as
    `server_user` (the shared one of the PgBouncer pass runs them as postgres)."""
    top = _scratch("pooler")
    if os.geteuid() == 0:
        shutil.chown(top, "postgres", "postgres")  # its log and pid file
    bouncer = PgBouncer(top, server_port, pool_size=5, server_user=server_user)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(top, ignore_errors=True)


@contextlib.contextmanager
def servers(name: str = "pgbouncer") -> Iterator[tuple[SystemPostgres, PgBouncer]]:
    top = _scratch(name)
    postgres = SystemPostgres(top / "cluster")
    bouncer = PgBouncer(top / "cluster", postgres.port)
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
