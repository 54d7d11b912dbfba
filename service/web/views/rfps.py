"""RFPs: read, search, create, update, and list an RFP's items."""

from __future__ import annotations

from typing import Any

import asyncpg
import attrs
from aiohttp import web

from ... import db
from ...domain.convert import Framework, HttpUrl, IsoDate, NonBlank, at_most, structure, unstructure
from ...domain.errors import NotFound, ParameterMissing, ValidationFailed
from ...domain.ids import new_id
from ...domain.models import Page, RfpItem, rfp_json
from ...domain.tokens import Principal
from ..auth import Prefetch, connection, prefetched, principal, requires
from ..body import read_object
from ..keys import CONFIG
from ..responses import json_response

MAX_TITLE = 500
MAX_TEXT = 100_000
MAX_ITEMS_PER_CREATE = 5_000
# Search counts matches up to this many (500 pages): every search's work stays bounded.
SEARCH_COUNT_CAP = 10_000
TOTAL_COUNT_CAPPED_HEADER = "X-Total-Count-Capped"



@attrs.frozen(kw_only=True)
class ItemInput:
    question: NonBlank = attrs.field(validator=at_most(MAX_TEXT))
    section: str | None = attrs.field(default=None, validator=at_most(MAX_TITLE))


@attrs.frozen(kw_only=True)
class RfpInput:
    """The editable fields of an RFP; also the shape of a PATCH (absent fields unchanged)."""

    title: NonBlank = attrs.field(validator=at_most(MAX_TITLE))
    description: str | None = attrs.field(default=None, validator=at_most(MAX_TEXT))
    deadline: IsoDate | None = None
    framework: Framework | None = None
    portal_url: HttpUrl | None = attrs.field(default=None, validator=at_most(2048))
    context: str | None = attrs.field(default=None, validator=at_most(MAX_TEXT))


@attrs.frozen(kw_only=True)
class RfpCreate(RfpInput):
    items: list[ItemInput] = attrs.Factory(list)


def like_pattern(term: str) -> str:
    """An ILIKE pattern matching `term` anywhere, with %, _ and \\ in the term taken literally."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def fetch_rfp(conn: asyncpg.Connection, rfp_id: str, account_id: str) -> asyncpg.Record:
    row = await conn.fetchrow(db.query("get_rfp"), rfp_id, account_id)
    if row is None:
        raise NotFound(f"no RFP {rfp_id} in this account")
    return row


async def add_items(conn: asyncpg.Connection, rfp_id: str, items: list[ItemInput]) -> None:
    """Append items after the RFP's last one, in the given order."""
    if not items:
        return
    start = await conn.fetchval(db.query("next_item_position"), rfp_id)
    await conn.execute(
        db.query("insert_rfp_items"),
        rfp_id,
        [new_id("item") for _ in items],
        [item.question for item in items],
        [item.section for item in items],
        list(range(start, start + len(items))),
    )
    await conn.execute(db.query("touch_rfp"), rfp_id)


async def create_rfp(conn: asyncpg.Connection, who: Principal, data: RfpCreate) -> str:
    rfp_id = new_id("rfp")
    async with conn.transaction():
        await conn.execute(
            db.query("insert_rfp"),
            rfp_id,
            who.account_id,
            who.user_id,
            data.title.strip(),
            data.description,
            data.deadline,
            data.framework,
            data.portal_url,
            data.context,
        )
        await add_items(conn, rfp_id, data.items)
    return rfp_id


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


@requires("read")
async def search_rfps(request: web.Request) -> web.Response:
    term = request.query.get("query")
    if term is None or not term.strip():  # blank counts as missing: it would match everything
        raise ParameterMissing("query is required: GET /api/v1/rfps/search?query=term")
    page = Page.from_query(request.query)
    pattern = like_pattern(term)
    account_id = principal(request).account_id
    base_url = request.app[CONFIG].server.web_base_url
    async with connection(request) as conn, conn.transaction(readonly=True):
        await conn.execute(db.query("plan_each_search"))  # SET LOCAL: ends with the transaction
        total = await conn.fetchval(
            db.query("count_search_rfps_capped"), account_id, pattern, SEARCH_COUNT_CAP
        )
        rows = await conn.fetch(
            db.query("search_rfps"), account_id, pattern, page.size, page.offset
        )
    # At the cap, total_count says "at least this many" and a header says so (docs: Operations).
    headers = {TOTAL_COUNT_CAPPED_HEADER: "true"} if total >= SEARCH_COUNT_CAP else None
    return json_response(
        {
            "rfps": [rfp_json(row, base_url, with_context=False) for row in rows],
            "pagination": page.pagination(total, len(rows)),
        },
        headers=headers,
    )


@requires("write", roles=("admin", "member"))
async def post_rfp(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "rfp")
    data = structure(fields, RfpCreate, root="rfp")
    if len(data.items) > MAX_ITEMS_PER_CREATE:
        raise ValidationFailed([f"rfp.items: at most {MAX_ITEMS_PER_CREATE} items per request"])
    who = principal(request)
    async with connection(request) as conn:
        rfp_id = await create_rfp(conn, who, data)
        row = await fetch_rfp(conn, rfp_id, who.account_id)
    response = _rfp_response(request, row, status=201)
    response.headers["Location"] = f"/api/v1/rfps/{rfp_id}"
    return response


@requires("write", roles=("admin", "member"))
async def patch_rfp(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "rfp")
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn, conn.transaction():
        current = await conn.fetchrow(db.query("lock_rfp"), rfp_id, who.account_id)
        if current is None:
            raise NotFound(f"no RFP {rfp_id} in this account")
        editable = [a.name for a in attrs.fields(RfpInput)]
        # Validate the merged record, so absent fields keep their stored values.
        merged = {name: _json_value(current[name]) for name in editable} | fields
        data = structure(merged, RfpInput, root="rfp")
        await conn.execute(
            db.query("update_rfp"),
            rfp_id,
            who.account_id,
            data.title.strip(),
            data.description,
            data.deadline,
            data.framework,
            data.portal_url,
            data.context,
        )
    async with connection(request) as conn:
        row = await fetch_rfp(conn, rfp_id, who.account_id)
    return _rfp_response(request, row)


def _json_value(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


@requires("read")
async def list_rfp_items(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        await fetch_rfp(conn, rfp_id, principal(request).account_id)
        total = await conn.fetchval(db.query("count_rfp_items"), rfp_id)
        rows = await conn.fetch(db.query("list_rfp_items"), rfp_id, page.size, page.offset)
    items = [RfpItem.from_row(row) for row in rows]
    return json_response(
        {
            "rfp_items": [unstructure(item) for item in items],
            "pagination": page.pagination(total, len(items)),
        }
    )
