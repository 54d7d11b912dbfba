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
import re
import secrets
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NewType

import asyncpg
import attrs
from aiohttp import web

from ... import db
from ...domain import mail
from ...domain.convert import converter, structure, unstructure
from ...domain.errors import (
    Conflict,
    EmailUnconfirmed,
    Forbidden,
    NotFound,
    ParameterMissing,
    RateLimited,
    Unauthorized,
    UsageBlocked,
    ValidationFailed,
)
from ...domain.ids import new_id
from ...domain.mail import MailSender
from ...domain.models import Page
from ...domain.passwords import MAX_LENGTH, MIN_LENGTH, Passwords
from ...domain.tokens import ROLES, SCOPES, hash_token, issue_token
from ..auth import connection, principal, public, requires
from ..body import read_json, read_object
from ..keys import CONFIG, MAIL_SENDER, PASSWORDS, POOL
from ..ratelimit import take
from ..responses import json_response

# -- input types: each rule reports its own `details` entry -------------------------------------

Email = NewType("Email", str)
Password = NewType("Password", str)
PersonName = NewType("PersonName", str)
Role = NewType("Role", str)
Scope = NewType("Scope", str)
TermsAcceptance = NewType("TermsAcceptance", bool)

TERMS_ACCEPTED = ("accepted", "true", "1", "yes")
MAX_NAME = 100
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s.]+$")


def _string(value: Any) -> str:
    return converter.structure(value, str)


def _email(value: Any, _: type) -> str:
    text = _string(value).strip()
    if not text:
        raise ValueError("must not be blank")
    if len(text) > 254 or not _EMAIL.match(text):
        raise ValueError("is not a valid e-mail address")
    return text


def _password(value: Any, _: type) -> str:
    text = _string(value)
    if len(text) < MIN_LENGTH:
        raise ValueError(f"is too short (minimum is {MIN_LENGTH} characters)")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"is too long (maximum is {MAX_LENGTH} characters)")
    if not text.strip():
        raise ValueError("must not be only whitespace")
    return text


def _person_name(value: Any, _: type) -> str:
    text = _string(value).strip()
    if len(text) > MAX_NAME:
        raise ValueError(f"is too long (maximum is {MAX_NAME} characters)")
    return text


def _role(value: Any, _: type) -> str:
    text = _string(value)
    if text not in ROLES:
        raise ValueError(f"must be one of {', '.join(ROLES)}; got {text!r}")
    return text


def _scope(value: Any, _: type) -> str:
    text = _string(value)
    if text not in SCOPES:
        raise ValueError(f"must be one of {', '.join(SCOPES)}; got {text!r}")
    return text


def _terms(value: Any, _: type) -> bool:
    if value is True or (isinstance(value, str) and value.strip().lower() in TERMS_ACCEPTED):
        return True
    raise ValueError('must be accepted explicitly: true or "accepted"')


converter.register_structure_hook(Email, _email)
converter.register_structure_hook(Password, _password)
converter.register_structure_hook(PersonName, _person_name)
converter.register_structure_hook(Role, _role)
converter.register_structure_hook(Scope, _scope)
converter.register_structure_hook(TermsAcceptance, _terms)


def _non_empty(instance: object, attribute: attrs.Attribute, value: list) -> None:
    if not value:
        raise ValueError(f"{attribute.name}: must name at least one scope")


@attrs.frozen(kw_only=True)
class NewUser:
    email: Email
    password: Password
    terms_of_service: TermsAcceptance
    first_name: PersonName | None = None
    last_name: PersonName | None = None
    role: Role | None = None


@attrs.frozen(kw_only=True)
class NewInvitation:
    email: Email
    role: Role | None = None


@attrs.frozen(kw_only=True)
class InvitationAcceptance:
    password: Password
    terms_of_service: TermsAcceptance
    first_name: PersonName | None = None
    last_name: PersonName | None = None


@attrs.frozen(kw_only=True)
class SignIn:
    email: str
    password: str
    scopes: list[Scope] = attrs.field(factory=lambda: list(SCOPES), validator=_non_empty)
    account_id: str | None = None


@attrs.frozen(kw_only=True)
class ConfirmationInput:
    token: str


