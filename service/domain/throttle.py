"""Token buckets kept in PostgreSQL, so every process shares them: the routes' rate limits
(service/web/ratelimit.py) and the sign-in throttle (service/domain/members.py `sign_in`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import asyncpg
import attrs

from .. import db
from ..config import RateLimit


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
