"""Who a request acts as, for the audit log: the member behind its token (or no one), with the
client address and the request id."""

from __future__ import annotations

from aiohttp import web

from ..domain.audit import Actor
from .auth import PRINCIPAL
from .telemetry import REQUEST_ID


def actor(request: web.Request, label: str | None = None) -> Actor:
    """The member the request's token belongs to; anonymous (with `label`, e.g. the e-mail
    address a sign-in names) on a public route."""
    who = request.get(PRINCIPAL)
    if who is not None:
        return Actor.member(who, request.remote, request.get(REQUEST_ID))
    return Actor.anonymous(label, request.remote, request.get(REQUEST_ID))
