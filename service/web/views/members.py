"""Members: creating users, confirming e-mail addresses, invitations, and signing in for a token.

Decisions where the specification is silent (also in README "Members"):
- `terms_of_service` counts as accepted when it is JSON `true` or one of the strings "accepted",
  "true", "1", "yes" (any case, surrounding spaces ignored). Anything else is a 422.
- A user may belong to several accounts. `POST /api/v1/tokens` takes an optional `account_id`;
  without it the token belongs to the user's oldest membership.
- Confirmation and invitation links carry a random token that is stored only as its SHA-256.
  The outbox keeps the message body (and so the link) until it is sent, then erases it.
- Accepting an invitation as someone who already has a password (a member of another account)
  requires that password; the invitation does not replace it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from aiohttp import web

from ... import db
from ...domain import mail
from ...domain.convert import structure, unstructure
from ...domain.errors import (
    Conflict,
    NotFound,
    ParameterMissing,
    ValidationFailed,
)
from ...domain.ids import new_id
from ...domain.mail import MailSender
from ...domain.members import (
    ConfirmationInput,
    Invitation,
    InvitationAcceptance,
    NewInvitation,
    SignIn,
    _confirmed,
    _expires_at,
    _usable,
    _validate_new_user,
    confirm_email,
    confirmation_mail,
    fetch_member,
    invite,
    new_link_token,
    require_active_account,
    sign_in,
)
from ...domain.members import (
    list_members as domain_list_members,
)
from ...domain.models import Page
from ...domain.passwords import Passwords
from ...domain.tokens import hash_token, issue_token
from ..auth import connection, principal, public, requires
from ..body import read_json, read_object
from ..keys import CONFIG, MAIL_SENDER, PASSWORDS, POOL
from ..responses import json_response


def _base_url(request: web.Request) -> str:
    return request.app[CONFIG].server.web_base_url.rstrip("/")


def _created(payload: Any) -> web.Response:
    return json_response(unstructure(payload), status=201)


@requires("write", roles=("admin",))
async def post_user(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "user")
    who = principal(request)
    config = request.app[CONFIG]
    async with connection(request) as conn:
        account_name = await require_active_account(conn, who.account_id)
        data = await _validate_new_user(conn, fields)
    password_hash = await request.app[PASSWORDS].hash(data.password)
    token = new_link_token()
    ttl_hours = config.members.confirmation_ttl_hours
    subject, body = confirmation_mail(_base_url(request), account_name, token, ttl_hours)
    async with connection(request) as conn, conn.transaction():
        try:
            user_id = await conn.fetchval(
                db.query("insert_user_with_password"),
                data.email, data.first_name or "", data.last_name or "", password_hash,
            )
        except asyncpg.UniqueViolationError:  # created concurrently since the check above
            raise ValidationFailed(["user.email: has already been taken"]) from None
        member_id = await conn.fetchval(
            db.query("insert_membership"), new_id("mbr"), who.account_id, user_id,
            data.role or "member",
        )
        await conn.execute(
            db.query("insert_email_confirmation"), user_id, hash_token(token), ttl_hours * 3600
        )
        await mail.enqueue(conn, config.mail, data.email, subject, body)
        member = await fetch_member(conn, member_id, who.account_id)
    request.app[MAIL_SENDER].wake()
    return _created(member)


@public
async def post_confirmation(request: web.Request) -> web.Response:
    body = await read_json(request)
    data = structure(body, ConfirmationInput)
    return json_response(_confirmed(await confirm_email(request.app[POOL], data.token)))


@public
async def get_confirmation(request: web.Request) -> web.Response:
    """The e-mail's link, opened in a browser: confirms, and says so in plain text."""
    token = request.query.get("token")
    if not token:
        raise ParameterMissing("token is required: open the link from the e-mail as it is")
    row = await confirm_email(request.app[POOL], token)
    return web.Response(
        text=f"Thank you: {row['email']} is confirmed. You can sign in now.\n",
        content_type="text/plain",
    )


