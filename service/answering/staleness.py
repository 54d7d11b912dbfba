"""Stale knowledge entries (past their review date, service/domain/library.py) in answering.

The references a question drew on carry the entry's version and, when it is stale, its review
date (`Reference.kb_version` and `stale_since`, read with the candidates); an answer drawn from a
stale entry then asks for attention and its confidence is capped under the auto-answer band, so
`bands.band` never puts it (or its RFP item) there.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import QuestionsConfig
from ..domain.library import stale_attention_point
from .retrieval import Reference


def stale_points(references: Sequence[Reference], used: Sequence[str]) -> tuple[str, ...]:
    """An attention point per stale entry the answer drew on (the entries it used; all of them
    when the engine named none)."""
    drawn = [ref for ref in references if ref.kb_item_id in used] if used else list(references)
    return tuple(stale_attention_point(ref.kb_item_id, ref.stale_since)
                 for ref in drawn if ref.stale_since is not None)


def below_auto_answer(confidence: float, settings: QuestionsConfig) -> float:
    """The confidence capped just under the auto-answer band (its review band is unchanged)."""
    return min(confidence, max(settings.review_confidence, settings.auto_answer_confidence - 0.01))
