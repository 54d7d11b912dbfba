"""An RFP's item search (search_rfp_items_page, `GET /api/v1/rfps/{id}/rfp_items?query=`) at
20,000 items, with and without the trigram index rfp_items_search_trgm (migration 0044), and
what the index costs an answer's write.

    .venv/bin/python bench/item_search.py [--items 20000] [--other-items 100000] [--runs 11]

Loads one RFP of `--items` items and `--other-items` more in other accounts' RFPs (20,000 an
RFP): questions of 8-40 words and answers of 20-250 words (5 % of 500-2,000, 0.3 % of
5,000-15,000, up to ~100,000 characters), drawn from a Zipf-weighted vocabulary of security
words, common English words and made-up ones; 10 % unanswered. Then, per term, the statement as
the service runs it (custom plans, search_time_bounded) with the index ("after") and, in the same
minutes, with the index dropped inside a rolled-back transaction ("before": the plan before
0044), alternated `--runs` times; both must return the same rows. Terms: rare (5 items), a
made-up word of common trigrams (64), common (42 % of the items), very common (99 %), and a
two-character one (which search_pattern refuses, run as a pattern directly: no trigram serves it).
Write cost: one UPDATE of an item's answer (1,000, 10,000 and 100,000 characters) with and without
the index, each rolled back, alternated. Medians in milliseconds, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import statistics
import time

import _setup  # the scratch database; puts the checkout on sys.path
import asyncpg
from questions import ASPECTS, TOPICS, UNITS

from service import db
from service.domain import accounts, rfps

COMMON = ("the of and to a in is for that we our are with on as be by this all data it or at from an "
          "access security customer systems policy review not have each any which annual team must "
          "can will used who where when how been has least within").split()
SYLLABLES = ["ka", "ro", "mi", "tes", "lan", "vor", "qui", "pe", "dra", "sul", "ben", "ix", "on", "tur",
             "gal", "fen", "mo", "re", "ast", "ple"]
TERMS = {"rare": "zeppelin", "common trigrams, rare word": "kamiro", "common": "policy",
         "very common": "the", "two characters": "ze"}
PER_RFP = 20_000


def vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    words = list(dict.fromkeys(COMMON + " ".join(TOPICS + ASPECTS + UNITS).lower().split()))
    seen = set(words)
    while len(words) < 8000:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words, [1 / (rank + 1) ** 1.05 for rank in range(len(words))]


def answer_words(rng: random.Random) -> int:
    draw = rng.random()
    if draw < 0.003:
        return rng.randint(5000, 15000)
    if draw < 0.05:
        return rng.randint(500, 2000)
    return rng.randint(20, 250)


def item_rows(rng: random.Random, words: tuple, rfp_id: str, count: int) -> list[tuple]:
    def text(n: int) -> str:
        return " ".join(rng.choices(words[0], words[1], k=n)).capitalize()

    rows = []
    for position in range(1, count + 1):
        question = text(rng.randint(8, 40)) + "?"
        answer = None if rng.random() < 0.1 else text(answer_words(rng)) + "."
        state = "pending" if answer is None else rng.choice(["auto_answered", "needs_input", "approved"])
        # The rare term in five items of every RFP, in questions and answers.
        if position in (17, 4000, 9000, 15000, 19999):
            if position % 2:
                question += " Zeppelin fleet"
            else:
                answer, state = (answer or "") + " (see the zeppelin annex)", "auto_answered"
        rows.append((f"item_{rfp_id}_{position}", rfp_id, question, answer, state, position))
    return rows


async def load(conn: asyncpg.Connection, items: int, other_items: int) -> tuple[str, float]:
    rng = random.Random(11)
    words = vocabulary(rng)
    made = await accounts.create_account(conn, "Searched", "searched@example.test")
    others = [await accounts.create_account(conn, f"Other {k}", f"other{k}@example.test") for k in range(3)]
    rfp_rows = [("rfp_searched", made, items)]
    for k in range(-(-other_items // PER_RFP)):
        rfp_rows.append((f"rfp_other{k}", others[k % 3], min(PER_RFP, other_items - k * PER_RFP)))
    # The index built once after the load, as CREATE INDEX CONCURRENTLY would on existing items
    # (row by row, the GIN pending list's flushes take much longer).
    definition = await conn.fetchval("SELECT pg_get_indexdef('rfp_items_search_trgm'::regclass)")
    await conn.execute("DROP INDEX rfp_items_search_trgm")
    for rfp_id, owner, count in rfp_rows:
        await conn.execute("INSERT INTO rfps (id, account_id, owner_id, title) VALUES ($1, $2, $3, $1)",
                           rfp_id, owner["account"]["id"], owner["member"]["user_id"])
        await conn.copy_records_to_table(
            "rfp_items", records=item_rows(rng, words, rfp_id, count),
            columns=["id", "rfp_id", "question", "answer", "state", "position"],
        )
    started = time.perf_counter()
    await conn.execute(definition)
    built = time.perf_counter() - started
    await conn.execute("VACUUM ANALYZE rfp_items")  # what autovacuum does after an import
    return "rfp_searched", built


async def timed(conn: asyncpg.Connection, before: bool, sql: str, *args: object) -> tuple[float, list]:
    """`sql` in a search's transaction (custom plans, the time limit off), rolled back; with
    `before`, the trigram index dropped in it first."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(db.query("plan_each_search"))
        if before:
            await conn.execute("DROP INDEX rfp_items_search_trgm")
        started = time.perf_counter()
        rows = await conn.fetch(sql, *args)
        return 1000 * (time.perf_counter() - started), rows
    finally:
        await transaction.rollback()


