"""Learning from review: an answer a person approves, or corrects, becomes knowledge.

`POST /api/v1/questions/{id}/review` {"approved": true, "answer"?: corrected text} stores the
question with the approved (or corrected) answer as a knowledge-base entry, so the same question
asked again is answered verbatim with high confidence (service/coverage.py: an entry written for
exactly this question). Reviewing it again, or reviewing the same question asked again, updates
that entry (200) instead of adding another (201). The RFP item review's "save to knowledge base"
saves through the same domain function (`knowledge.save_reviewed_answer`).
"""

from __future__ import annotations

from aiohttp import web

from ...domain.convert import structure, unstructure
from ...domain.errors import ValidationFailed
from ...domain.knowledge import Review, save_review
from ..actors import actor
from ..auth import connection, principal, requires
from ..body import read_json
from ..responses import json_response
from .knowledge import entries_written


@requires("write", roles=("admin", "member"))
async def post_review(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed(['the body must be a JSON object: {"approved": true, "answer"?: …}'])
    review = structure(body, Review)
    if not review.approved and review.answer is None:
        raise ValidationFailed(["approved: must be true, or give the corrected answer"])
    who = principal(request)
    async with connection(request) as conn:
        item, created = await save_review(
            conn, who.account_id, request.match_info["id"], review.answer, who.member_id,
            actor=actor(request), approved=review.approved,
        )
    entries_written(request.app)
    response = json_response(unstructure(item), status=201 if created else 200)
    response.headers["Location"] = f"/api/v1/knowledge_base_items/{item.id}"
    return response