@public
async def post_token(request: web.Request) -> web.Response:
    """Sign in with e-mail and password for an API token (the rule: domain/members.py `sign_in`)."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed(["the body must be a JSON object with email and password"])
    data = structure(body, SignIn)
    config = request.app[CONFIG]
    membership = await sign_in(
        request.app[POOL], request.app[PASSWORDS], config.members, email=data.email,
        password=data.password, client_address=request.remote, account_id=data.account_id,
    )
    async with connection(request) as conn:
        scopes = sorted(set(data.scopes))
        expires_at = _expires_at(config.auth.token_ttl_days)
        token = await issue_token(conn, membership["id"], scopes, expires_at)
    return _created(
        {
            "token": token,
            "scopes": scopes,
            "expires_at": expires_at,
            "account_id": membership["account_id"],
            "member_id": membership["id"],
        }
    )


@requires("write", roles=("admin",))
async def post_invitation(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "invitation")
    who = principal(request)
    config = request.app[CONFIG]
    data = structure(fields, NewInvitation, root="invitation")
    async with connection(request) as conn:
        invitation = await invite(
            conn, config, account_id=who.account_id, invited_by=who.member_id, data=data
        )
    request.app[MAIL_SENDER].wake()
    return _created(invitation)


@public
async def get_invitation(request: web.Request) -> web.Response:
    """What an invitation link offers: the account, address and role, before accepting."""
    async with connection(request) as conn:
        row = await conn.fetchrow(
            db.query("invitation_by_token_hash"), hash_token(request.match_info["token"])
        )
    if row is None:
        raise NotFound("this invitation link is unknown")
    data = unstructure(Invitation.from_row(row))
    data["account_name"] = row["account_name"]
    return json_response(data)


@public
async def accept_invitation(request: web.Request) -> web.Response:
    digest = hash_token(request.match_info["token"])
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed(["the body must be a JSON object with password and terms_of_service"])
    passwords: Passwords = request.app[PASSWORDS]
    async with connection(request) as conn:
        invitation = _usable(await conn.fetchrow(db.query("invitation_by_token_hash"), digest))
        data = structure(body, InvitationAcceptance)
        user = await conn.fetchrow(db.query("user_by_email"), invitation["email"])
    new_hash: str | None = None
    if user is not None and user["password_hash"] is not None:
        if not await passwords.verify(user["password_hash"], data.password):
            raise ValidationFailed(
                ["password: you already have a sign-in with this address; give its password"]
            )
    else:
        new_hash = await passwords.hash(data.password)
    first, last = data.first_name or "", data.last_name or ""
    async with connection(request) as conn, conn.transaction():
        invitation = _usable(await conn.fetchrow(db.query("lock_invitation_by_token_hash"), digest))
        user = await conn.fetchrow(db.query("lock_user_by_email"), invitation["email"])
        if user is None:
            user_id = await conn.fetchval(
                db.query("insert_confirmed_user"), invitation["email"], first, last, new_hash
            )
        else:
            user_id = user["id"]
            await conn.execute(
                db.query("accept_terms_for_invited_user"), user_id, new_hash, first, last
            )
        if await conn.fetchval(db.query("is_member"), invitation["account_id"], invitation["email"]):
            raise Conflict(f"{invitation['email']} is already a member of this account")
        member_id = await conn.fetchval(
            db.query("insert_membership"), new_id("mbr"), invitation["account_id"], user_id,
            invitation["role"],
        )
        if await conn.fetchval(db.query("mark_invitation_accepted"), invitation["id"], member_id) is None:
            raise NotFound("this invitation has already been accepted")
        member = await fetch_member(conn, member_id, invitation["account_id"])
    return _created(member)


@requires("read")
async def list_members(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    account_id = principal(request).account_id
    async with connection(request) as conn:
        members, total = await domain_list_members(conn, account_id, page)
    return json_response(
        {
            "members": [unstructure(member) for member in members],
            "pagination": page.pagination(total, len(members)),
        }
    )


async def passwords_context(app: web.Application) -> AsyncIterator[None]:
    app[PASSWORDS] = await Passwords.create()
    yield


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
