"""The audit log, for admins: `GET /api/v1/audit_events`, newest first, filtered by actor
(member id or operator name), record id, action and time (`since` inclusive, `until` exclusive,
RFC 3339), 20 per page."""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from ...domain import audit
from ...domain.errors import ParameterInvalid
from ...domain.models import Page
from ..auth import connection, principal, requires
from ..responses import json_response


def _time(request: web.Request, name: str) -> datetime | None:
    raw = request.query.get(name)
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ParameterInvalid(
            f"{name} must be an RFC 3339 time like 2030-01-31T09:00:00Z; got {raw!r}"
        ) from None
    if value.tzinfo is None:
        raise ParameterInvalid(f"{name} must carry a time zone (Z or ±hh:mm); got {raw!r}")
    if (utc := audit.in_utc(value)) is None:  # asyncpg could not send it: it was a 500
        raise ParameterInvalid(f"{name} {audit.OUT_OF_RANGE}; got {raw!r}")
    return utc


@requires("read", roles=("admin",))
async def list_audit_events(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    where = audit.AuditFilter(
        actor=request.query.get("actor") or None,
        record=request.query.get("record_id") or None,
        action=request.query.get("action") or None,
        since=_time(request, "since"),
        until=_time(request, "until"),
    )
    async with connection(request) as conn:
        events, total = await audit.list_events(
            conn, principal(request).account_id, where, page.size, page.offset
        )
    return json_response({"audit_events": events, "pagination": page.pagination(total, len(events))})
