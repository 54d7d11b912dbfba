"""Learning from review: an answer a person approves, or corrects, becomes knowledge.

`POST /api/v1/questions/{id}/review` {"approved": true, "answer"?: corrected text} stores the
question with the approved (or corrected) answer as a knowledge-base entry, so the same question
asked again is answered verbatim with high confidence (service/coverage.py: an entry written for
exactly this question). Reviewing it again, or reviewing the same question asked again, updates
that entry (200) instead of adding another (201). The RFP item review's "save to knowledge base"
can call `save_review`.
"""

from __future__ import annotations

import asyncpg
import attrs
from aiohttp import web

from ... import db
from ...answering.embeddings import entries_written
from ...domain.convert import structure, unstructure
from ...domain.errors import ValidationFailed
from ...domain.ids import new_id
from ..auth import connection, principal, requires
from ..body import read_json
from ..responses import json_response
from .knowledge import MAX_ANSWER, MAX_QUESTION, KnowledgeItem
from .questions import fetch_question


@attrs.frozen(kw_only=True)
class Review:
    approved: bool
    answer: str | None = None  # the corrected answer; absent: the question's own answer


async def save_review(
    conn: asyncpg.Connection, account_id: str, question_id: str, answer: str | None
) -> tuple[KnowledgeItem, bool]:
    """Store question `question_id` with `answer` (or its own answer) as a knowledge-base entry:
    (the entry, whether it is new). The entry an earlier review of this question (or of the same
    question text) saved is updated rather than duplicated."""
    row = await fetch_question(conn, question_id, account_id)
    text = answer if answer is not None else row["answer"]
    details = []
    if answer is None and (row["state"] != "complete" or not row["sufficient_context"]):
        details.append("answer: required when the question has no drafted answer to approve")
    elif text is None or not text.strip():
        details.append("answer: must not be blank")
    elif len(text) > MAX_ANSWER:
        details.append(f"answer: must be at most {MAX_ANSWER} characters")
    if len(row["question"]) > MAX_QUESTION:
        details.append(f"question: longer than {MAX_QUESTION} characters; add the entry by hand")
    if details:
        raise ValidationFailed(details)
    saved = await conn.fetchrow(
        db.query("save_review_item"),
        new_id("kb"), account_id, row["question"], text, f"review of question {question_id}",
        question_id,
    )
    return KnowledgeItem.from_row(saved), saved["created"]


@requires("write", roles=("admin", "member"))
async def post_review(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed(['the body must be a JSON object: {"approved": true, "answer"?: …}'])
    review = structure(body, Review)
    if not review.approved and review.answer is None:
        raise ValidationFailed(["approved: must be true, or give the corrected answer"])
    async with connection(request) as conn:
        item, created = await save_review(
            conn, principal(request).account_id, request.match_info["id"], review.answer
        )
    entries_written(request.app)
    response = json_response(unstructure(item), status=201 if created else 200)
    response.headers["Location"] = f"/api/v1/knowledge_base_items/{item.id}"
    return response

