"""Webhook delivery by real service processes: two processes deliver each event once, and a
kill -9 in the middle of a delivery loses nothing (the lease runs out, another process sends it)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from service_process import ServiceProcess
from webhook_receiver import Receiver

pytestmark = pytest.mark.slow  # starts service processes (make test-fast leaves it out)

CONFIG = """
[webhooks]
allow_private_addresses = true
retry_base_seconds = 0.2
retry_max_interval_seconds = 1.0
timeout_seconds = 2.0          # the lease: 2 * 2 + 5 = 9 s
poll_interval_seconds = 0.1
"""


@pytest.fixture
def services(database_url, tmp_path):
    started: list[ServiceProcess] = []

    def make() -> ServiceProcess:
        service = ServiceProcess(database_url, CONFIG, tmp_path)
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()


async def _register(url: str, headers: dict, receiver: Receiver) -> None:
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{url}/api/v1/webhook_endpoints", json={"webhook_endpoint": {
                "url": receiver.url, "event_types": ["knowledge_base_item.created"]}}) as r:
            assert r.status == 201, await r.text()


async def _add_entries(urls: list[str], headers: dict, count: int) -> None:
    async with aiohttp.ClientSession(headers=headers) as session:

        async def one(n: int) -> None:
            async with session.post(f"{urls[n % len(urls)]}/api/v1/knowledge_base_items",
                                    json={"knowledge_base_item": {"answer": f"Answer {n}"}}) as r:
                assert r.status == 201, await r.text()

        await asyncio.gather(*(one(n) for n in range(count)))


async def test_two_processes__deliver_each_event_once(services, conn, admin, receiver):
    first, second = await services().start(), await services().start()
    await _register(first.url, admin.headers, receiver)
    receiver.delay = 0.02  # slow enough that both processes' deliverers are busy at once
    await _add_entries([first.url, second.url], admin.headers, 60)
    await receiver.wait_for(60, within_seconds=60)
    await asyncio.sleep(1.0)  # any duplicate would arrive meanwhile
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert len(ids) == 60 and len(set(ids)) == 60
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered' AND attempts = 1") == 60


async def test_kill_9_mid_delivery__nothing_lost(services, conn, admin, receiver):
    first = await services().start()
    await _register(first.url, admin.headers, receiver)
    receiver.delay = 1.5  # every delivery is in flight for a while
    await _add_entries([first.url], admin.headers, 5)
    async with asyncio.timeout(20):
        while not await conn.fetchval(  # noqa: ASYNC110 (polls the database)
                "SELECT count(*) FROM webhook_deliveries WHERE attempts > 0 AND state = 'pending'"):
            await asyncio.sleep(0.02)
    first.kill()
    receiver.delay = 0.0
    in_flight = await conn.fetchval("SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'")
    assert in_flight >= 1

    second = await services().start()
    async with asyncio.timeout(40):
        while await conn.fetchval(  # noqa: ASYNC110 (polls the database)
                "SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'"):
            await asyncio.sleep(0.1)
    second.stop()
    events = {r["id"] for r in await conn.fetch("SELECT id FROM webhook_events")}
    assert len(events) == 5
    assert {r.headers["webhook-id"] for r in receiver.received} == events  # none lost
    # At least once: an attempt cut off by the crash is sent again, with the same webhook-id.
    assert await conn.fetchval("SELECT max(attempts) FROM webhook_deliveries") >= 2