async def searches(conn: asyncpg.Connection, rfp_id: str, runs: int) -> dict:
    out = {}
    sql = db.query("search_rfp_items_page")
    for kind, term in TERMS.items():
        pattern = rfps.like_pattern(term)
        args = (rfp_id, 50, 0, pattern, False, None)
        times: dict[bool, list[float]] = {True: [], False: []}
        found: dict[bool, list] = {}
        for run in range(runs):
            for before in (True, False) if run % 2 else (False, True):
                ms, rows = await timed(conn, before, sql, *args)
                times[before].append(ms)
                found[before] = [(row["id"], row["total"]) for row in rows]
        if found[True] != found[False]:
            raise SystemExit(f"{term!r}: the index changed the rows")
        before_ms, after_ms = statistics.median(times[True]), statistics.median(times[False])
        out[kind] = {"term": term, "matches": found[True][0][1], "before_ms": round(before_ms, 1),
                     "after_ms": round(after_ms, 1), "after_over_before": round(after_ms / before_ms, 3)}
    return out


async def writes(conn: asyncpg.Connection, rfp_id: str, items: int, runs: int) -> dict:
    rng = random.Random(5)
    words = vocabulary(rng)
    out = {}
    for chars in (1_000, 10_000, 100_000):
        times: dict[bool, list[float]] = {True: [], False: []}
        for run in range(3 * runs):
            text = ""
            while len(text) < chars:
                text += " ".join(rng.choices(words[0], words[1], k=200)) + " "
            item = f"item_{rfp_id}_{rng.randint(1, items)}"
            for before in (True, False) if run % 2 else (False, True):
                ms, rows = await timed(conn, before, "UPDATE rfp_items SET answer = $2, updated_at = now()"
                                       " WHERE id = $1 RETURNING id", item, text[:chars])
                assert len(rows) == 1
                times[before].append(ms)
        out[f"{chars:,} characters"] = {
            "before_ms": round(statistics.median(times[True]), 2),
            "after_ms": round(statistics.median(times[False]), 2),
            "after_mean_ms": round(statistics.fmean(times[False]), 2),  # the pending list's flushes
        }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=PER_RFP)
    parser.add_argument("--other-items", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    admin_url, server = _setup.server_url()
    name = f"rfp_bench_{secrets.token_hex(4)}"
    try:
        url = await _setup.fresh_database(admin_url, name)
        conn = await asyncpg.connect(url)
        try:
            started = time.perf_counter()
            rfp_id, built = await load(conn, args.items, args.other_items)
            loaded = time.perf_counter() - started
            result = {
                "items": args.items, "other_items": args.other_items, "runs": args.runs,
                "load_s": round(loaded, 1), "index_build_s": round(built, 1),
                "server": await conn.fetchval("SHOW server_version"),
                "index_mb": round(await conn.fetchval(
                    "SELECT pg_relation_size('rfp_items_search_trgm')") / 2**20, 1),
                "table_mb": round(await conn.fetchval(
                    "SELECT pg_table_size('rfp_items')") / 2**20, 1),
                "search": await searches(conn, rfp_id, args.runs),
                "answer_write": await writes(conn, rfp_id, args.items, args.runs),
                "machine": _setup.machine(),
            }
        finally:
            await conn.close()
        print(json.dumps(result, indent=1))
    finally:
        admin = await asyncpg.connect(admin_url)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
