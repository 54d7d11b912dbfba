"""RFPs: read, search, create, update, and list an RFP's items."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from ...domain import rfps
from ...domain.convert import structure, unstructure
from ...domain.errors import NotFound, ParameterMissing, ValidationFailed
from ...domain.models import Page, rfp_json
from ...domain.rfps import (
    MAX_ITEMS_PER_CREATE,
    RfpCreate,
    create_rfp,
    fetch_rfp,
)
from ..actors import actor
from ..auth import Prefetch, connection, prefetched, principal, requires
from ..body import read_object
from ..keys import CONFIG
from ..responses import json_response


def _rfp_response(request: web.Request, row: asyncpg.Record, status: int = 200) -> web.Response:
    rfp = rfp_json(row, request.app[CONFIG].server.web_base_url, with_context=True)
    return json_response(rfp, status=status)


@requires("read", prefetch=Prefetch("principal_and_rfp", ("id",)))
async def get_rfp(request: web.Request) -> web.Response:
    row = prefetched(request)  # token and RFP in one round trip
    if row is None:
        async with connection(request) as conn:
            row = await fetch_rfp(conn, request.match_info["id"], principal(request).account_id)
    elif row["id"] is None:
        raise NotFound(f"no RFP {request.match_info['id']} in this account")
    return _rfp_response(request, row)


# At the cap, total_count says "at least this many" and this header says so (docs: Operations).
TOTAL_COUNT_CAPPED_HEADER = "X-Total-Count-Capped"


@requires("read")
async def search_rfps(request: web.Request) -> web.Response:
    term = request.query.get("query")
    if term is None:
        raise ParameterMissing("query is required: GET /api/v1/rfps/search?query=term")
    page = Page.from_query(request.query, max_rows=rfps.SEARCH_COUNT_CAP)
    async with connection(request) as conn:
        found = await rfps.search_rfps(conn, principal(request).account_id, term, page)
    base_url = request.app[CONFIG].server.web_base_url
    return json_response(
        {
            "rfps": [rfp_json(row, base_url, with_context=False) for row in found.rows],
            "pagination": page.pagination(found.total, len(found.rows)),
        },
        headers={TOTAL_COUNT_CAPPED_HEADER: "true"} if found.capped else None,
    )


@requires("write", roles=("admin", "member"))
async def post_rfp(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "rfp")
    # Counted before the items are read (as POST …/rfp_items does): structuring 100,000 empty
    # objects took 5 s, to answer with a detail for each.
    items = fields.get("items") if isinstance(fields, dict) else None
    if isinstance(items, list) and len(items) > MAX_ITEMS_PER_CREATE:
        raise ValidationFailed([f"rfp.items: at most {MAX_ITEMS_PER_CREATE} items per request"])
    data = structure(fields, RfpCreate, root="rfp")
    who = principal(request)
    async with connection(request) as conn:
        rfp_id = await create_rfp(
            conn, account_id=who.account_id, owner_user_id=who.user_id, data=data,
            actor=actor(request),
        )
        row = await fetch_rfp(conn, rfp_id, who.account_id)
    response = _rfp_response(request, row, status=201)
    response.headers["Location"] = f"/api/v1/rfps/{rfp_id}"
    return response


@requires("write", roles=("admin", "member"))
async def patch_rfp(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "rfp")
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        await rfps.update_rfp(conn, who.account_id, rfp_id, fields, actor=actor(request))
        row = await fetch_rfp(conn, rfp_id, who.account_id)
    return _rfp_response(request, row)


@requires("read")
async def list_rfp_items(request: web.Request) -> web.Response:
    """One page of an RFP's items; `?assignee=me|none|<user id>` only those assigned so,
    `?query=` only those whose question or answer holds it (the RFP search's rule and limits;
    absent or blank: every item)."""
    page = Page.from_query(request.query)
    who = principal(request)
    assignee = rfps.assignee_filter(request.query.get("assignee"), who.user_id)
    term = request.query.get("query", "")
    pattern = rfps.search_pattern(term, "query") if term.strip() else None
    async with connection(request) as conn:
        items, total = await rfps.list_items(
            conn, who.account_id, request.match_info["id"], page, assignee, pattern
        )
    return json_response(
        {
            "rfp_items": [unstructure(item) for item in items],
            "pagination": page.pagination(total, len(items)),
        }
    )
