from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent


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
            for _ in range(60):
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200
            # Multiprocess metrics: any worker reports the requests of both.
            async with session.get(f"{base}/metrics") as response:
                metrics = await response.text()
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0

    stderr.seek(0)
    access = [json.loads(line) for line in stderr if line.startswith("{")]
    pids = {line["pid"] for line in access if line.get("route") == "healthz"}
    assert len(pids) == 2, f"expected two worker pids, got {pids}"
    healthz = [
        line for line in metrics.splitlines()
        if line.startswith('rfp_http_requests_total{') and 'route="healthz"' in line
    ]
    assert healthz and float(healthz[0].split()[-1]) >= 60
