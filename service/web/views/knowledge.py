"""Knowledge base: an account's entries (question?, answer, title, tags, source) and CSV import."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from ... import db
from ...domain import audit, webhooks
from ...domain.convert import structure, unstructure
from ...domain.errors import NotFound, UnsupportedMediaType
from ...domain.knowledge import KnowledgeItem, KnowledgeItemInput, create_item, decode_csv, import_csv
from ...domain.models import Page
from ..actors import actor
from ..auth import connection, principal, requires
from ..body import read_object, receive_upload
from ..keys import CONFIG, DELIVERER, INDEXER
from ..responses import json_response


def entries_written(app: web.Application) -> None:
    """Knowledge-base entries were created or changed (committed): wake the embeddings indexer,
    if any, and the webhook deliverer."""
    indexer = app.get(INDEXER)
    if indexer is not None:
        indexer.wake()
    deliverer = app.get(DELIVERER)
    if deliverer is not None:
        deliverer.wake()


_AUDITED = ("question", "answer", "title", "tags", "source", "yes_no")


async def item_written(
    request: web.Request, conn: asyncpg.Connection, item: KnowledgeItem, event_type: str,
    before: KnowledgeItem | None = None,
) -> None:
    """The audit event and webhook of a created, changed or deleted entry (caller's transaction)."""
    data = unstructure(item)
    action = event_type  # knowledge_base_item.created / .updated / .deleted
    if event_type.endswith("deleted"):
        await audit.record(conn, actor(request), action, record_id=item.id,
                           before={k: data[k] for k in _AUDITED})
    else:
        old = unstructure(before) if before is not None else None
        await audit.record(conn, actor(request), action, record_id=item.id,
                           before=None if old is None else {k: old[k] for k in _AUDITED},
                           after={k: data[k] for k in _AUDITED})
    await webhooks.emit(conn, item_account(request), event_type, item.id, data)


def item_account(request: web.Request) -> str:
    return principal(request).account_id


_CSV_MEDIA_TYPES = ("text/csv", "application/csv", "text/plain")


async def _read_csv_body(request: web.Request) -> str:
    """The CSV of an import: a text/csv body, or a multipart field `file`."""
    if request.content_type != "multipart/form-data" and request.content_type not in _CSV_MEDIA_TYPES:
        raise UnsupportedMediaType(
            "send the CSV as text/csv, or as multipart/form-data with a field named file"
        )
    upload = await receive_upload(request, request.app[CONFIG].server.max_upload_bytes)
    with upload.file:
        return decode_csv(upload.file.read())


def _item_response(item: KnowledgeItem, status: int = 200) -> web.Response:
    return json_response(unstructure(item), status=status)


@requires("write", roles=("admin", "member"))
async def post_item(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "knowledge_base_item")
    data = structure(fields, KnowledgeItemInput, root="knowledge_base_item")
    async with connection(request) as conn, conn.transaction():
        item = await create_item(conn, principal(request).account_id, data)
        await item_written(request, conn, item, "knowledge_base_item.created")
    entries_written(request.app)
    response = _item_response(item, status=201)
    response.headers["Location"] = f"/api/v1/knowledge_base_items/{item.id}"
    return response


@requires("read")
async def list_items(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    account_id = principal(request).account_id
    async with connection(request) as conn:
        total = await conn.fetchval(db.query("count_knowledge_items"), account_id)
        rows = await conn.fetch(db.query("list_knowledge_items"), account_id, page.size, page.offset)
    return json_response(
        {
            "knowledge_base_items": [unstructure(KnowledgeItem.from_row(row)) for row in rows],
            "pagination": page.pagination(total, len(rows)),
        }
    )


@requires("read")
async def get_item(request: web.Request) -> web.Response:
    item_id = request.match_info["id"]
    async with connection(request) as conn:
        row = await conn.fetchrow(
            db.query("get_knowledge_item"), item_id, principal(request).account_id
        )
    if row is None:
        raise NotFound(f"no knowledge base item {item_id} in this account")
    return _item_response(KnowledgeItem.from_row(row))


@requires("write", roles=("admin", "member"))
async def delete_item(request: web.Request) -> web.Response:
    item_id = request.match_info["id"]
    account_id = principal(request).account_id
    async with connection(request) as conn, conn.transaction():
        row = await conn.fetchrow(db.query("get_knowledge_item"), item_id, account_id)
        deleted = await conn.fetchval(db.query("delete_knowledge_item"), item_id, account_id)
        if deleted is None or row is None:
            raise NotFound(f"no knowledge base item {item_id} in this account")
        await item_written(request, conn, KnowledgeItem.from_row(row), "knowledge_base_item.deleted")
    entries_written(request.app)
    return web.Response(status=204)


@requires("write", roles=("admin", "member"))
async def import_items(request: web.Request) -> web.Response:
    text = await _read_csv_body(request)
    async with connection(request) as conn:
        report = await import_csv(conn, principal(request).account_id, text, actor(request))
    entries_written(request.app)
    return json_response(unstructure(report))
