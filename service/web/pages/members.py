"""Members: the account's members for everyone, invitations for admins."""

from __future__ import annotations

import math

from aiohttp import web

from ...domain.convert import structure
from ...domain.errors import ParameterInvalid
from ...domain.members import (
    RoleChange,
    change_role,
    invite,
    list_invitations,
    list_members,
    remove_member,
    revoke_invitation,
)
from ...domain.models import Page
from ..actors import actor
from ..auth import connection
from ..keys import CONFIG, DELIVERER, MAIL_SENDER
from .common import page, principal, read_form, render, see_other


def _notice(request: web.Request) -> str | None:
    """What the form just sent did (each POST redirects here: a reload sends nothing again)."""
    done = request.query.get("done")
    days = request.app[CONFIG].members.invitation_ttl_days
    if done == "invited":
        return (f"Invitation sent. Its link works once and expires in {days:g} days; inviting the "
                "same address again replaces it.")
    if done == "resent":
        return (f"Invitation sent again: its new link expires in {days:g} days, and the old one "
                "no longer works.")
    return {
        "role": "Role changed.", "removed": "Member removed.",
        "revoked": "Invitation revoked: its link no longer works.",
    }.get(done or "")


async def _members_page(request: web.Request) -> web.Response:
    current = Page.from_query(request.query)
    who = principal(request)
    is_admin = who.role == "admin"
    # The invitations have a pager of their own (`invitations_page`), beside the members'.
    try:
        waiting = Page.from_query({"page": request.query.get("invitations_page", "")})
    except ParameterInvalid as exc:
        raise ParameterInvalid(f"invitations_{exc.message}") from None
    async with connection(request) as conn:
        members, total = await list_members(conn, who.account_id, current)
        invitations, invited = (
            await list_invitations(conn, who.account_id, waiting) if is_admin else ([], 0)
        )
    # What Send again and Revoke did is said in the invitations' section, which they come back to.
    notice = _notice(request)
    about_invitations = request.query.get("done") in ("resent", "revoked")
    return render(request, "members.html", {
        "members": members, "page": current.number, "pages": math.ceil(total / current.size),
        "total": total, "is_admin": is_admin,
        "notice": None if about_invitations else notice,
        "invitations_notice": notice if about_invitations else None,
        "me": who.member_id, "invitations": invitations, "invited": invited,
        "invitations_page": waiting.number, "invitations_pages": math.ceil(invited / waiting.size),
    })


@page()
async def members_page(request: web.Request) -> web.StreamResponse:
    return await _members_page(request)


@page(write=True, roles=("admin",))
async def invite_member(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    fields = {"email": str(form.get("email") or "")}
    if form.get("role"):
        fields["role"] = str(form.get("role"))
    # "Send again" names the invitation it sends again: none if it was revoked meanwhile (409).
    replacing = form.get("invitation_id")
    async with connection(request) as conn:
        await invite(conn, request.app[CONFIG], principal(request), fields, actor(request),
                     replacing=str(replacing) if replacing else None)
    request.app[MAIL_SENDER].wake()
    # No address in the URL: it would be in the access log. "Send again" comes back to the list it
    # was pressed in, which says what it did under its heading (the page's top is out of view).
    raise see_other("/members?done=resent#invitations-h" if replacing else "/members?done=invited")


@page(write=True, roles=("admin",))
async def change_member_role(request: web.Request) -> web.StreamResponse:
    """The API's PATCH /members/{id} (members.change_role: the owner and the last admin keep theirs)."""
    form = await read_form(request)
    data = structure({"role": str(form.get("role") or "")}, RoleChange, root="member")
    async with connection(request) as conn:
        await change_role(
            conn, principal(request).account_id, request.match_info["id"], data.role, actor(request)
        )
    request.app[DELIVERER].wake()  # rfp_item.assigned for the items a viewer no longer holds
    raise see_other(f"/members?done=role#member-{request.match_info['id']}")


@page(write=True, roles=("admin",))
async def remove(request: web.Request) -> web.StreamResponse:
    """The API's DELETE /members/{id}: the membership and its tokens and sessions go at once."""
    async with connection(request) as conn:
        await remove_member(conn, principal(request).account_id, request.match_info["id"], actor(request))
    request.app[DELIVERER].wake()  # rfp_item.assigned for the items they no longer hold
    raise see_other("/members?done=removed")


@page(write=True, roles=("admin",))
async def revoke(request: web.Request) -> web.StreamResponse:
    """The API's POST /invitations/{id}/revoke: the invitation's link stops working at once.
    Back to the pages of members and invitations it was pressed on (the form's page numbers)."""
    form = await read_form(request)
    async with connection(request) as conn:
        await revoke_invitation(
            conn, principal(request).account_id, request.match_info["id"], actor(request)
        )
    pages = "".join(
        f"{name}={value}&" for name in ("page", "invitations_page")
        if isinstance(value := form.get(name), str) and value.isascii() and value.isdigit()
        and len(value) <= 3 and int(value) > 1
    )
    raise see_other(f"/members?{pages}done=revoked#invitations-h")
