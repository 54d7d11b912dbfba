"""Coverage: does the knowledge base hold enough to answer a question? The engine's decision signal.

`assess` looks at the retrieved references (best first) and says whether the first one answers
the question, with a confidence that is the measured share of such decisions that were right on
the development set (docs/answer-quality.md). Lexical retrieval alone is not sure of much: no
decision gets a confidence of 0.8 or more, so "confidence ≥ 0.8" never promises what it can't keep.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import attrs

from .retrieval import Reference

# From this first-reference score on, the entry is taken to answer the question. Chosen for the
# best decision accuracy on the development set (score < 0.30 there was 70% "not covered").
SUFFICIENT_SCORE = 0.30
# Measured right-rates on the development set: "not covered" below the threshold, and the first
# reference correct above it (rising slowly with the score).
NOT_COVERED_CONFIDENCE = 0.7
COVERED_CONFIDENCE_BASE = 0.25
COVERED_CONFIDENCE_SLOPE = 0.25
MAX_CONFIDENCE = 0.75


@attrs.frozen(kw_only=True)
class Coverage:
    sufficient: bool
    confidence: float  # in [0, 1]: how likely the decision (either way) is right
    rationale: str


async def assess(
    conn: asyncpg.Connection, account_id: str, question: str, references: Sequence[Reference]
) -> Coverage:
    """Whether `references[0]` answers `question`; `conn` and `account_id` are for future signals."""
    if not references:
        return Coverage(
            sufficient=False,
            confidence=MAX_CONFIDENCE,
            rationale="no knowledge-base entry shares a term with the question",
        )
    best = references[0]
    name = best.external_id or best.kb_item_id
    if best.score < SUFFICIENT_SCORE:
        return Coverage(
            sufficient=False,
            confidence=NOT_COVERED_CONFIDENCE,
            rationale=(
                f"the closest entry ({name}) matches only {best.coverage:.0%} of the question's "
                f"weighted terms (score {best.score:.2f} < {SUFFICIENT_SCORE:.2f})"
            ),
        )
    confidence = min(MAX_CONFIDENCE, COVERED_CONFIDENCE_BASE + COVERED_CONFIDENCE_SLOPE * best.score)
    return Coverage(
        sufficient=True,
        confidence=round(confidence, 2),
        rationale=(
            f"entry {name} matches {best.coverage:.0%} of the question's weighted terms, "
            f"{best.question_match:.0%} in its own question (score {best.score:.2f})"
        ),
    )
