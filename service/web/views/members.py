"""Members, sign-in, tokens and passwords over HTTP: parse → authorize → call → respond.

The rules live in service/domain/members.py (its docstring lists the decisions where the
specification is silent), service/domain/tokens.py and service/domain/passwords.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ...domain import audit, tokens
from ...domain import members as domain
from ...domain.convert import structure, unstructure
from ...domain.errors import ParameterInvalid, ParameterMissing, ValidationFailed
from ...domain.mail import MailSender
from ...domain.models import Page
from ...domain.passwords import Passwords, client_key
from ...domain.tokens import hash_token
from ..actors import actor
from ..auth import connection, principal, public, requires
from ..body import read_json, read_object
from ..keys import CONFIG, DELIVERER, MAIL_SENDER, PASSWORDS, POOL
from ..responses import NO_STORE, json_response


def _created(payload: Any) -> web.Response:
    # Members, invitations and tokens: a token among them is its one showing (NO_STORE).
    return json_response(unstructure(payload), status=201, headers=NO_STORE)


def _client(request: web.Request) -> str:
    return client_key(request.remote)


def _mail_sent(request: web.Request) -> None:
    request.app[MAIL_SENDER].wake()


@requires("write", roles=("admin",))
async def post_user(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "user")
    async with connection(request) as conn:
        who = principal(request)
        member = await domain.create_user(
            conn, request.app[CONFIG], who.account_id, fields, actor(request),
            requested_by=who.member_id,
        )
    _mail_sent(request)
    request.app[DELIVERER].wake()  # member.created, if an endpoint wants it
    return _created(member)


@public
async def post_confirmation(request: web.Request) -> web.Response:
    data = structure(await read_json(request), domain.ConfirmationInput)
    row = await domain.confirm_email(
        request.app[POOL], request.app[PASSWORDS], data.token, data.password, actor(request)
    )
    return json_response(domain.confirmed_body(row))


@public
async def get_confirmation(request: web.Request) -> web.Response:
    """The e-mail's link, opened in a browser: says how to finish (choose a password), or
    confirms when the user already has one of their own."""
    token = request.query.get("token")
    if not token:
        raise ParameterMissing("token is required: open the link from the e-mail as it is")
    async with connection(request) as conn:
        needs_password = await domain.confirmation_needs_password(conn, token)
    if needs_password:
        base = request.app[CONFIG].server.web_base_url.rstrip("/")
        return web.Response(
            text="To finish, choose your password (12 to 128 characters):\n\n"
            f"curl -X POST {base}/api/v1/users/confirmation -H 'Content-Type: application/json' \\\n"
            f"     -d '{{\"token\": \"{token}\", \"password\": \"…\"}}'\n",
            content_type="text/plain",
        )
    row = await domain.confirm_email(
        request.app[POOL], request.app[PASSWORDS], token, None, actor(request)
    )
    return web.Response(
        text=f"Thank you: {row['email']} is confirmed. You can sign in now.\n",
        content_type="text/plain",
    )


@public
async def post_token(request: web.Request) -> web.Response:
    """Sign in with e-mail and password for an API token (throttling: domain.sign_in)."""
    issued = await domain.sign_in(
        request.app[POOL], request.app[PASSWORDS], request.app[CONFIG], await read_json(request),
        _client(request), actor(request),
    )
    return _created(issued)


@requires("write", roles=("admin",))
async def post_invitation(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "invitation")
    async with connection(request) as conn:
        invitation = await domain.invite(
            conn, request.app[CONFIG], principal(request), fields, actor(request)
        )
    _mail_sent(request)
    return _created(invitation)


@requires("read", roles=("admin",))
async def list_invitations(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    async with connection(request) as conn:
        found, total = await domain.list_invitations(conn, principal(request).account_id, page)
    return json_response(
        {"invitations": unstructure(found), "pagination": page.pagination(total, len(found))}
    )


@requires("write", roles=("admin",))
async def revoke_invitation(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        revoked = await domain.revoke_invitation(
            conn, principal(request).account_id, request.match_info["id"], actor(request)
        )
    return json_response(unstructure(revoked))


@public
async def get_invitation(request: web.Request) -> web.Response:
    """What an invitation link offers: the account, address and role, before accepting."""
    async with connection(request) as conn:
        data = await domain.read_invitation(conn, request.match_info["token"])
    return json_response(data)


@public
async def accept_invitation(request: web.Request) -> web.Response:
    member = await domain.accept_invitation(
        request.app[POOL], request.app[PASSWORDS], request.app[CONFIG],
        request.match_info["token"], await read_json(request), _client(request), actor(request),
    )
    request.app[DELIVERER].wake()  # member.created, if an endpoint wants it
    return _created(member)


@requires("read")
async def list_members(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    async with connection(request) as conn:
        members, total = await domain.list_members(conn, principal(request).account_id, page)
    return json_response(
        {"members": unstructure(members), "pagination": page.pagination(total, len(members))}
    )


@requires("write", roles=("admin",))
async def patch_member(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "member")
    data = structure(fields, domain.RoleChange, root="member")
    async with connection(request) as conn:
        member = await domain.change_role(
            conn, principal(request).account_id, request.match_info["id"], data.role,
            actor(request),
        )
    request.app[DELIVERER].wake()  # rfp_item.assigned for the items a viewer no longer holds
    return json_response(unstructure(member))


@requires("write", roles=("admin",))
async def delete_member(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        await domain.remove_member(
            conn, principal(request).account_id, request.match_info["id"], actor(request)
        )
    request.app[DELIVERER].wake()  # rfp_item.assigned for the items they no longer hold
    return web.Response(status=204)


@requires("read")
async def list_member_tokens(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        found = await tokens.list_tokens(conn, principal(request), request.match_info["id"])
    return json_response({"tokens": unstructure(found)})


@requires("write")  # every change needs write (DESIGN.md): a read token revoked write ones
async def delete_token(request: web.Request) -> web.Response:
    raw = request.match_info["id"]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise ParameterInvalid(f"a token id is a number (see GET /api/v1/members/{{id}}/tokens); got {raw!r}")
    async with connection(request) as conn, conn.transaction():
        revoked = await tokens.revoke_token(conn, principal(request), int(raw))
        await audit.record(conn, actor(request), "token.revoked", record_id=str(revoked.id))
    return json_response(unstructure(revoked))


@requires("write")  # a change, as every other: the write scope (besides the current password)
async def post_password(request: web.Request) -> web.Response:
    """Change one's password (the current one required); other tokens of the user are revoked."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed(["the body must be a JSON object with current_password and new_password"])
    token = request.headers["Authorization"].partition(" ")[2].strip()
    await domain.change_password(
        request.app[POOL], request.app[PASSWORDS], request.app[CONFIG], principal(request), body,
        _client(request), hash_token(token), actor(request),
    )
    return json_response({"changed": True})


@public
async def post_password_reset(request: web.Request) -> web.Response:
    """Ask for a reset link; 202 whether or not the address is known."""
    body = await read_json(request)
    async with domain.reset_answer_time(), connection(request) as conn:
        await domain.request_password_reset(conn, request.app[CONFIG], body, actor(request))
    _mail_sent(request)
    return json_response(
        {"requested": True, "message": "if this address has a sign-in, a reset link is on its way"},
        status=202,
    )


@public
async def post_password_reset_complete(request: web.Request) -> web.Response:
    await domain.reset_password(
        request.app[POOL], request.app[PASSWORDS], await read_json(request), actor(request)
    )
    return json_response({"reset": True})


async def passwords_context(app: web.Application) -> AsyncIterator[None]:
    app[PASSWORDS] = await Passwords.create(app[CONFIG].auth.password_hash_workers)
    yield
    app[PASSWORDS].close()


async def mail_sender_context(app: web.Application) -> AsyncIterator[None]:
    """The background mail sender of this process; needs the pool, so it runs after it."""
    sender = MailSender(app[POOL], app[CONFIG].mail)
    app[MAIL_SENDER] = sender
    task = asyncio.create_task(sender.run(), name="mail-sender")
    yield
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
