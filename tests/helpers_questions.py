"""Shared by the question tests: knowledge-base rows and waiting for a question to complete."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from service.domain.ids import new_id


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
