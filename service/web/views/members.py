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
import attrs
from aiohttp import web

from ... import db
from ...domain import audit, mail, webhooks
from ...domain.convert import structure, unstructure
from ...domain.errors import (
    Conflict,
    EmailUnconfirmed,
    Forbidden,
    NotFound,
    ParameterMissing,
    RateLimited,
    Unauthorized,
    ValidationFailed,
)
from ...domain.ids import new_id
from ...domain.mail import MailSender
from ...domain.members import (
    ConfirmationInput,
    Invitation,
    InvitationAcceptance,
    Member,
    NewInvitation,
    SignIn,
    _confirmed,
    _expires_at,
    _usable,
    _validate_new_user,
    confirm_email,
    confirmation_mail,
    fetch_member,
    invitation_mail,
    new_link_token,
    require_active_account,
)
from ...domain.models import Page
from ...domain.passwords import Passwords
from ...domain.tokens import hash_token, issue_token
from ..actors import actor
from ..auth import connection, principal, public, requires
from ..body import read_json, read_object
from ..keys import CONFIG, DELIVERER, MAIL_SENDER, PASSWORDS, POOL
from ..ratelimit import take
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
        queued = await _member_created(request, conn, who.account_id, member)
    request.app[MAIL_SENDER].wake()
    if queued:
        request.app[DELIVERER].wake()
    return _created(member)


async def _member_created(
    request: web.Request, conn: asyncpg.Connection, account_id: str, member: Member
) -> int:
    """The audit event and webhook of a new membership, in the caller's transaction; returns
    the deliveries queued (wake the deliverer once committed)."""
    data = unstructure(member)
    await audit.record(conn, actor(request, member.email), "member.created", record_id=member.id,
                       account_id=account_id,
                       after={k: data[k] for k in ("email", "first_name", "last_name", "role")})
    return await webhooks.emit(conn, account_id, "member.created", member.id, data)


@public
async def post_confirmation(request: web.Request) -> web.Response:
    body = await read_json(request)
    data = structure(body, ConfirmationInput)
    return json_response(_confirmed(await confirm_email(request.app[POOL], data.token, actor(request))))


@public
async def get_confirmation(request: web.Request) -> web.Response:
    """The e-mail's link, opened in a browser: confirms, and says so in plain text."""
    token = request.query.get("token")
    if not token:
        raise ParameterMissing("token is required: open the link from the e-mail as it is")
    row = await confirm_email(request.app[POOL], token, actor(request))
    return web.Response(
        text=f"Thank you: {row['email']} is confirmed. You can sign in now.\n",
        content_type="text/plain",
    )


@public
async def post_token(request: web.Request) -> web.Response:
    """Sign in with e-mail and password for an API token.

    Every attempt takes one token from two buckets (per e-mail address and per client address);
    a successful one gives them back, so only failures count.
    """
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed(["the body must be a JSON object with email and password"])
    data = structure(body, SignIn)
    config = request.app[CONFIG]
    passwords: Passwords = request.app[PASSWORDS]
    buckets = [
        (f"sign_in:address:{request.remote or 'unknown'}", config.members.sign_in_per_address),
        (f"sign_in:email:{data.email.strip().lower()}", config.members.sign_in_per_email),
    ]
    async with connection(request) as conn:
        for key, limit in buckets:
            decision = await take(conn, key, limit)
            if not decision.allowed:
                raise RateLimited(
                    "too many failed sign-ins; retry in "
                    f"{decision.headers()['Retry-After']} s",
                    headers=decision.headers(),
                )
        user = await conn.fetchrow(db.query("user_by_email"), data.email.strip())
    stored_hash = user["password_hash"] if user is not None else None
    if not await passwords.verify(stored_hash, data.password):
        async with connection(request) as conn:  # committed on its own: the refusal follows
            account_id = None
            if user is not None:
                membership = await conn.fetchrow(
                    db.query("membership_for_sign_in"), user["id"], data.account_id
                )
                account_id = membership["account_id"] if membership is not None else None
            await audit.record(conn, actor(request, data.email.strip()), "auth.sign_in_failed",
                               record_id=str(user["id"]) if user is not None else None,
                               account_id=account_id)
        raise Unauthorized("wrong e-mail address or password")
    async with connection(request) as conn:
        for key, limit in buckets:
            await conn.execute(db.query("refund_rate_limit_token"), key, float(limit.limit))
        if user["confirmed_at"] is None:
            raise EmailUnconfirmed(
                "confirm your e-mail address first: open the link in the confirmation e-mail"
            )
        membership = await conn.fetchrow(
            db.query("membership_for_sign_in"), user["id"], data.account_id
        )
        if membership is None:
            raise Forbidden(
                "you are not a member of that account" if data.account_id
                else "you are not a member of any account"
            )
        if passwords.needs_rehash(stored_hash):
            await conn.execute(
                db.query("update_password_hash"), user["id"], await passwords.hash(data.password)
            )
        scopes = sorted(set(data.scopes))
        expires_at = _expires_at(config.auth.token_ttl_days)
        async with conn.transaction():
            token = await issue_token(conn, membership["id"], scopes, expires_at)
            signed_in = attrs.evolve(actor(request, user["email"]), type="member",
                                     id=membership["id"], account_id=membership["account_id"])
            await audit.record(conn, signed_in, "auth.signed_in", record_id=membership["id"])
            await audit.record(conn, signed_in, "token.created", record_id=membership["id"],
                               after={"scopes": scopes, "expires_at": expires_at})
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
    async with connection(request) as conn:
        account_name = await require_active_account(conn, who.account_id)
        data = structure(fields, NewInvitation, root="invitation")
        if await conn.fetchval(db.query("is_member"), who.account_id, data.email):
            raise ValidationFailed(["invitation.email: is already a member of this account"])
        token = new_link_token()
        async with conn.transaction():
            # Re-inviting replaces the pending invitation: its link stops working.
            await conn.execute(db.query("revoke_pending_invitations"), who.account_id, data.email)
            row = await conn.fetchrow(
                db.query("insert_invitation"), new_id("inv"), who.account_id, data.email,
                data.role or "member", hash_token(token), who.member_id,
                config.members.invitation_ttl_days * 86400,
            )
            subject, body = invitation_mail(
                _base_url(request), account_name, token, row["expires_at"]
            )
            await mail.enqueue(conn, config.mail, data.email, subject, body)
            await audit.record(conn, actor(request), "invitation.created", record_id=row["id"],
                               after={"email": data.email, "role": row["role"]})
    request.app[MAIL_SENDER].wake()
    return _created(Invitation.from_row(row))


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
        await audit.record(conn, actor(request, invitation["email"]), "invitation.accepted",
                           record_id=invitation["id"], account_id=invitation["account_id"])
        queued = await _member_created(request, conn, invitation["account_id"], member)
    if queued:
        request.app[DELIVERER].wake()
    return _created(member)


@requires("read")
async def list_members(request: web.Request) -> web.Response:
    page = Page.from_query(request.query)
    account_id = principal(request).account_id
    async with connection(request) as conn:
        total = await conn.fetchval(db.query("count_members"), account_id)
        rows = await conn.fetch(db.query("list_members"), account_id, page.size, page.offset)
    return json_response(
        {
            "members": [unstructure(Member.from_row(row)) for row in rows],
            "pagination": page.pagination(total, len(rows)),
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
