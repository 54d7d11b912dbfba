"""What one member may do: token-bucket rate limits per member and route, kept in PostgreSQL so
every process shares them (`guarded`, `take_or_refuse`), and how many of one kind of thing a
member's requests hold at once in this process (`held_at_most`: event streams open, bodies and
uploads arriving)."""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import asyncpg
import attrs
from aiohttp import web

from .. import db
from ..config import RateLimit
from ..domain.errors import RateLimited
from .auth import PRINCIPAL, RATE_LIMIT_TAKEN, Handler, connection
from .keys import METRICS


@attrs.frozen
class Decision:
    allowed: bool
    limit: int
    remaining: int
    retry_after: float  # seconds until one more request is allowed
    reset: float  # seconds until the bucket is full again

    def headers(self) -> dict[str, str]:
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(math.ceil(self.reset)),
        }
        if not self.allowed:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return headers


async def take(conn: asyncpg.Connection, key: str, limit: RateLimit) -> Decision:
    """Spend one request from the bucket `key`; atomic, so concurrent processes agree.

    Its own transaction, committed asynchronously (see the query), so never inside another one.
    """
    if conn.is_in_transaction():
        raise RuntimeError("take() commits asynchronously; call it outside a transaction")
    rate = limit.limit / limit.period_seconds
    row = await conn.fetchrow(db.query("take_rate_limit_token"), key, float(limit.limit), rate)
    return decision(row, limit)


def decision(row: Mapping[str, Any], limit: RateLimit) -> Decision:
    """The Decision from a row of take_rate_limit_token (or principal_and_rate_limit)."""
    rate = limit.limit / limit.period_seconds
    remaining = row["remaining"]
    return Decision(
        allowed=row["allowed"],
        limit=limit.limit,
        remaining=max(0, math.floor(remaining)),
        retry_after=row["retry_after"],
        reset=max(0.0, (limit.limit - remaining) / rate),
    )




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
        _admit(request, route_name, limit, decision(taken, limit))
    else:
        await take_or_refuse(request, route_name, limit)
    return await handler(request)


async def take_or_refuse(
    request: web.Request, bucket: str, limit: RateLimit, *, by_address: bool = False
) -> None:
    """Take one request from the caller's bucket of `bucket` (a rate-limited route's name: the
    member's, else the client address's); 429 when it is empty. A web page that does what an API
    route does takes from that route's bucket, so that the two doors share one limit; a page
    doing what a signed-out route does counts `by_address` as that route does, whatever session
    the browser holds."""
    who = None if by_address else request.get(PRINCIPAL)
    subject = who.member_id if who is not None else (request.remote or "unknown")
    async with connection(request) as conn:
        decided = await take(conn, f"{bucket}:{subject}", limit)
    _admit(request, bucket, limit, decided)


def _admit(request: web.Request, bucket: str, limit: RateLimit, decided: Decision) -> None:
    request[DECISION] = decided
    if not decided.allowed:
        request.app[METRICS].rate_limit_rejections.labels(bucket).inc()
        raise RateLimited(
            f"too many requests: at most {limit.limit} per {limit.period_seconds:g} seconds "
            f"(rate_limits.{bucket}); retry in {max(1, math.ceil(decided.retry_after))} s",
        )  # its RateLimit-* and Retry-After headers: the front door adds them


@contextlib.contextmanager
def held_at_most(
    held: Counter[str], member: str, most: int, refusal: str, *, retry_after: int
) -> Iterator[None]:
    """One more of what `held` counts per member id (an app's Counter in service/web/keys.py),
    held by `member` for the block: when they hold `most` already, 429 `refusal` (its `{held}`
    the number they hold; name the setting) with `Retry-After: retry_after`, before the block
    runs. The count goes down however the block ends (a client that went away cancels its
    handler), and a member holding none leaves no key. A plain context manager: nothing can come
    between the check and the count, or end the block without its way out."""
    if held[member] >= most:
        raise RateLimited(refusal.format(held=held[member]),
                          headers={"Retry-After": str(retry_after)})
    held[member] += 1
    try:
        yield
    finally:
        held[member] -= 1
        if not held[member]:
            del held[member]
