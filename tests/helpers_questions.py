"""Shared by the question tests: knowledge-base rows, waiting for a question to complete, and
holding one where it is."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from service.domain.ids import new_id
from tests.conftest import CONNECT


async def add_entry(
    conn: asyncpg.Connection, account_id: str, question: str | None, answer: str,
    title: str | None = None, external_id: str | None = None,
) -> str:
    kb_id = new_id("kb")
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer, title, external_id)"
        " VALUES ($1, $2, $3, $4, $5, $6)",
        kb_id, account_id, question, answer, title, external_id,
    )
    return kb_id


async def wait_complete(client: Any, question_id: str, headers: dict, seconds: float = 15) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        response = await client.get(f"/api/v1/questions/{question_id}", headers=headers)
        assert response.status == 200
        body = await response.json()
        if body["state"] == "complete":
            return body
        assert time.monotonic() < deadline, f"still {body['state']} after {seconds} s"
        await asyncio.sleep(0.05)


async def ask(client: Any, headers: dict, text: str, **extra: Any) -> Any:
    return await client.post(
        "/api/v1/questions", json={"question": {"question": text, **extra}}, headers=headers
    )


async def balance_and_ledger(conn: asyncpg.Connection, account_id: str) -> tuple[int, int]:
    balance = await conn.fetchval("SELECT credits FROM accounts WHERE id = $1", account_id)
    ledger = await conn.fetchval(
        "SELECT coalesce(sum(amount), 0) FROM credit_ledger WHERE account_id = $1", account_id
    )
    return balance, ledger



async def wait_all_complete(conn: asyncpg.Connection, seconds: float) -> None:
    unfinished = "SELECT count(*) FROM questions WHERE state <> 'complete'"
    async with asyncio.timeout(seconds):
        while await conn.fetchval(unfinished):  # noqa: ASYNC110 (polls the database, not an event)
            await asyncio.sleep(0.05)


async def answers_lexically_warning_once(
    aiohttp_client: Any, config: Any, conn: asyncpg.Connection, admin: Any, caplog: Any,
    embeddings: dict, asks: int = 1,
) -> None:
    """On a server without pgvector (no knowledge_embeddings table), the service configured with
    `embeddings` starts, answers `asks` questions from lexical retrieval, and says why once."""
    from service.web.app import create_app
    from tests.conftest import with_config

    await conn.execute("DROP TABLE IF EXISTS knowledge_embeddings")
    await add_entry(conn, admin.account_id, "How often are backups taken?", "Nightly, kept 30 days.")
    caplog.set_level("WARNING", logger="service.answering.embeddings")
    client = await aiohttp_client(create_app(with_config(config, embeddings=embeddings)))
    for _ in range(asks):
        response = await ask(client, admin.headers, "How often are backups taken?")
        assert response.status == 202, await response.text()
        body = await wait_complete(client, (await response.json())["id"], admin.headers)
        assert body["references"], "answered lexically from the knowledge base"
    warnings = [r for r in caplog.records if "pgvector is not installed" in r.getMessage()]
    assert len(warnings) == 1


@contextlib.asynccontextmanager
async def question_held(database: str | asyncpg.Connection, question_id: str) -> AsyncIterator[None]:
    """While inside, the question stays where it is however loaded the machine: its row is
    locked, so claims pass it over (SKIP LOCKED) and a pipeline working on it cannot store its
    next state (every step slowed by step_delay_seconds is stored on its own). Plain reads are
    not blocked. A question its pipeline already works on is held by a connection opened before
    it was asked (`database`): connecting only then took long enough, on a loaded machine, for
    the first step to be stored first."""
    locker = database if isinstance(database, asyncpg.Connection) else await asyncpg.connect(
        database, **CONNECT)
    try:
        async with locker.transaction():
            await locker.execute("SELECT 1 FROM questions WHERE id = $1 FOR UPDATE", question_id)
            yield
    finally:
        if locker is not database:
            await locker.close()
