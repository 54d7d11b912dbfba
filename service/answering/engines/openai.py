"""An engine on any OpenAI-compatible chat-completions endpoint, grounded only in the references.

The model is asked for a JSON object {answer, sufficient_context, attention_points}. Timeouts,
connection errors, 429 and 5xx replies, and malformed replies are retried with exponential
backoff (openai_http.py, shared with the embeddings backend); when the attempts are used up it
raises EngineFailure.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from ...config import OpenAIConfig
from ...domain.convert import DETAIL_LEVELS
from ..openai_http import Retryable, post_with_retries
from . import AnswerRequest, Draft, EngineFailure

SYSTEM_PROMPT = """You answer questions from security and compliance questionnaires (RFPs) for a \
vendor. Use ONLY the knowledge-base entries given in the user message; never invent facts. If the \
entries do not answer the question, say so and set sufficient_context to false. Reply with one \
JSON object and nothing else: {"answer": string, "sufficient_context": boolean, \
"used": [entry ids you drew on], "attention_points": [short things a person should check]}."""

LENGTH = {
    0: "Answer in one or two sentences.",
    1: "Answer in a short paragraph.",
    2: "Answer thoroughly, including supporting detail from the entries.",
}


def build_messages(request: AnswerRequest) -> list[dict[str, str]]:
    parts = [f"Question: {request.question}", "", "Knowledge-base entries:"]
    if not request.references:
        parts.append("(none found)")
    for ref in request.references:
        parts.append(f"- id: {ref.kb_item_id}")
        if ref.title:
            parts.append(f"  title: {ref.title}")
        if ref.question:
            parts.append(f"  question: {ref.question}")
        parts.append(f"  answer: {ref.answer}")
    parts += ["", f"Detail level: {DETAIL_LEVELS[request.detail_level]}. {LENGTH[request.detail_level]}"]
    if request.context:
        parts += ["", f"Background about this RFP: {request.context}"]
    if request.custom_prompt:
        parts += ["", f"Additional instructions: {request.custom_prompt}"]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(parts)}]


def parse_reply(payload: Any, request: AnswerRequest) -> Draft:
    """The model's JSON answer as a Draft; Retryable when the reply is not what was asked."""
    try:
        content = payload["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError("content is not a string")
        content = content.strip()
        if content.startswith("```"):  # some servers wrap JSON in a code fence
            content = content.strip("`").removeprefix("json").strip()
        data = json.loads(content)
        answer = data["answer"]
        sufficient = data.get("sufficient_context", True)
        if not isinstance(answer, str) or not answer.strip() or not isinstance(sufficient, bool):
            raise TypeError("answer must be a non-empty string and sufficient_context a boolean")
        # The whole reply is checked here, inside the retry: a field of the wrong type ("used": 5)
        # raised later, outside it, and the question was retried forever.
        used_ids = data.get("used") or []
        points_given = data.get("attention_points") or []
        if not isinstance(used_ids, list) or not isinstance(points_given, list):
            raise TypeError("used and attention_points must be arrays")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise Retryable(f"malformed reply: {exc}") from None
    known = {ref.kb_item_id for ref in request.references}
    used = tuple(i for i in used_ids if isinstance(i, str) and i in known)
    points = tuple(str(p) for p in points_given
                   if isinstance(p, str | int | float) and not isinstance(p, bool))
    return Draft(text=answer, sufficient_context=sufficient, used=used, attention_points=points)


class OpenAIEngine:
    name = "openai"

    def __init__(self, config: OpenAIConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    async def answer(self, request: AnswerRequest) -> Draft:
        body = {
            "model": self.config.model,
            "messages": build_messages(request),
            "temperature": self.config.temperature,
            "response_format": {"type": "json_object"},
        }
        return await post_with_retries(
            self.session, self.url, body, self.config, lambda payload: parse_reply(payload, request),
            EngineFailure, what="model", server="model server",
        )
