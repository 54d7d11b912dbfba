"""A user in several accounts: the list of their memberships (`/accounts`, every page's header
leads there when there are several) and switching to another (domain/sessions.py
`switch_account`: that session ends, one of the other membership starts, audited as a sign-in)."""

from __future__ import annotations

import math

from aiohttp import web

from ...domain import audit
from ...domain.members import signed_in_actor
from ...domain.models import Page
from ...domain.sessions import switch_account, user_memberships
from ..actors import actor
from ..auth import connection
from ..keys import CONFIG
from .account import signed_in_response
from .common import COOKIE, page, principal, read_form, render


@page()
async def accounts_page(request: web.Request) -> web.StreamResponse:
    current = Page.from_query(request.query)
    who = principal(request)
    async with connection(request) as conn:
        memberships, total = await user_memberships(conn, who.user_id, current)
    return render(request, "accounts.html", {
        "memberships": memberships, "total": total, "here": who.account_id,
        "page": current.number, "pages": math.ceil(total / current.size),
    })


@page()
async def switch(request: web.Request) -> web.StreamResponse:
    """POST /accounts/switch with the account's id. An account the user is not a member of (an
    unknown one, another's, or one they were removed from since the page was shown) is the 404
    page, this session left as it was."""
    form = await read_form(request)
    who = principal(request)
    ttl = request.app[CONFIG].web.session_ttl_hours * 3600
    async with connection(request) as conn, conn.transaction():
        cookie_value, membership, lifetime = await switch_account(
            conn, request.cookies.get(COOKIE), who.user_id, str(form.get("account_id", "")), ttl
        )
        await audit.record(conn, signed_in_actor(actor(request), membership), "auth.signed_in",
                           record_id=membership["id"], after={"session": "web", "switched": True})
    # The cookie goes when the session does: the switch kept the earlier session's end.
    raise signed_in_response(request, cookie_value, "/rfps?switched=1", lifetime)
