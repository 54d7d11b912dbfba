"""What one client's idle connections can hold: each takes a file descriptor of the service
process until aiohttp's keep-alive timer closes it (server.keepalive_timeout_seconds)."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import aiohttp
import pytest
from service_process import ServiceProcess

pytestmark = pytest.mark.slow  # starts a service process

STARTED_WITH = 256  # the soft limit the service is started with here (systems: often 1024)


def _soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open files limit in /proc")


async def test_open_files__the_service_outlasts_more_idle_connections_than_its_soft_limit(
    database_url, tmp_path, make_account
):
    """At the soft limit it was started with, one client's idle connections (each sending part of
    a request line, or nothing) left the service unable to accept any other connection, open a
    file or a database connection, for as long as they stayed open (75 s, and again). It raises
    its soft limit to the hard limit at start now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < STARTED_WITH * 4:
        pytest.skip(f"the hard limit of open files is {hard}: no room to raise")
    actor = await make_account()
    resource.setrlimit(resource.RLIMIT_NOFILE, (STARTED_WITH, hard))  # the child inherits it
    try:
        service = ServiceProcess(database_url, "", tmp_path)
        await service.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    idle: list[asyncio.StreamWriter] = []
    try:
        assert service.process is not None
        assert _soft_limit(service.process.pid) > STARTED_WITH
        for _ in range(STARTED_WITH + 50):
            _, writer = await asyncio.open_connection("127.0.0.1", service.port)
            writer.write(b"GET / HTTP/1.1\r\n")
            idle.append(writer)
        async with asyncio.timeout(20), aiohttp.ClientSession() as session:  # before: no answer
            async with session.get(f"{service.url}/api/v1/rfps/search?query=acme",
                                   headers=actor.headers) as response:
                assert response.status == 200
    finally:
        for writer in idle:
            writer.close()
        service.stop()
