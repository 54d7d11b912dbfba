"""Knowledge-base writes of one account at once: no deadlocks, and knowledge_terms and
knowledge_stats (the document frequencies retrieval weighs words by, kept by the
knowledge_terms_after_change trigger) right after every change."""

from __future__ import annotations

import asyncio

import asyncpg
from conftest import CONNECT, lock_waiters
from helpers_questions import add_entry

from service.domain import knowledge

_STILL_WAITING = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE knowledge_items%'
   AND datname = current_database()
"""


async def _terms(conn: asyncpg.Connection, account_id: str) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT lexeme, df FROM knowledge_terms WHERE account_id = $1 AND df > 0", account_id)
    return {r["lexeme"]: r["df"] for r in rows}


async def _recount(conn: asyncpg.Connection, account_id: str) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT l.lexeme, count(*)::integer AS df FROM knowledge_items k,"
        " unnest(tsvector_to_array(k.search_vector)) AS l(lexeme) WHERE k.account_id = $1"
        " GROUP BY 1", account_id)
    return {r["lexeme"]: r["df"] for r in rows}


async def test_two_entries_changed_at_once__both_commit_and_the_counts_stay_right(
    conn, database_url, make_account
):
    """A probe: two reviews saving entries from two processes got 500s, PostgreSQL's "deadlock
    detected" in the trigger. An UPDATE took the old words, the account's stats row, then the new
    words: X (mango -> apple) held "mango" and waited for the stats row, Y (apple -> mango) held
    "appl" and waited for it too; whichever got it next wanted the other's word. Here a third
    transaction holds the stats row until both are under way, which made that certain."""
    actor = await make_account()
    account_id = actor.account_id
    x = await add_entry(conn, account_id, "mango", "mango")
    y = await add_entry(conn, account_id, "apple", "apple")
    holder, first, second = [await asyncpg.connect(database_url, **CONNECT) for _ in range(3)]
    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM knowledge_stats WHERE account_id = $1 FOR UPDATE", account_id)

        async def change(connection: asyncpg.Connection, entry: str, text: str) -> None:
            await connection.execute(
                "UPDATE knowledge_items SET question = $2, answer = $2 WHERE id = $1", entry, text)

        async def under_way(task: asyncio.Task, waiting: int) -> None:
            """Until the statement is done or waits for a lock (with `waiting` others)."""
            async with asyncio.timeout(10):
                while not task.done() and await conn.fetchval(_STILL_WAITING) < waiting:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)

        one = asyncio.create_task(change(first, x, "apple"))
        await under_way(one, 1)
        two = asyncio.create_task(change(second, y, "mango"))
        await under_way(two, 1 + (not one.done()))
        await holding.commit()
        async with asyncio.timeout(20):
            results = await asyncio.gather(one, two, return_exceptions=True)
        assert results == [None, None]
    finally:
        for connection in (holder, first, second):
            await connection.close()
    assert await _terms(conn, account_id) == await _recount(conn, account_id) == {"appl": 1, "mango": 1}
    assert await conn.fetchval("SELECT items FROM knowledge_stats WHERE account_id = $1", account_id) == 2


async def test_many_changes_at_once__no_deadlock_and_counts_match_a_recount(conn, database_url, make_account):
    """Entries of one account rewritten, added and deleted from four connections at once."""
    actor = await make_account()
    account_id = actor.account_id
    words = ["encryption", "backup", "retention", "access", "audit", "incident", "vendor", "network"]
    entries = [await add_entry(conn, account_id, f"{w} policy", f"{w} answer") for w in words]
    connections = [await asyncpg.connect(database_url, **CONNECT) for _ in range(4)]

    async def worker(n: int, connection: asyncpg.Connection) -> None:
        for i in range(40):
            entry = entries[(n + i) % len(entries)]
            text = " ".join(words[(n * 3 + i + k) % len(words)] for k in range(3))
            await connection.execute(
                "UPDATE knowledge_items SET question = $2, answer = $3 WHERE id = $1",
                entry, text, text[::-1])
            if i % 10 == 0:
                async with connection.transaction():
                    extra = await add_entry(connection, account_id, f"{text} extra", "temporary")
                    await connection.execute("DELETE FROM knowledge_items WHERE id = $1", extra)

    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(worker(n, c) for n, c in enumerate(connections)))
    finally:
        for connection in connections:
            await connection.close()
    assert await _terms(conn, account_id) == await _recount(conn, account_id)
    assert await conn.fetchval("SELECT items FROM knowledge_stats WHERE account_id = $1",
                               account_id) == len(words)


async def test_an_update_that_changes_no_words__takes_no_lock_on_the_counts(conn, database_url, make_account):
    """An entry's review date, owner or tags change without touching its words: the counts and
    the account's stats row are left alone (another transaction holding them does not hold it up)."""
    actor = await make_account()
    entry = await add_entry(conn, actor.account_id, "Do you encrypt backups?", "Yes.")
    holder = await asyncpg.connect(database_url, **CONNECT)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM knowledge_stats WHERE account_id = $1 FOR UPDATE",
                                 actor.account_id)
            await holder.execute("SELECT 1 FROM knowledge_terms WHERE account_id = $1 FOR UPDATE",
                                 actor.account_id)
            async with conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '2s'")
                await conn.execute("UPDATE knowledge_items SET title = 'Backups' WHERE id = $1", entry)
    finally:
        await holder.close()
    assert await _terms(conn, actor.account_id) == await _recount(conn, actor.account_id)


async def test_two_imports_sharing_ids_in_other_orders__both_commit(conn, database_url, make_account):
    """A probe: two CSV imports at once whose ids overlap in another order deadlocked every time
    (one of them a 500): each inserted its rows in file order, so one held e1 and waited for e9
    while the other held e9 and waited for e1. A third transaction's uncommitted e5 holds the
    first import after e1 until the second has started, which made the crossing certain."""
    actor = await make_account()
    account_id = actor.account_id
    holder, first, second = [await asyncpg.connect(database_url, **CONNECT) for _ in range(3)]

    def csv(*ids: int) -> str:
        return "id,question,answer\n" + "".join(f"e{i},Question {i}?,Answer {i}.\n" for i in ids)

    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute("INSERT INTO knowledge_items (id, account_id, answer, external_id)"
                             " VALUES ('kb_held', $1, 'held', 'e5')", account_id)

        one = asyncio.create_task(knowledge.import_csv(first, account_id, csv(1, 5, 9)))
        await lock_waiters(conn, 1)  # holds e1, waits for e5
        two = asyncio.create_task(knowledge.import_csv(second, account_id, csv(9, 1)))
        await lock_waiters(conn, 2)
        await holding.rollback()
        async with asyncio.timeout(20):
            results = await asyncio.gather(one, two, return_exceptions=True)
        assert [type(r).__name__ for r in results] == ["ImportReport", "ImportReport"], results
    finally:
        for connection in (holder, first, second):
            await connection.close()
    stored = await conn.fetch("SELECT external_id FROM knowledge_items WHERE account_id = $1"
                              " ORDER BY 1", account_id)
    assert [r["external_id"] for r in stored] == ["e1", "e5", "e9"]
    assert await _terms(conn, account_id) == await _recount(conn, account_id)
