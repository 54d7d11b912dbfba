"""How long "answer all" on a large RFP holds its account: every ask of the account waits for the
account's row, which answering locks until it commits.

    .venv/bin/python bench/answer_all.py [--items 10000] [--rounds 3]

Each round imports an RFP of `--items` items into a fresh account and answers all of them
(domain `answer_pending_items`, as `POST /api/v1/rfps/{id}/answer` does); a single ask of the same
account is sent on a second connection once the answering transaction holds the account's row.
Reported: the answering call's wall time and that ask's, medians over the rounds (milliseconds).
The pipeline does not run: only the storing is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import time

import _setup  # the scratch database; puts the checkout on sys.path
import asyncpg

from service.domain import accounts, rfp_items, rfps
from service.domain.questions import create_question
from service.domain.tokens import Principal


async def one_round(url: str, items: int) -> tuple[float, float]:
    conn = await asyncpg.connect(url)
    other = await asyncpg.connect(url)
    try:
        made = await accounts.create_account(conn, "Bench", "bench@example.test", credits=10 * items)
        account_id, member = made["account"]["id"], made["member"]
        data = rfps.RfpCreate(title="Large", items=[
            rfps.ItemInput(question=f"Do you encrypt customer data of kind {i} at rest?")
            for i in range(items)])
        rfp_id = await rfps.create_rfp(conn, account_id=account_id, owner_user_id=member["user_id"],
                                       data=data)
        who = Principal(member_id=member["id"], user_id=member["user_id"], account_id=account_id,
                        role="owner", scopes=frozenset(), name="Bench", email="bench@example.test")

        async def answer_all() -> float:
            started = time.perf_counter()
            await rfp_items.answer_pending_items(conn, who, rfp_id, rfp_items.AnswerOptions(), 1)
            return (time.perf_counter() - started) * 1000

        answering = asyncio.ensure_future(answer_all())
        # The account row is locked once the questions are being stored.
        pid = conn.get_server_pid()
        while not answering.done() and not await other.fetchval(  # noqa: ASYNC110 (polls the database)
            "SELECT state = 'active' AND query LIKE '%INSERT INTO questions%'"
            "  FROM pg_stat_activity WHERE pid = $1", pid,
        ):
            await asyncio.sleep(0.001)
        started = time.perf_counter()
        await create_question(other, account_id=account_id, user_id=member["user_id"],
                              text="Is data encrypted in transit?")
        ask_ms = (time.perf_counter() - started) * 1000
        return await answering, ask_ms
    finally:
        await conn.close()
        await other.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    admin_url, server = _setup.server_url()
    try:
        answer_ms, ask_ms = [], []
        for _ in range(args.rounds):
            name = f"rfp_bench_{secrets.token_hex(4)}"
            url = await _setup.fresh_database(admin_url, name)
            try:
                answered, asked = await one_round(url, args.items)
            finally:
                admin = await asyncpg.connect(admin_url)
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await admin.close()
            answer_ms.append(answered)
            ask_ms.append(asked)
        print(json.dumps({
            "items": args.items, "rounds": args.rounds,
            "answer_all_ms": {"median": round(statistics.median(answer_ms), 1),
                              "runs": [round(x, 1) for x in answer_ms]},
            "ask_of_the_same_account_meanwhile_ms": {"median": round(statistics.median(ask_ms), 1),
                                                     "runs": [round(x, 1) for x in ask_ms]},
        }))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
