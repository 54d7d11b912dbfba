"""Duplicate and conflict detection at scale: N synthetic entries, some planted near-duplicates and
conflicts among them, one `find_duplicates` run (what GET …/knowledge_base_items/duplicates starts
in the background and `kb duplicates` runs), timed, with how many planted pairs it found.

    .venv/bin/python bench/duplicates.py 10000 [--runs 1]

Text as in bench/retrieval.py (Zipf over a 30,000-word vocabulary). 2 % of the entries get a
near-duplicate (the question with one word changed or dropped), 1 % a Yes/No conflict (the same
question answered "No"), 1 % a numbers conflict (the same question, "retained for 30 days" vs 90).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import time

import _setup  # puts the checkout on sys.path
from retrieval import sampler, words

from service import db
from service.domain import accounts, knowledge
from service.domain.ids import new_id
from service.domain.library import find_duplicates


def library(n: int, rng: random.Random) -> tuple[list[tuple[str, str]], dict[str, set[int]]]:
    """n (question, answer) pairs, of which some are planted pairs; {kind: {index of the copy}}."""
    text = sampler(rng, words(rng))
    base = n - int(n * 0.04)
    entries = [(text(rng.randint(8, 20)) + "?", "Yes. " + text(rng.randint(20, 80))) for _ in range(base)]
    planted: dict[str, set[int]] = {"duplicate": set(), "yes_no": set(), "numbers": set()}
    for kind, share in (("duplicate", 0.02), ("yes_no", 0.01), ("numbers", 0.01)):
        for _ in range(int(n * share)):
            question, answer = entries[rng.randrange(base)]
            if kind == "duplicate":
                tokens = question.rstrip("?").split()
                tokens[rng.randrange(len(tokens))] = text(1)
                entries.append((" ".join(tokens) + "?", answer))
            elif kind == "yes_no":
                entries.append((question, "No. " + answer.removeprefix("Yes. ")))
            else:
                index = rng.randrange(base)
                question = entries[index][0]
                entries[index] = (question, entries[index][1] + " Records are retained for 30 days.")
                entries.append((question, entries[index][1].replace("30 days", "90 days")))
            planted[kind].add(len(entries) - 1)
    return entries, planted


async def run(server_url: str, n: int, runs: int) -> dict:
    async with _setup.scratch_database(server_url) as conn:
        account_id = (await accounts.create_account(conn, "Bench", "b@example.invalid"))["account"]["id"]
        entries, planted = library(n, random.Random(7))
        ids = [new_id("kb") for _ in entries]
        started = time.perf_counter()
        for start in range(0, len(entries), 5_000):
            chunk = entries[start:start + 5_000]
            await conn.execute(
                db.query("upsert_knowledge_items"), account_id, ids[start:start + 5_000],
                [q for q, _ in chunk], [a for _, a in chunk], [None] * len(chunk),
                ["[]"] * len(chunk), [None] * len(chunk), [None] * len(chunk), [None] * len(chunk),
            )
        await knowledge.merge_pending_index(conn)
        await conn.execute("ANALYZE")
        load_s = time.perf_counter() - started
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            result = await find_duplicates(conn, account_id, duplicate_similarity=0.8,
                                           conflict_similarity=0.6)
            seconds.append(round(time.perf_counter() - started, 2))
            assert result is not None
        rows = await conn.fetch("SELECT item_a, item_b, kind, reason FROM knowledge_duplicates")
        index = {item_id: i for i, item_id in enumerate(ids)}
        found = {(max(index[r["item_a"]], index[r["item_b"]]), r["kind"], r["reason"]) for r in rows}
        recall = {
            "duplicate": sum(1 for i, k, _ in found if k == "duplicate" and i in planted["duplicate"]),
            "yes_no": sum(1 for i, k, r in found if k == "conflict" and "Yes by" in r
                          and i in planted["yes_no"]),
            "numbers": sum(1 for i, k, r in found if k == "conflict" and "numbers" in r
                           and i in planted["numbers"]),
        }
        return {
            "entries": len(entries), "load_seconds": round(load_s, 1), "find_seconds": seconds,
            "pairs": len(rows),
            "duplicates": sum(1 for r in rows if r["kind"] == "duplicate"),
            "conflicts": sum(1 for r in rows if r["kind"] == "conflict"),
            "planted": {kind: len(copies) for kind, copies in planted.items()},
            "planted_found": recall,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[10_000])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    url, server = _setup.server_url()
    try:
        for n in args.sizes:
            result = asyncio.run(run(url, n, args.runs))
            print(json.dumps({**result, "python": platform.python_version()}))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
