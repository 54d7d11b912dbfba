"""Liveness and readiness probes; no authentication."""

from __future__ import annotations

import asyncio

from aiohttp import web

from . import db
from .auth import public
from .errors import ServiceUnavailable
from .responses import json_response


@public
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


@public
async def readyz(request: web.Request) -> web.Response:
    try:
        async with asyncio.timeout(2):
            async with db.connection(request) as conn:
                await conn.fetchval("SELECT 1")
    except Exception as exc:  # any failure to reach the database means not ready
        raise ServiceUnavailable(f"database unreachable: {type(exc).__name__}") from None
    return json_response({"status": "ready", "database": "ok"})
