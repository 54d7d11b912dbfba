"""Operational endpoints, without authentication: liveness, readiness, and Prometheus metrics."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ...domain.errors import ServiceUnavailable
from ..auth import connection, public
from ..keys import METRICS
from ..responses import json_response


@public
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


@public
async def readyz(request: web.Request) -> web.Response:
    try:
        async with asyncio.timeout(2):
            async with connection(request) as conn:
                await conn.fetchval("SELECT 1")
    except Exception as exc:  # any failure to reach the database means not ready
        raise ServiceUnavailable(f"database unreachable: {type(exc).__name__}") from None
    return json_response({"status": "ready", "database": "ok"})


@public
async def get_metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
