"""Webhook endpoints (admins): create (the secret shown once), list, read, change, delete; an
endpoint's delivery log and a manual retry. The deliverer runs beside the app
(`deliverer_context`); see service/domain/webhooks.py and docs/webhooks.md."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from ... import db
from ...domain import audit, webhooks
from ...domain.convert import structure
from ...domain.errors import Conflict, NotFound, ParameterInvalid
from ...domain.models import Page
from ..actors import actor
from ..auth import connection, principal, requires
from ..body import read_object
from ..keys import CONFIG, DELIVERER, POOL
from ..responses import NO_STORE, json_response

ADMIN = ("admin",)


def _audited(row: object) -> dict:
    return {k: v for k, v in webhooks.endpoint_json(row).items()  # type: ignore[arg-type]
            if k not in ("created_at", "updated_at")}


@requires("write", roles=ADMIN)
async def post_endpoint(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "webhook_endpoint")
    data = structure(fields, webhooks.EndpointInput, root="webhook_endpoint")
    who = principal(request)
    async with connection(request) as conn, conn.transaction():
        row, secret = await webhooks.create_endpoint(
            conn, who.account_id, data, request.app[CONFIG].webhooks
        )
        await audit.record(conn, actor(request), "webhook_endpoint.created", record_id=row["id"],
                           after=_audited(row))
    response = json_response(webhooks.endpoint_json(row, secret), status=201, headers=NO_STORE)
    response.headers["Location"] = f"/api/v1/webhook_endpoints/{row['id']}"
    return response


@requires("read", roles=ADMIN)
async def list_endpoints(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    account_id = principal(request).account_id
    async with connection(request) as conn:
        total = await conn.fetchval(db.query("count_webhook_endpoints"), account_id)
        rows = await conn.fetch(
            db.query("list_webhook_endpoints"), account_id, page.size, page.offset
        )
    return json_response({
        "webhook_endpoints": [webhooks.endpoint_json(row) for row in rows],
        "pagination": page.pagination(total, len(rows)),
    })


@requires("read", roles=ADMIN)
async def get_endpoint(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await webhooks.fetch_endpoint(
            conn, request.match_info["id"], principal(request).account_id
        )
    return json_response(webhooks.endpoint_json(row))


@requires("write", roles=ADMIN)
async def patch_endpoint(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "webhook_endpoint")
    endpoint_id = request.match_info["id"]
    async with connection(request) as conn, conn.transaction():
        before, row = await webhooks.update_endpoint(
            conn, principal(request).account_id, endpoint_id, fields,
            request.app[CONFIG].webhooks,
        )
        await audit.record(conn, actor(request), "webhook_endpoint.updated", record_id=endpoint_id,
                           before=_audited(before), after=_audited(row))
    request.app[DELIVERER].wake()  # enabled again: its waiting deliveries are due
    return json_response(webhooks.endpoint_json(row))


@requires("write", roles=ADMIN)
async def delete_endpoint(request: web.Request) -> web.Response:
    endpoint_id = request.match_info["id"]
    async with connection(request) as conn, conn.transaction():
        row = await webhooks.fetch_endpoint(
            conn, endpoint_id, principal(request).account_id, lock=True
        )
        await conn.execute(db.query("delete_webhook_endpoint"), endpoint_id, row["account_id"])
        await audit.record(conn, actor(request), "webhook_endpoint.deleted", record_id=endpoint_id,
                           before=_audited(row))
    return web.Response(status=204)


@requires("read", roles=ADMIN)
async def list_deliveries(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    endpoint_id = request.match_info["id"]
    async with connection(request) as conn:
        await webhooks.fetch_endpoint(conn, endpoint_id, principal(request).account_id)
        total = await conn.fetchval(db.query("count_webhook_deliveries"), endpoint_id)
        rows = await conn.fetch(
            db.query("list_webhook_deliveries"), endpoint_id, page.size, page.offset
        )
    return json_response({
        "deliveries": [webhooks.delivery_json(row) for row in rows],
        "pagination": page.pagination(total, len(rows)),
    })


def _delivery_id(request: web.Request) -> int:
    raw = request.match_info["delivery_id"]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise ParameterInvalid(f"a delivery id is a positive integer; got {raw!r}")
    return int(raw)


@requires("write", roles=ADMIN)
async def retry_delivery(request: web.Request) -> web.Response:
    endpoint_id = request.match_info["id"]
    delivery_id = _delivery_id(request)
    async with connection(request) as conn, conn.transaction():
        await webhooks.fetch_endpoint(conn, endpoint_id, principal(request).account_id)
        if await conn.fetchval(db.query("retry_webhook_delivery"), delivery_id, endpoint_id) is None:
            if await conn.fetchrow(db.query("get_webhook_delivery"), delivery_id, endpoint_id) is None:
                raise NotFound(f"no delivery {delivery_id} of endpoint {endpoint_id}")
            raise Conflict(f"delivery {delivery_id} is already pending; it will be attempted")
        await audit.record(conn, actor(request), "webhook_delivery.retried",
                           record_id=endpoint_id, after={"delivery_id": delivery_id})
        row = await conn.fetchrow(db.query("get_webhook_delivery"), delivery_id, endpoint_id)
    request.app[DELIVERER].wake()
    return json_response(webhooks.delivery_json(row), status=202)


async def deliverer_context(app: web.Application) -> AsyncIterator[None]:
    """This process's webhook deliverer; needs the pool, so it runs after it."""
    deliverer = webhooks.Deliverer(app[POOL], app[CONFIG].webhooks)
    app[DELIVERER] = deliverer
    task = asyncio.create_task(deliverer.run(), name="webhook-deliverer")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await deliverer.close()
