"""Web app benchmark: the RFP page (`GET /rfps/{id}`, server-side render) of an RFP with 1,000 items.

    python bench/web_bench.py       (make bench-web; BENCH_REQUESTS, default 200)

Seeds one account with an RFP of 1,000 answered items in 40 sections (each with its question's
references and attention points, as "answer all" leaves them), signs in through the sign-in page,
then times sequential GETs of the RFP page from one client over real HTTP on loopback, in this
process (the service's app with its default settings: 100 items a page). Also times the last
page, a filtered view, and the whole RFP on one page (web.items_per_page = 1000) for scale.
Prints a Markdown table of p50/p95 in milliseconds and the page size.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import asyncpg
from _setup import fresh_database, machine, server_url
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from service import config as config_module
from service.domain import accounts
from service.domain.passwords import hasher
from service.web.app import create_app

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200"))
PASSWORD = "benchmark password 1"

SEED_ITEMS = """
WITH items AS (
    INSERT INTO rfp_items (id, rfp_id, question, answer, state, confidence, section, position)
    SELECT 'item_web' || i, $1,
           'Question ' || i || ': do you ' || (ARRAY['encrypt backups', 'enforce MFA',
               'review access quarterly', 'test disaster recovery yearly'])[1 + i % 4] || '?',
           'Yes. ' || repeat('Our policy covers this in detail and is reviewed every year. ', 3),
           (ARRAY['auto_answered', 'needs_input', 'approved', 'auto_answered'])[1 + i % 4]::rfp_item_state,
           (ARRAY[0.92, 0.31, 0.88, 0.64])[1 + i % 4], 'Section ' || (1 + (i - 1) / 25), i
      FROM generate_series(1, 1000) AS i
    RETURNING id, position
)
INSERT INTO questions (id, account_id, user_id, rfp_id, rfp_item_id, question, state, "references",
                       requires_attention, attention_points, answer, confidence)
SELECT 'q_web' || position, $2, $3, $1, id, 'Question ' || position, 'complete',
       jsonb_build_array(jsonb_build_object('kb_item_id', 'kb_a' || position % 50, 'external_id', null,
                                            'title', 'Policy ' || position % 50, 'score', 0.9,
                                            'used', true),
                         jsonb_build_object('kb_item_id', 'kb_b' || position % 50, 'external_id', 'P-7',
                                            'title', null, 'score', 0.5, 'used', position % 2 = 0)),
       position % 4 = 1, CASE WHEN position % 4 = 1 THEN ARRAY['Check that the entry is current.'] END,
       'Yes.', 0.9
  FROM items;
"""


async def seed(url: str) -> tuple[str, str, str]:
    conn = await asyncpg.connect(url)
    try:
        made = await accounts.create_account(conn, "Bench", "bench@example.test", credits=0)
        account_id, user_id = made["account"]["id"], made["member"]["user_id"]
        await conn.execute(
            "UPDATE users SET password_hash = $1, password_chosen_by_user = true,"
            " first_name = 'Ada', last_name = 'Lovelace'",
            hasher().hash(PASSWORD),
        )
        rfp_id = "rfp_webbench"
        await conn.execute(
            "INSERT INTO rfps (id, account_id, owner_id, title, deadline) "
            "VALUES ($1, $2, $3, 'Bench RFP with 1,000 items', '2030-06-30')",
            rfp_id, account_id, user_id,
        )
        await conn.execute(SEED_ITEMS, rfp_id, account_id, user_id)
        await conn.execute(
            "UPDATE rfp_items SET question_id = 'q_web' || position WHERE rfp_id = $1", rfp_id
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    return rfp_id, "bench@example.test", PASSWORD


async def measure(
    url: str, per_page: int, paths: list[str], email: str
) -> list[tuple[str, float, float, int]]:
    config = config_module.structure({
        "database": {"url": url}, "logging": {"level": "WARNING"},
        "server": {"web_base_url": "http://localhost"}, "web": {"items_per_page": per_page},
    })
    runner = web.AppRunner(create_app(config), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    rows = []
    try:
        # unsafe: keep cookies of an IP-address host (127.0.0.1), as a browser does
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            form = await (await session.get(f"{base}/signin")).text()
            token = re.search(r'name="sign_in_token" value="([^"]+)"', form).group(1)
            signed = await session.post(f"{base}/signin", data={
                "email": email, "password": PASSWORD, "sign_in_token": token,
            }, allow_redirects=False)
            assert signed.status == 303, await signed.text()
            for path in paths:
                times = []
                size = 0
                for n in range(REQUESTS + 10):
                    started = time.perf_counter()
                    async with session.get(base + path) as response:
                        body = await response.read()
                    elapsed = (time.perf_counter() - started) * 1000
                    assert response.status == 200, (path, response.status)
                    if n >= 10:  # the first requests warm the pool, the statement cache, jinja
                        times.append(elapsed)
                    size = len(body)
                times.sort()
                rows.append((path, statistics.median(times), times[int(len(times) * 0.95) - 1], size))
    finally:
        await runner.cleanup()
    return rows


async def main() -> None:
    admin_url, embedded = server_url()
    try:
        url = await fresh_database(admin_url, "rfp_bench_web")
        rfp_id, email, _ = await seed(url)
        paged = await measure(url, 100, [
            f"/rfps/{rfp_id}", f"/rfps/{rfp_id}?page=10", f"/rfps/{rfp_id}?state=needs_input",
        ], email)
        whole = await measure(url, 1000, [f"/rfps/{rfp_id}"], email)
    finally:
        if embedded is not None:
            embedded.stop()
    print(f"\n{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {machine()}, "
          f"{REQUESTS} sequential requests each, one client, loopback HTTP\n")
    print("| page (RFP of 1,000 items) | p50 ms | p95 ms | HTML |")
    print("|---|---:|---:|---:|")
    labels = ["first page (100 items, default)", "page 10 (items 901–1,000)", "filter needs input (page 1)"]
    for label, (_, p50, p95, size) in zip(labels, paged, strict=True):
        print(f"| {label} | {p50:.1f} | {p95:.1f} | {size / 1024:.0f} KiB |")
    _, p50, p95, size = whole[0]
    label = "all 1,000 items on one page (items_per_page = 1000)"
    print(f"| {label} | {p50:.1f} | {p95:.1f} | {size / 1024:.0f} KiB |")


if __name__ == "__main__":
    asyncio.run(main())
