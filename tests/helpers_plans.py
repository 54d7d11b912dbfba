"""Shared by the tests that check how PostgreSQL runs a statement: the plans it logs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg


@contextlib.asynccontextmanager
async def explained(conn: asyncpg.Connection, *settings: str) -> AsyncIterator[list[str]]:
    """The plans of the statements run in the block, nested ones (inside functions) too, as
    auto_explain logs them; the block is one transaction, with `settings` ("plan_cache_mode =
    force_generic_plan") set in it. Read the list after the block: the last notices arrive with
    its COMMIT."""
    plans: list[str] = []

    def listener(_: Any, message: Any) -> None:
        plans.append(message.message)

    conn.add_log_listener(listener)
    try:
        async with conn.transaction():
            await conn.execute("LOAD 'auto_explain'")
            await conn.execute("; ".join(f"SET LOCAL {setting}" for setting in (
                *settings, "auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                "auto_explain.log_level = notice", "client_min_messages = notice",
            )))
            yield plans
    finally:
        conn.remove_log_listener(listener)


def seq_scans(node: dict, found: set[str] | None = None) -> set[str]:
    """The tables a JSON plan node (EXPLAIN's "Plan") reads whole, its children's included."""
    found = set() if found is None else found
    if node.get("Node Type") == "Seq Scan":
        found.add(node["Relation Name"])
    for child in node.get("Plans", []):
        seq_scans(child, found)
    return found
