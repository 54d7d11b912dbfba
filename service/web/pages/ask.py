"""Ask one question and watch it move through its states to the answer."""

from __future__ import annotations

from aiohttp import web

from ...domain.convert import unstructure
from ...domain.questions import Question, ask, fetch_question, parse_ask
from ..actors import actor
from ..auth import connection
from ..keys import CONFIG, METRICS, PIPELINE
from ..responses import json_response
from .common import band_of, page, principal, read_form, render, see_other

# Anyone signed in may ask, as in the API (POST /api/v1/questions admits viewers).
ASKERS = ("admin", "member", "viewer")


@page()
async def ask_form(request: web.Request) -> web.StreamResponse:
    return render(request, "ask.html", {"question": None})


@page(write=True, roles=ASKERS)
async def ask_page(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    settings = request.app[CONFIG].questions
    fields = {"question": str(form.get("question") or "")}
    level = str(form.get("detail_level") or "")
    if level:
        fields["answer_detail_level"] = int(level) if level.isdigit() else level
    parsed = parse_ask({}, fields, settings.max_question_chars, settings.max_custom_prompt_chars)
    pipeline = request.app[PIPELINE]
    # The API's ask (views/questions.py): the same charge, audit event and hand-off.
    async with connection(request) as conn:
        asked = await ask(
            conn, principal(request), parsed, None, cost=settings.credits_per_question,
            lease_seconds=settings.lease_seconds, reservations=pipeline, actor=actor(request),
        )
        if asked.stored is not None:
            if asked.lease_owner is not None:
                await pipeline.adopt(asked.stored)
            else:
                pipeline.wake()
            if settings.credits_per_question:
                request.app[METRICS].credits_debited.labels("question").inc(settings.credits_per_question)
    raise see_other(f"/ask/{asked.row['id']}")


async def _question(request: web.Request) -> Question:
    async with connection(request) as conn:
        row = await fetch_question(conn, request.match_info["id"], principal(request).account_id)
    return Question.from_row(row)


@page()
async def question_page(request: web.Request) -> web.StreamResponse:
    question = await _question(request)
    band = (band_of(request, question.confidence, question.requires_attention)
            if question.state == "complete" else None)
    return render(request, "ask.html", {"question": question, "band": band})


@page()
async def question_state(request: web.Request) -> web.StreamResponse:
    """Polled by the question page until the question is complete (static/app/app.js)."""
    question = await _question(request)
    return json_response({"state": question.state, "updated_at": unstructure(question.updated_at)})
