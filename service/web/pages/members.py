"""Members: the account's members for everyone, invitations for admins."""

from __future__ import annotations

import math

from aiohttp import web

from ...domain.members import invite, list_members
from ...domain.models import Page
from ..keys import CONFIG, MAIL_SENDER, POOL
from .common import page, principal, read_form, render


async def _members_page(request: web.Request, invited: str | None = None, status: int = 200) -> web.Response:
    current = Page.from_query(request.query)
    who = principal(request)
    async with request.app[POOL].acquire() as conn:
        members, total = await list_members(conn, who.account_id, current)
    return render(request, "members.html", {
        "members": members, "page": current.number, "pages": math.ceil(total / current.size),
        "total": total, "is_admin": who.role == "admin", "invited": invited,
    }, status=status)


@page()
async def members_page(request: web.Request) -> web.StreamResponse:
    return await _members_page(request)


@page(write=True, roles=("admin",))
async def invite_member(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    fields = {"email": str(form.get("email") or "")}
    if form.get("role"):
        fields["role"] = str(form.get("role"))
    async with request.app[POOL].acquire() as conn:
        invitation = await invite(conn, request.app[CONFIG], principal(request), fields)
    request.app[MAIL_SENDER].wake()
    return await _members_page(request, invited=invitation.email, status=201)