# -- output models ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Member:
    """SPEC 2.3: a membership of a user in an account; `id` is the membership's mbr_… id."""

    id: str
    email: str
    name: str
    first_name: str
    last_name: str
    role: str
    roles: list[str]
    owner: bool
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Member:
        return cls(
            id=row["id"],
            email=row["email"],
            name=row["name"],
            first_name=row["first_name"],
            last_name=row["last_name"],
            role=row["role"],
            roles=[row["role"]],
            owner=row["is_owner"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@attrs.frozen(kw_only=True)
class Invitation:
    id: str
    email: str
    role: str
    state: str  # pending, accepted, revoked, or expired (a pending one past expires_at)
    expires_at: datetime
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Invitation:
        expired = row["state"] == "pending" and row["expires_at"] <= datetime.now(UTC)
        return cls(
            id=row["id"],
            email=row["email"],
            role=row["role"],
            state="expired" if expired else row["state"],
            expires_at=row["expires_at"],
            created_at=row["created_at"],
        )


# -- shared steps ----------------------------------------------------------------------------


def new_link_token() -> str:
    """The secret of a confirmation or invitation link (256 bits, URL-safe); stored hashed."""
    return secrets.token_urlsafe(32)


async def require_active_account(conn: asyncpg.Connection, account_id: str) -> str:
    """The account's name; 403 usage_blocked when its subscription is inactive."""
    row = await conn.fetchrow(db.query("account_for_members"), account_id)
    if row is None or row["subscription_status"] != "active":
        raise UsageBlocked("the account has no active subscription")
    return row["name"]


async def fetch_member(conn: asyncpg.Connection, member_id: str, account_id: str) -> Member:
    row = await conn.fetchrow(db.query("get_member"), member_id, account_id)
    if row is None:
        raise NotFound(f"no member {member_id} in this account")
    return Member.from_row(row)


def _base_url(request: web.Request) -> str:
    return request.app[CONFIG].server.web_base_url.rstrip("/")


def _created(payload: Any) -> web.Response:
    return json_response(unstructure(payload), status=201)


def confirmation_mail(base_url: str, account_name: str, token: str, ttl_hours: float) -> tuple[str, str]:
    link = f"{base_url}/api/v1/users/confirmation?token={token}"
    body = f"""Hello,

an administrator of {account_name} created a sign-in for you on the RFP response service.
Confirm your e-mail address by opening this link within {ttl_hours:g} hours:

{link}

Or confirm through the API:

curl -X POST {base_url}/api/v1/users/confirmation -H 'Content-Type: application/json' \\
     -d '{{"token": "{token}"}}'

The link works once. If you did not expect this message, ignore it.
"""
    return "Confirm your e-mail address", body


def invitation_mail(
    base_url: str, account_name: str, token: str, expires_at: datetime
) -> tuple[str, str]:
    link = f"{base_url}/api/v1/invitations/{token}"
    expires = expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = f"""Hello,

you are invited to join {account_name} on the RFP response service.
The invitation is here (it works once and expires {expires}):

{link}

Accept it by choosing your password (12 to 128 characters) and accepting the terms of service:

curl -X POST {link}/accept -H 'Content-Type: application/json' \\
     -d '{{"password": "…", "first_name": "…", "last_name": "…", "terms_of_service": "accepted"}}'

If you did not expect this message, ignore it.
"""
    return f"You are invited to {account_name}", body


# -- POST /api/v1/users ----------------------------------------------------------------------


async def _validate_new_user(conn: asyncpg.Connection, fields: dict[str, Any]) -> NewUser:
    """The new user, or a 422 listing every failure (the e-mail being taken among them)."""
    details: list[str] = []
    data: NewUser | None = None
    try:
        data = structure(fields, NewUser, root="user")
    except ValidationFailed as exc:
        details = list(exc.details or [])
    try:
        email = _email(fields.get("email"), str)
    except ValueError:
        email = None
    if email and await conn.fetchval(db.query("user_email_taken"), email):
        details.append("user.email: has already been taken")
    if details or data is None:
        raise ValidationFailed(details)
    return data


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


# -- confirmation ----------------------------------------------------------------------------


async def confirm_email(pool: asyncpg.Pool, token: str) -> asyncpg.Record:
    async with pool.acquire() as conn, conn.transaction():
        user_id = await conn.fetchval(db.query("use_email_confirmation"), hash_token(token))
        if user_id is None:
            raise NotFound("this confirmation link is unknown, already used or expired")
        return await conn.fetchrow(db.query("confirm_user"), user_id)


def _confirmed(row: asyncpg.Record) -> dict[str, Any]:
    return {"confirmed": True, "email": row["email"], "confirmed_at": unstructure(row["confirmed_at"])}


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


# -- POST /api/v1/tokens ---------------------------------------------------------------------


def _expires_at(ttl_days: int) -> datetime | None:
    return datetime.now(UTC) + timedelta(days=ttl_days) if ttl_days else None


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


# -- invitations -----------------------------------------------------------------------------


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
    request.app[MAIL_SENDER].wake()
    return _created(Invitation.from_row(row))


def _usable(row: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if row is None:
        raise NotFound("this invitation link is unknown")
    if row["state"] == "accepted":
        raise NotFound("this invitation has already been accepted")
    if row["state"] == "revoked":
        raise NotFound("this invitation was replaced by a newer one; use the latest e-mail")
    if row["expired"]:
        raise NotFound("this invitation has expired; ask an administrator for a new one")
    return row


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


# -- GET /api/v1/members ---------------------------------------------------------------------


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


# -- lifetimes -------------------------------------------------------------------------------


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
