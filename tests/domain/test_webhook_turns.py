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


async def test_deliverer__a_failing_endpoint_logs_a_line_a_minute_not_one_per_attempt(
    conn, pool, make_account, failing, caplog
):
    demo, other = await make_account("Demo"), await make_account("Other")
    theirs = await _endpoint(conn, demo.account_id, failing.url)
    await _endpoint(conn, other.account_id, failing.url)
    await _events(conn, demo.account_id, 12, "demo")
    await _events(conn, other.account_id, 1, "other")
    failing.delay = 0
    deliverer = webhooks.Deliverer(pool, WebhooksConfig(**fast_webhooks(concurrency=2)))
    running = asyncio.create_task(deliverer.run())
    try:
        async with asyncio.timeout(10):
            while await conn.fetchval(  # noqa: ASYNC110 (polls the DB)
                    "SELECT count(*) FROM webhook_deliveries WHERE attempts = 0") > 0:
                await asyncio.sleep(0.02)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records
             if r.levelname == "WARNING" and "attempt" in r.getMessage()]
    # every delivery was attempted (and failed), but each endpoint logged one line
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND attempts > 0",
        theirs) == 12
    assert len(lines) == 2, lines
    assert sum(theirs in line for line in lines) == 1


async def test_deliverer__the_next_failure_line_counts_those_left_out(
    conn, pool, make_account, failing, caplog, monkeypatch
):
    monkeypatch.setattr(webhooks, "FAILURE_LOG_SECONDS", 0.5)
    demo = await make_account("Demo")
    await _endpoint(conn, demo.account_id, failing.url)
    await _events(conn, demo.account_id, 6, "demo")
    failing.delay = 0
    deliverer = webhooks.Deliverer(pool, WebhooksConfig(**fast_webhooks(concurrency=2)))
    running = asyncio.create_task(deliverer.run())
    try:
        async with asyncio.timeout(10):
            while not any("more failed attempts" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage()]
    # the first failure, then half a second later one line for the (at least 5) left out meanwhile
    assert len(lines) == 2, lines
    left_out = int(lines[1].split("; ")[-1].split()[0])
    assert left_out >= 5 and lines[1].endswith("not logged since its last such line")


async def test_loop__a_database_unavailable_is_one_warning_line_not_a_traceback(
    database_url, config, caplog
):
    # CI's log showed a traceback at ERROR for each round that found every pooled connection
    # taken; the web layer calls the same a 503, and the pipeline logs it as one line.
    timed = await db.create_pool(database_url, config, min_size=1, max_size=1, acquire_timeout=0.05)
    deliverer = webhooks.Deliverer(timed, WebhooksConfig(**fast_webhooks(concurrency=1)))
    try:
        async with timed.acquire():  # the only connection, held elsewhere
            loop = asyncio.create_task(deliverer.run())
            await asyncio.sleep(0.5)
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    finally:
        await timed.close()
    failed = [r for r in caplog.records if "delivery round failed" in r.getMessage()]
    assert failed and all(r.levelname == "WARNING" and r.exc_info is None for r in failed)
    assert "no database connection became free" in failed[0].getMessage()
