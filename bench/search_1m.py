"""Search at scale: 1,000,000 RFPs, one account holding 200,000 of them.

    python bench/search_1m.py        (make bench-search; BENCH_SECONDS, BENCH_REUSE=1 keeps the data)

Loads the rows with generate_series (secondary indexes dropped during the load and rebuilt from
their own definitions), then measures GET /api/v1/rfps/search through the service for a rare term
(10 matches in the big account) and a common one (every one of its 200,000 RFPs), first page and
a deep page, and prints each query's plan time from EXPLAIN ANALYZE.
"""

from __future__ import annotations

import datetime
import os

import asyncpg
from _setup import (
    create_account,
    free_port,
    fresh_database,
    load,
    machine,
    median,
    peak_rss_mib,
    run,
    server_url,
    start_service,
    stop,
)

from service import db

SECONDS = float(os.environ.get("BENCH_SECONDS", "8"))
TOTAL, BIG = 1_000_000, 200_000
OTHER_ACCOUNTS = 40
RARE, COMMON = "zeppelin", "security"

LOAD_OTHERS = """
INSERT INTO accounts (id, name, credits)
SELECT 'acct_other' || a, 'Other ' || a, 0 FROM generate_series(1, $1) AS a;
"""
# Row i: the big account for i <= 200,000, else one of the others. Titles and descriptions carry
# an md5 so trigrams are varied; every big-account title holds "Security"; 10 descriptions the
# rare term; other accounts hold "security" in a quarter of their titles.
LOAD_RFPS = """
INSERT INTO rfps (id, account_id, owner_id, title, description, framework, created_at, updated_at)
SELECT 'rfp_' || lpad(i::text, 22, '0'),
       CASE WHEN i <= $2 THEN $3 ELSE 'acct_other' || (1 + i % $4) END,
       $5,
       CASE WHEN i <= $2 OR i % 4 = 0 THEN 'Security questionnaire ' ELSE 'Vendor assessment ' END
           || substr(md5(i::text), 1, 12),
       'Due diligence for supplier ' || md5((i * 7)::text)
           || CASE WHEN i <= $2 AND i % 20000 = 0 THEN ' zeppelin fleet' ELSE '' END,
       (ARRAY['nist-csf-2.0', 'hecvat-4.1', 'cjis-6', NULL])[1 + i % 4],
       now() - make_interval(secs => i), now()
  FROM generate_series(1, $1) AS i;
"""


async def prepare(url: str) -> dict:
    made = await create_account(url, "Big")
    conn = await asyncpg.connect(url)
    try:
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'rfps' "
            "AND indexname NOT LIKE '%pkey'"
        )
        for index in indexes:
            await conn.execute(f'DROP INDEX "{index["indexname"]}"')
        await conn.execute(LOAD_OTHERS, OTHER_ACCOUNTS)
        await conn.execute("SET maintenance_work_mem = '256MB'")
        await conn.execute(
            LOAD_RFPS, TOTAL, BIG, made["account"]["id"], OTHER_ACCOUNTS, made["member"]["user_id"]
        )
        for index in indexes:
            await conn.execute(index["indexdef"])
        await conn.execute("VACUUM ANALYZE rfps")
    finally:
        await conn.close()
    return made


async def existing(url: str) -> dict | None:
    from service.domain import accounts

    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval("SELECT count(*) FROM rfps") != TOTAL:
            return None
        account = await conn.fetchval("SELECT id FROM accounts WHERE name = 'Big'")
        token = await accounts.create_token(conn, account, "admin@big.bench", ["read"])
        return {"account": {"id": account}, "token": token}
    finally:
        await conn.close()


async def explain(url: str, account: str, term: str, offset: int) -> dict[str, float]:
    from service.domain.rfps import SEARCH_COUNT_CAP, like_pattern

    conn = await asyncpg.connect(url)
    timings = {}
    try:
        capped = (account, like_pattern(term), SEARCH_COUNT_CAP)
        for name, args in (("count_search_rfps_capped", capped),
                           ("search_rfps", (account, like_pattern(term), 20, offset))):
            runs = []
            for _ in range(3):
                plan = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + db.query(name), *args)
                import json

                runs.append(json.loads(plan)[0]["Execution Time"])
            timings[name] = median(runs)
    finally:
        await conn.close()
    return timings


def main() -> None:
    admin_url, embedded = server_url()
    try:
        name = "rfp_bench_search"
        url = db.with_database(admin_url, name)
        made = None
        if os.environ.get("BENCH_REUSE"):
            try:
                run(db.migrate_url(url))
                made = run(existing(url))
            except asyncpg.InvalidCatalogNameError:
                made = None
        if made is None:
            started = datetime.datetime.now()
            url = run(fresh_database(admin_url, name))
            made = run(prepare(url))
            print(f"loaded {TOTAL:,} RFPs in {(datetime.datetime.now() - started).seconds} s")
        account, token = made["account"]["id"], made["token"]
        port = free_port()
        service = start_service(url, port)
        rows = []
        try:
            base = f"http://127.0.0.1:{port}/api/v1/rfps/search"
            for term, page in ((RARE, 1), (COMMON, 1), (COMMON, 500)):
                target = f"{base}?query={term}&page={page}"
                load([target], [f"Authorization: Bearer {token}"], 4, 2)  # warm-up
                result = load([target], [f"Authorization: Bearer {token}"], 4, SECONDS)
                sql = run(explain(url, account, term, (page - 1) * 20))
                rows.append((term, page, result, sql))
            memory = peak_rss_mib(service.pid)
        finally:
            stop(service)
    finally:
        if embedded is not None:
            embedded.stop()
    print(f"\nMachine: {machine()}\nDate: {datetime.date.today().isoformat()}; "
          f"{TOTAL:,} RFPs, {BIG:,} in the searched account; 4 connections, {SECONDS:g} s each\n")
    print("| term | page | matches in account | req/s | p50 ms | p99 ms | errors | count SQL ms "
          "| page SQL ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for term, page, result, sql in rows:
        matches = 10 if term == RARE else BIG
        print(f"| {term} | {page} | {matches:,} | {result['rps']:.0f} | {result['p50_ms']:.1f} | "
              f"{result['p99_ms']:.1f} | {result['errors']} | {sql['count_search_rfps_capped']:.1f} | "
              f"{sql['search_rfps']:.1f} |")
    print(f"\nPeak RSS of the service process: {memory} MiB")


if __name__ == "__main__":
    main()
