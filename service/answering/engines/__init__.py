"""Answer engines: turn a question and its retrieved references into a draft answer.

Every engine implements `AnswerEngine`; the pipeline knows nothing else about them. Whether the
references cover the question, and how confident that makes us, is decided in
`service/coverage.py`.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from ..retrieval import Reference


@attrs.frozen(kw_only=True)
class AnswerRequest:
    question: str
    references: tuple[Reference, ...]
    detail_level: int  # 0 low, 1 normal, 2 high
    custom_prompt: str | None = None
    context: str | None = None  # the RFP's background, when the question belongs to one


@attrs.frozen(kw_only=True)
class Draft:
    text: str
    sufficient_context: bool
    # Entries the text was taken from, best first.
    used: tuple[str, ...] = ()
    # What the engine itself says a person should check.
    attention_points: tuple[str, ...] = ()


class EngineFailure(Exception):
    """The engine could not produce an answer (retries exhausted); the message says why."""


class AnswerEngine(Protocol):
    name: str

    async def answer(self, request: AnswerRequest) -> Draft: ...
