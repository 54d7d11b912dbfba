"""Retrieval: the knowledge-base entries that may answer a question, best first.

The interface (`find_references`, `Reference`) is what the pipeline and the engines rely on;
the ranking behind it can change.
"""

from __future__ import annotations

import asyncpg
import attrs

from . import db


@attrs.frozen(kw_only=True)
class Reference:
    kb_item_id: str
    external_id: str | None
    title: str | None
    question: str | None
    answer: str
    source: str | None
    score: float  # in [0, 1]; higher is a better match


async def find_references(
    conn: asyncpg.Connection, account_id: str, text: str, limit: int = 5
) -> list[Reference]:
    rows = await conn.fetch(db.query("find_references"), account_id, text, limit)
    return [
        Reference(
            kb_item_id=row["id"],
            external_id=row["external_id"],
            title=row["title"],
            question=row["question"],
            answer=row["answer"],
            source=row["source"],
            # ts_rank_cd with normalisation 32 is rank/(rank+1): already in [0, 1).
            score=round(float(row["score"]), 4),
        )
        for row in rows
    ]
