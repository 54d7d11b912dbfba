"""Ask one question and watch it move through its states to the answer."""

from __future__ import annotations

from aiohttp import web

from ...domain.convert import unstructure
from ...domain.questions import Question, fetch_question, parse_ask
from ..auth import connection
from ..keys import CONFIG
from ..ratelimit import take_or_refuse
from ..responses import json_response
from ..views.questions import ask_and_start
from .common import band_of, page, principal, read_form, render, see_other

# Anyone signed in may ask, as in the API (POST /api/v1/questions admits viewers).
ASKERS = ("admin", "member", "viewer")
ASK_ROUTE = "ask_question"  # the API route whose rate limit asking here shares


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
        # int() only for a few ASCII digits ("²" is a digit to isdigit, and int() refuses over
        # 4,300 digits); anything else goes as it came, for the validation to name.
        fields["answer_detail_level"] = (
            int(level) if level.isascii() and level.isdigit() and len(level) < 4 else level)
    parsed = parse_ask({}, fields, settings.max_question_chars, settings.max_custom_prompt_chars)
    # The API's limit on asking (rate_limits.ask_question), from the same bucket: this form is
    # another door to the same charged work (a probe asked 30 times in 0.6 s here after the
    # API had refused its 11th).
    limit = request.app[CONFIG].rate_limits.get(ASK_ROUTE)
    if limit is not None:
        await take_or_refuse(request, ASK_ROUTE, limit)
    asked = await ask_and_start(request, parsed, None)  # as the API asks: charged, audited
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
