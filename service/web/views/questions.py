"""Questions: ask (charged, idempotent), read, and follow a question's state as Server-Sent Events.

`create_question` is the one way to store a question; the RFP workflow uses it too.
"""

from __future__ import annotations

import asyncpg
from aiohttp import web

from ...domain import audit
from ...domain.convert import unstructure
from ...domain.errors import ValidationFailed
from ...domain.ids import new_id
from ...domain.questions import (
    MAX_IDEMPOTENCY_KEY,
    Question,
    _replay,
    ask_question,
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


def _accepted(row: asyncpg.Record) -> web.Response:
    response = json_response(unstructure(Question.from_row(row)), status=202)
    response.headers["Location"] = f"/api/v1/questions/{row['id']}"
    return response


@requires("write", roles=("admin", "member", "viewer"))
async def post_question(request: web.Request) -> web.Response:
    settings = request.app[CONFIG].questions
    fields, body = await read_object(request, "question")
    ask = parse_ask(body, fields, settings.max_question_chars, settings.max_custom_prompt_chars)
    key = _idempotency_key(request)
    who = principal(request)
    pipeline = request.app[PIPELINE]
    async with connection(request) as conn:
        question_id = await _replay(conn, who.member_id, key, ask) if key else None
        if question_id is None:
            # Handed straight to this process's pipeline when it has room: stored leased to it.
            new_question = new_id("q")
            owner = pipeline.reserve(new_question)
            try:
                # The ask is one statement; its audit event commits with it.
                async with conn.transaction():
                    row = await ask_question(
                        conn, account_id=who.account_id, user_id=who.user_id, text=ask.question,
                        detail_level=ask.detail_level, custom_prompt=ask.custom_prompt,
                        rfp_id=None, rfp_item_id=None, member_id=who.member_id,
                        cost=settings.credits_per_question, idempotency_key=key,
                        request_hash=ask.fingerprint() if key else None, question_id=new_question,
                        lease_owner=owner, lease_seconds=settings.lease_seconds,
                    )
                    await audit.record(conn, actor(request), "question.asked", record_id=new_question,
                                       after={"credits": settings.credits_per_question})
            except asyncpg.UniqueViolationError:
                pipeline.unreserve(new_question)
                # The same key raced in from a concurrent retry: answer like a replay.
                question_id = await _replay(conn, who.member_id, key or "", ask)
                if question_id is None:
                    raise
                row = await fetch_question(conn, question_id, who.account_id)
            except BaseException:
                # Refused (or cancelled, committed or not: a stored question's lease just
                # expires and any process resumes it).
                pipeline.unreserve(new_question)
                raise
            else:
                if owner is not None:
                    await pipeline.adopt(row)
                else:
                    pipeline.wake()  # (other processes are woken by the question's announcement)
                if settings.credits_per_question:  # counted once committed
                    request.app[METRICS].credits_debited.labels("question").inc(
                        settings.credits_per_question
                    )
        else:
            row = await fetch_question(conn, question_id, who.account_id)
    if key and row["state"] != "new":
        # A replay answers with the first response: the question as it was when accepted.
        row = {**dict(row), "state": "new", "answer": None, "confidence": None,
               "confidence_rationale": None, "requires_attention": False, "attention_points": None,
               "sufficient_context": None, "references": None, "verbatim_answer": False,
               "updated_at": row["created_at"]}
    return _accepted(row)


@requires("read")
async def get_question(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await fetch_question(conn, request.match_info["id"], principal(request).account_id)
    return json_response(unstructure(Question.from_row(row)))
