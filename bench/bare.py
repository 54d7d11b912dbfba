"""The floor: bare aiohttp + asyncpg running the same SQL statements as the service's handlers,
without auth, rate limits, middlewares, models or logging.
`python bench/bare.py DATABASE_URL PORT ACCOUNT_ID`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import asyncpg
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from service.db import query

POOL = web.AppKey("pool", asyncpg.Pool)


def dumps(value: object) -> str:
    return json.dumps(value, default=str)


async def get_rfp(request: web.Request) -> web.Response:
    async with request.app[POOL].acquire() as conn:
        row = await conn.fetchrow(query("get_rfp"), request.match_info["id"], ACCOUNT)
    if row is None:
        return web.json_response({"error": "not found"}, status=404)
    return web.json_response(dict(row), dumps=dumps)


async def search(request: web.Request) -> web.Response:
    term = request.query["query"]
    page = int(request.query.get("page", "1"))
    pattern = "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    # As the service: custom plans, set for this transaction only.
    async with request.app[POOL].acquire() as conn, conn.transaction(readonly=True):
        await conn.execute(query("plan_each_search"))
        total = await conn.fetchval(query("count_search_rfps_capped"), ACCOUNT, pattern, 10_000)
        rows = await conn.fetch(query("search_rfps"), ACCOUNT, pattern, 20, (page - 1) * 20)
    return web.json_response(
        {"rfps": [dict(r) for r in rows], "pagination": {"total_count": total}}, dumps=dumps
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def no_reset(conn: asyncpg.Connection) -> None:
    """The service skips asyncpg's reset round trip on release; so does the floor, to stay a floor."""


async def pool_ctx(app: web.Application):
    app[POOL] = await asyncpg.create_pool(DSN, min_size=2, max_size=10, reset=no_reset)
    yield
    await app[POOL].close()


if __name__ == "__main__":
    DSN, PORT, ACCOUNT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    app = web.Application()
    app.cleanup_ctx.append(pool_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/rfps/{id}", get_rfp)
    app.router.add_get("/search", search)
    web.run_app(app, host="127.0.0.1", port=PORT, print=None, access_log=None)
