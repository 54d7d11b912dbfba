"""Webhook deliveries take turns between accounts: one account's backlog (an endpoint failing
thousands of deliveries) never holds up another account's deliveries (a probe: a delivery waited
240 s behind 6,109 pending ones of another account, until that account's endpoint was disabled)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from conftest import CONNECT, free_port
from webhook_receiver import Receiver, fast_webhooks

from service import db
from service.config import WebhooksConfig
from service.domain import webhooks

TYPE = "knowledge_base_item.created"


@pytest.fixture
async def pool(database_url):
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture
async def failing():
    """A receiver that answers every delivery 503, slowly (an endpoint that keeps failing)."""
    server = Receiver(free_port())
    server.fail_with = 503
    server.delay = 0.1
    await server.start()
    yield server
    await server.stop()


async def _endpoint(conn, account_id: str, url: str) -> str:
    endpoint_id = webhooks.new_id("whep")
    await conn.execute(db.query("insert_webhook_endpoint"), endpoint_id, account_id, url, [TYPE],
                       None, webhooks.new_secret(), True)
    return endpoint_id


async def _events(conn, account_id: str, count: int, name: str) -> None:
    """`count` events about as many records, each queued for the account's endpoint."""
    for i in range(count):
        assert await webhooks.emit(conn, account_id, TYPE, f"kb_{name}_{i}", {"i": i}) == 1


async def _deliveries(conn, endpoint_id: str) -> list[int]:
    return [r["id"] for r in await conn.fetch(
        "SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id", endpoint_id)]


async def test_claim__another_accounts_delivery_waits_for_no_backlog(conn, pool, make_account):
    demo, victim = await make_account("Demo"), await make_account("Victim")
    theirs = await _endpoint(conn, demo.account_id, "https://example.com/demo")
    ours = await _endpoint(conn, victim.account_id, "https://example.com/victim")
    await _events(conn, demo.account_id, 30, "demo")
    await _events(conn, victim.account_id, 1, "victim")
    [victims] = await _deliveries(conn, ours)
    deliverer = webhooks.Deliverer(pool, WebhooksConfig(**fast_webhooks()))
    claimed = [(await deliverer._claim())["id"] for _ in range(6)]
    # the victim's delivery goes within the first two claims (one per account ahead of it); the
    # backlog keeps its own order (oldest due first) around it
    assert victims in claimed[:2]
    assert [d for d in claimed if d != victims] == (await _deliveries(conn, theirs))[:5]


async def test_claim__per_record_order_still_holds_within_an_account(conn, pool, make_account):
    demo, victim = await make_account("Demo"), await make_account("Victim")
    await _endpoint(conn, demo.account_id, "https://example.com/demo")
    ours = await _endpoint(conn, victim.account_id, "https://example.com/victim")
    await _events(conn, demo.account_id, 5, "demo")
    for i in range(3):  # three events about one record: sent one after the other
        await webhooks.emit(conn, victim.account_id, TYPE, "kb_one", {"i": i})
    first, *later = await _deliveries(conn, ours)
    deliverer = webhooks.Deliverer(pool, WebhooksConfig(**fast_webhooks()))
    claimed = [(await deliverer._claim())["id"] for _ in range(5)]
    assert first in claimed and not set(later) & set(claimed)


async def test_deliverer__a_failing_backlog_of_one_account_does_not_hold_up_another(
    conn, pool, make_account, receiver, failing
):
    demo, victim = await make_account("Demo"), await make_account("Victim")
    theirs = await _endpoint(conn, demo.account_id, failing.url)
    ours = await _endpoint(conn, victim.account_id, receiver.url)
    await _events(conn, demo.account_id, 40, "demo")
    await _events(conn, victim.account_id, 1, "victim")
    # one delivery at a time: oldest due first, the victim's would wait for 40 failing attempts
    # (0.1 s each) and then for their retries
    deliverer = webhooks.Deliverer(pool, WebhooksConfig(**fast_webhooks(concurrency=1)))
    running = asyncio.create_task(deliverer.run())
    try:
        await receiver.wait_for(1, within_seconds=10)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    attempted = await conn.fetchval(
        "SELECT sum(attempts) FROM webhook_deliveries WHERE endpoint_id = $1", theirs)
    assert attempted <= 2
    assert (await _deliveries(conn, ours))
