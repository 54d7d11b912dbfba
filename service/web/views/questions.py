"""Questions: ask (charged, idempotent), read, and follow a question's state as Server-Sent Events.

`create_question` (service/domain/questions.py) stores a question; "answer all" stores an RFP's
items' questions with `create_item_questions` beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ...domain.convert import unstructure
from ...domain.errors import ValidationFailed
from ...domain.questions import (
    MAX_IDEMPOTENCY_KEY,
    Ask,
    Asked,
    Question,
    ask,
    fetch_question,
    parse_ask,
)
from ..actors import actor
from ..auth import connection, principal, requires
from ..body import read_object
from ..keys import CONFIG, METRICS, PIPELINE
from ..responses import json_response


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise ValidationFailed(
            [f"Idempotency-Key: must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters"]
        )
    return key


def _accepted(row: Mapping[str, Any]) -> web.Response:
    response = json_response(unstructure(Question.from_row(row)), status=202)
    response.headers["Location"] = f"/api/v1/questions/{row['id']}"
    return response


@requires("write", roles=("admin", "member", "viewer"))
async def post_question(request: web.Request) -> web.Response:
    settings = request.app[CONFIG].questions
    fields, body = await read_object(request, "question")
    parsed = parse_ask(body, fields, settings.max_question_chars, settings.max_custom_prompt_chars)
    asked = await ask_and_start(request, parsed, _idempotency_key(request))
    return _accepted(asked.row)


async def ask_and_start(request: web.Request, parsed: Ask, key: str | None) -> Asked:
    """Ask for the request's member (charged, audited) and start answering: handed to this
    process's pipeline when it has room, else announced to any process. The web app's ask page
    asks through this too."""
    settings = request.app[CONFIG].questions
    pipeline = request.app[PIPELINE]
    async with connection(request) as conn:
        asked = await ask(
            conn, principal(request), parsed, key, cost=settings.credits_per_question,
            lease_seconds=settings.lease_seconds, reservations=pipeline, actor=actor(request),
        )
    if asked.stored is not None:
        if asked.lease_owner is not None:
            await pipeline.adopt(asked.stored)
        else:
            pipeline.wake()  # (other processes are woken by the question's announcement)
        if settings.credits_per_question:  # counted once committed
            request.app[METRICS].credits_debited.labels("question").inc(settings.credits_per_question)
    return asked


@requires("read")
async def get_question(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await fetch_question(conn, request.match_info["id"], principal(request).account_id)
    return json_response(unstructure(Question.from_row(row)))
