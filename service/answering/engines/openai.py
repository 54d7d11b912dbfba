"""An engine on any OpenAI-compatible chat-completions endpoint, grounded only in the references.

The model is asked for a JSON object {answer, sufficient_context, attention_points}. Timeouts,
connection errors, 429 and 5xx replies, and malformed replies are retried with exponential
backoff; when the attempts are used up it raises EngineFailure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import aiohttp

from ...config import OpenAIConfig
from ...domain.convert import DETAIL_LEVELS
from . import AnswerRequest, Draft, EngineFailure

log = logging.getLogger(__name__)

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


class RetryableError(Exception):
    pass


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
    """The model's JSON answer as a Draft; RetryableError when the reply is not what was asked."""
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
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise RetryableError(f"malformed reply: {exc}") from None
    known = {ref.kb_item_id for ref in request.references}
    used = tuple(i for i in data.get("used") or [] if isinstance(i, str) and i in known)
    points = tuple(str(p) for p in data.get("attention_points") or [] if isinstance(p, str | int | float))
    return Draft(text=answer, sufficient_context=sufficient, used=used, attention_points=points)


class OpenAIEngine:
    name = "openai"

    def __init__(self, config: OpenAIConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.config.api_key_env, "")
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _attempt(self, body: dict, request: AnswerRequest) -> Draft:
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_seconds)
        try:
            async with self.session.post(
                self.url, json=body, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status == 429 or response.status >= 500:
                    raise RetryableError(f"HTTP {response.status} from the model server")
                if response.status >= 400:
                    # The body may echo the prompt, the key's name or the provider's internals:
                    # it goes to the operator's log, never into the user's attention points.
                    log.warning("model server answered HTTP %s: %s",
                                response.status, (await response.text())[:2000])
                    raise EngineFailure(
                        f"HTTP {response.status} from the model server (details in the service log)"
                    )
                try:
                    payload = await response.json(content_type=None)
                except ValueError:
                    raise RetryableError("malformed reply: not JSON") from None
        except TimeoutError:
            raise RetryableError(f"no reply within {self.config.timeout_seconds:g} s") from None
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection failed: {type(exc).__name__}") from None
        return parse_reply(payload, request)

    async def answer(self, request: AnswerRequest) -> Draft:
        body = {
            "model": self.config.model,
            "messages": build_messages(request),
            "temperature": self.config.temperature,
            "response_format": {"type": "json_object"},
        }
        delay = self.config.backoff_seconds
        last = "no attempt made"
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                return await self._attempt(body, request)
            except RetryableError as exc:
                last = str(exc)
                log.warning("model attempt %d/%d failed: %s", attempt, self.config.max_attempts, last)
            if attempt < self.config.max_attempts:
                await asyncio.sleep(delay)
                delay *= 2
        raise EngineFailure(f"{self.config.max_attempts} attempts failed; last: {last}")
