"""Token-bucket rate limits per member and route, kept in PostgreSQL so every process shares them.

The bucket itself (`take`, `Decision`) is service/domain/throttle.py: sign-in uses it too."""

from __future__ import annotations

import math

from aiohttp import web

from ..config import RateLimit
from ..domain.errors import RateLimited
from ..domain.throttle import Decision, decision, take
from .auth import PRINCIPAL, RATE_LIMIT_TAKEN, Handler, connection
from .keys import METRICS

# The decision `guarded` took, for the front door to put its headers on whatever response the
# request ends with (the handler's, an error it raised, 413 for a body too large, a 500).
DECISION = web.RequestKey("rate_limit_decision", Decision)


async def guarded(request: web.Request, handler: Handler, limit: RateLimit) -> web.StreamResponse:
    """`handler` behind the route's token bucket: 429 when it is empty. Runs after
    authentication (service/middleware.py), which usually took the bucket already in the token
    lookup's statement."""
    route_name = request.match_info.route.name
    taken = request.get(RATE_LIMIT_TAKEN)
    if taken is not None and taken["allowed"] is not None:  # taken together with the token lookup
        decided = decision(taken, limit)
    else:
        who = request.get(PRINCIPAL)
        subject = who.member_id if who is not None else (request.remote or "unknown")
        async with connection(request) as conn:
            decided = await take(conn, f"{route_name}:{subject}", limit)
    request[DECISION] = decided
    if not decided.allowed:
        request.app[METRICS].rate_limit_rejections.labels(route_name).inc()
        raise RateLimited(
            f"too many requests: at most {limit.limit} per {limit.period_seconds:g} seconds; "
            f"retry in {max(1, math.ceil(decided.retry_after))} s",
        )  # its RateLimit-* and Retry-After headers: the front door adds them
    return await handler(request)
