from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

pytestmark = pytest.mark.slow  # starts service processes (make test-fast leaves it out)

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def wait_until_up(base: str, process: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            assert process.returncode is None, "the service exited during start-up"
            try:
                async with session.get(f"{base}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the service did not start")


def healthz_pids(stderr) -> set[int]:
    """The pids of the workers whose JSON access lines show a /healthz request so far."""
    stderr.flush()
    pids = set()
    with open(stderr.name) as log:
        for line in log:
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:  # a worker may be half way through writing its last line
                continue
            if entry.get("route") == "healthz":
                pids.add(entry["pid"])
    return pids


async def test_serve_workers__two_processes_answer_on_one_port_and_stop_on_sigterm(
    database_url, tmp_path
):
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "RFP_LOG_JSON": "1", "RFP_METRICS": "1",
           "RFP_DATA_DIR": str(tmp_path)}
    stderr = (tmp_path / "stderr.log").open("w+")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "serve", "--workers", "2", "--port", str(port),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=stderr,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_until_up(base, process)
        # A new connection per request: SO_REUSEPORT spreads connections over the workers.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            # The second worker may still be starting when the first answers: keep asking (in
            # rounds of 60) until both have, for at most 30 s.
            sent = 0
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while sent < 60 or (len(healthz_pids(stderr)) < 2 and loop.time() < deadline):
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200
                sent += 1
            # Multiprocess metrics: any worker reports the requests of both.
            async with session.get(f"{base}/metrics") as response:
                metrics = await response.text()
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0

    pids = healthz_pids(stderr)
    assert len(pids) == 2, f"expected two worker pids, got {pids}"
    healthz = [
        line for line in metrics.splitlines()
        if line.startswith('rfp_http_requests_total{') and 'route="healthz"' in line
    ]
    assert healthz and float(healthz[0].split()[-1]) >= 60


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_serve_workers__stop_when_their_parent_is_killed(database_url, tmp_path):
    """A probe: `kill -9` of `serve --workers 2`'s parent (the supervisor) left both workers
    serving as orphans, unsupervised; a restart then met the port taken. Each worker now stops
    when its parent is gone, as on SIGTERM (requests and steps finish, leases handed back)."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "RFP_DATA_DIR": str(tmp_path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "serve", "--workers", "2", "--port", str(port),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    workers: list[int] = []
    try:
        await wait_until_up(f"http://127.0.0.1:{port}", process)
        workers = _children(process.pid)
        assert workers
        process.send_signal(signal.SIGKILL)
        await process.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while any(_alive(pid) for pid in workers) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their parent"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await process.wait()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
