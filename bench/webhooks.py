"""Webhooks and the audit log: delivery throughput to a receiver on loopback, and what the audit
event and the outbox add to a write.

    .venv/bin/python bench/webhooks.py --events 2000 --writes 2000

Throughput: `--events` events are queued (the outbox, as the service writes it), then this
process's Deliverer (`webhooks.concurrency` workers, default 4) sends them to an aiohttp receiver
in the same process, which answers 200 at once; events per second from the first claim to the
last delivery. Both share the machine with PostgreSQL, so it is a lower bound.

Cost per write: `--writes` knowledge-base entries created one after another on one connection,
each in its own transaction, three ways (alternating rounds): the entry alone; with its audit
event; with its audit event and the webhook outbox rows for an endpoint that wants it (event +
delivery). Median microseconds per write, and of the two added calls alone (inside the
transaction, so the commit's flush, which dominates and varies, is not in them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import asyncpg
from _setup import fresh_database, server_url
from aiohttp import web

from service import config as config_module
from service.domain import accounts, audit, webhooks
from service.domain.knowledge import KnowledgeItemInput, create_item
from service.domain.tokens import Principal


async def _receiver(port: int) -> tuple[web.AppRunner, list[int]]:
    got: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        got.append(1)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hooks", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, got


async def throughput(url: str, account_id: str, events: int, concurrency: int) -> dict:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner, got = await _receiver(port)
    settings = config_module.structure(
        {"webhooks": {"allow_private_addresses": True, "concurrency": concurrency}}
    ).webhooks
    conn = await asyncpg.connect(url)
    endpoint, _ = await webhooks.create_endpoint(conn, account_id, webhooks.EndpointInput(
        url=f"http://127.0.0.1:{port}/hooks", event_types=["knowledge_base_item.created"]),
        settings)
    async with conn.transaction():
        for n in range(events):
            await webhooks.emit(conn, account_id, "knowledge_base_item.created", f"kb_{n % 50}",
                                {"id": f"kb_{n % 50}", "answer": "x" * 200})
    pool = await asyncpg.create_pool(url, min_size=2, max_size=concurrency + 2)
    deliverer = webhooks.Deliverer(pool, settings)
    start = time.perf_counter()
    task = asyncio.create_task(deliverer.run())
    while await conn.fetchval(  # noqa: ASYNC110 (polls the database)
            "SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'"):
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - start
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await pool.close()
    await conn.close()
    await runner.cleanup()
    return {"events": events, "records": 50, "concurrency": concurrency, "received": len(got),
            "seconds": round(elapsed, 2), "events_per_second": round(events / elapsed, 1),
            "endpoint": endpoint["id"]}


async def write_cost(url: str, account_id: str, member_id: str, writes: int) -> dict:
    conn = await asyncpg.connect(url)
    who = Principal(member_id=member_id, user_id=1, account_id=account_id, role="admin",
                    scopes=frozenset({"read", "write"}), name="bench", email="bench@example.test")
    actor = audit.Actor.member(who, "127.0.0.1", "bench")
    data = KnowledgeItemInput(answer="We enforce MFA for every administrative account.")

    async def plain() -> None:
        async with conn.transaction():
            await create_item(conn, account_id, data)

    async def audited() -> None:
        async with conn.transaction():
            item = await create_item(conn, account_id, data)
            await audit.record(conn, actor, "knowledge_base_item.created", record_id=item.id,
                               after={"answer": item.answer, "tags": item.tags})

    parts: dict[str, list[float]] = {"audit.record call": [], "webhooks.emit call": []}

    async def audited_and_outbox() -> None:
        async with conn.transaction():
            item = await create_item(conn, account_id, data)
            start = time.perf_counter()
            await audit.record(conn, actor, "knowledge_base_item.created", record_id=item.id,
                               after={"answer": item.answer, "tags": item.tags})
            parts["audit.record call"].append(time.perf_counter() - start)
            start = time.perf_counter()
            await webhooks.emit(conn, account_id, "knowledge_base_item.created", item.id,
                                {"id": item.id, "answer": item.answer})
            parts["webhooks.emit call"].append(time.perf_counter() - start)

    variants = {"entry only": plain, "+ audit event": audited,
                "+ audit event + outbox (1 endpoint)": audited_and_outbox}
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    per_round = max(1, writes // 5)
    for _ in range(5):  # alternating, so load drift hits every variant alike
        for name, write in variants.items():
            start = time.perf_counter()
            for _ in range(per_round):
                await write()
            rounds[name].append((time.perf_counter() - start) / per_round * 1e6)
    # The endpoint above wants the type; an account with no endpoint pays the emit's one
    # statement, which writes nothing.
    await conn.close()
    out = {name: round(statistics.median(values), 1) for name, values in rounds.items()}
    out.update({name: round(statistics.median(v) * 1e6, 1) for name, v in parts.items()})
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    admin_url, server = server_url()
    try:
        url = await fresh_database(admin_url, "rfp_bench_webhooks")
        conn = await asyncpg.connect(url)
        made = await accounts.create_account(conn, "Bench", "bench@example.test")
        await conn.close()
        account_id, member_id = made["account"]["id"], made["member"]["id"]
        conn = await asyncpg.connect(url)
        settings = config_module.structure({"webhooks": {"allow_private_addresses": True}}).webhooks
        await webhooks.create_endpoint(conn, account_id, webhooks.EndpointInput(
            url="http://127.0.0.1:9/unused", event_types=["knowledge_base_item.created"],
            enabled=True), settings)
        await conn.close()
        cost = await write_cost(url, account_id, member_id, args.writes)
        async with asyncpg.create_pool(url, min_size=1, max_size=1) as pool, pool.acquire() as c:
            await c.execute("DELETE FROM webhook_endpoints")  # the throughput run makes its own
        rate = await throughput(url, account_id, args.events, args.concurrency)
        print(json.dumps({"write_cost_us_median": cost, "delivery": rate}, indent=2))
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    asyncio.run(main())
