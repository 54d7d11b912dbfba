"""Confidence bands: how sure the service is that an answer can be used, in three words.

The one place that turns a confidence into a band; the pipeline, the API and the web app ask here.
"""

from __future__ import annotations

from typing import Literal

from service.config import QuestionsConfig

Band = Literal["auto_answer", "review", "needs_input"]
BANDS: tuple[Band, ...] = ("auto_answer", "review", "needs_input")
LABELS: dict[Band, str] = {"auto_answer": "Auto-answer", "review": "Review", "needs_input": "Needs input"}


def band(confidence: float | None, requires_attention: bool, settings: QuestionsConfig) -> Band:
    """An answer that asks for attention is never used as drafted, whatever its confidence."""
    if confidence is None:
        return "needs_input"
    if confidence >= settings.auto_answer_confidence and not requires_attention:
        return "auto_answer"
    if confidence >= settings.review_confidence:
        return "review"
    return "needs_input"
