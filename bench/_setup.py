"""Shared by the bench scripts: a fresh migrated database, seed data, and processes to measure."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from service import db  # noqa: E402  (after the path set-up above)
from service.domain import accounts  # noqa: E402

BENCH_DIR = ROOT / "var" / "bench"


def server_url() -> tuple[str, object | None]:
    """$DATABASE_URL, or the embedded PostgreSQL under var/bench (returned so it can be stopped)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"], None
    server = db.EmbeddedPostgres(BENCH_DIR)
    return server.url(), server


def through_pooler(url: str) -> tuple[str, dict[str, str]]:
    """With $BENCH_POOLER_URL (PgBouncer in transaction mode in front of $DATABASE_URL's server;
    `make bench-pgbouncer` sets it): the service's URL for the database `url` through it, and the
    environment configuring the service for it. Otherwise `url` itself and nothing."""
    pooler = os.environ.get("BENCH_POOLER_URL")
    if not pooler:
        return url, {}
    return db.with_database(pooler, database_name(url)), {"RFP_DATABASE_POOLER": "pgbouncer-transaction",
                                           "DATABASE_DIRECT_URL": url}


def database_name(url: str) -> str:
    """The database a server URL names (its path; the embedded server's socket directory, a
    path too, is in the query: `postgresql://postgres:@/name?host=/…/pg`)."""
    from yarl import URL

    return URL(url).path.lstrip("/")


async def fresh_database(admin_url: str, name: str, migrate: bool = True) -> str:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = db.with_database(admin_url, name)
    if migrate:
        await db.migrate_url(url)
    return url


@contextlib.asynccontextmanager
async def scratch_database(admin_url: str):  # -> AsyncIterator[asyncpg.Connection]
    """A connection to a new migrated database of its own, dropped afterwards."""
    name = f"rfp_bench_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(await fresh_database(admin_url, name))
    try:
        yield conn
    finally:
        await conn.close()
        admin = await asyncpg.connect(admin_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def create_account(url: str, name: str) -> dict:
    conn = await asyncpg.connect(url)
    try:
        return await accounts.create_account(conn, name, f"admin@{name.lower()}.bench", credits=100)
    finally:
        await conn.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, seconds: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


def start_service(
    database_url: str, port: int, workers: int = 1, cwd: Path = ROOT, log: Path | None = None,
    **env: str,
) -> subprocess.Popen:
    """`python -m service serve` from `cwd` (another checkout of the service, for A/B runs)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port), "--workers", str(workers)],
        cwd=cwd,
        env={**os.environ, "DATABASE_URL": database_url, "RFP_DATA_DIR": str(BENCH_DIR), **env},
        stdout=subprocess.DEVNULL,
        stderr=log.open("w") if log else subprocess.DEVNULL,
    )
    wait_for(f"http://127.0.0.1:{port}/healthz", process)
    return process


def start_bare(database_url: str, port: int, account_id: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "bare.py"), database_url, str(port), account_id],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for(f"http://127.0.0.1:{port}/healthz", process)
    return process


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB; Linux only."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def load(urls: list[str], headers: list[str], concurrency: int, seconds: float) -> dict:
    command = [sys.executable, str(ROOT / "bench" / "load.py"), "--concurrency", str(concurrency),
               "--seconds", str(seconds), "--loadgen", os.environ.get("BENCH_LOADGEN", "auto")]
    for url in urls:
        command += ["--url", url]
    for header in headers:
        command += ["--header", header]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"load generator failed: {done.stderr[-2000:]}")
    if done.stderr:
        print(done.stderr.strip(), file=sys.stderr)
    return json.loads(done.stdout)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} cores, {system}, Python {platform.python_version()}"


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def run(coro):
    return asyncio.run(coro)
