"""Assigned items across RFPs, written straight into the tables: the "My items" tests' data
(tests/domain/test_assigned_items.py, tests/web/test_pages_my_items.py)."""

from __future__ import annotations

import datetime
from typing import Any


async def deadline_rfp(conn: Any, make_rfp: Any, owner: Any, title: str, deadline: str | None) -> str:
    rfp_id = await make_rfp(owner, title)
    if deadline is not None:
        await conn.execute("UPDATE rfps SET deadline = $2 WHERE id = $1", rfp_id,
                           datetime.date.fromisoformat(deadline))
    return rfp_id


async def add_items(conn: Any, rfp_id: str, *specs: tuple[int, int | None, str]) -> list[str]:
    """Items of the RFP, one for each (position, assignee's user id or None, state)."""
    ids = [f"item_{rfp_id[-8:]}_{position}" for position, _, _ in specs]
    await conn.executemany(
        "INSERT INTO rfp_items (id, rfp_id, question, position, assignee_id, state, answer, confidence)"
        " VALUES ($1, $2, $3, $4, $5, $6::rfp_item_state,"
        "         CASE WHEN $6 = 'pending' THEN NULL ELSE 'An answer.' END,"
        "         CASE WHEN $6 = 'pending' THEN NULL ELSE 0.95 END)",
        [(item_id, rfp_id, f"Question {position} of {rfp_id[-8:]}?", position, assignee, state)
         for item_id, (position, assignee, state) in zip(ids, specs, strict=True)])
    return ids
