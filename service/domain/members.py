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

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import attrs

from .. import db
from ..config import Config, MembersConfig
from . import mail
from .convert import (
    Email,
    Password,
    PersonName,
    Role,
    Scope,
    TermsAcceptance,
    converter,
    structure,
    unstructure,
)
from .errors import (
    EmailUnconfirmed,
    Forbidden,
    NotFound,
    RateLimited,
    Unauthorized,
    UsageBlocked,
    ValidationFailed,
)
from .ids import new_id
from .models import Page
from .passwords import Passwords
from .throttle import take
from .tokens import SCOPES, hash_token


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


async def _validate_new_user(conn: asyncpg.Connection, fields: dict[str, Any]) -> NewUser:
    """The new user, or a 422 listing every failure (the e-mail being taken among them)."""
    details: list[str] = []
    data: NewUser | None = None
    try:
        data = structure(fields, NewUser, root="user")
    except ValidationFailed as exc:
        details = list(exc.details or [])
    try:
        email = converter.structure(fields.get("email"), Email)
    except ValueError:
        email = None
    if email and await conn.fetchval(db.query("user_email_taken"), email):
        details.append("user.email: has already been taken")
    if details or data is None:
        raise ValidationFailed(details)
    return data


async def confirm_email(pool: asyncpg.Pool, token: str) -> asyncpg.Record:
    async with pool.acquire() as conn, conn.transaction():
        user_id = await conn.fetchval(db.query("use_email_confirmation"), hash_token(token))
        if user_id is None:
            raise NotFound("this confirmation link is unknown, already used or expired")
        return await conn.fetchrow(db.query("confirm_user"), user_id)


def _confirmed(row: asyncpg.Record) -> dict[str, Any]:
    return {"confirmed": True, "email": row["email"], "confirmed_at": unstructure(row["confirmed_at"])}


def _expires_at(ttl_days: int) -> datetime | None:
    return datetime.now(UTC) + timedelta(days=ttl_days) if ttl_days else None


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


async def sign_in(
    pool: asyncpg.Pool,
    passwords: Passwords,
    settings: MembersConfig,
    *,
    email: str,
    password: str,
    client_address: str | None,
    account_id: str | None = None,
) -> asyncpg.Record:
    """The membership (`id`, `account_id`) an e-mail address and password sign in to: the one rule
    behind POST /api/v1/tokens and the web app's sign-in page.

    Every attempt takes one token from two buckets (per e-mail address and per client address);
    a successful one gives them back, so only failures count. A wrong password and an unknown
    address fail alike after the same work; an unconfirmed address is told so only once its
    password is right. The pool's connection is not held while the password hash is checked.
    """
    buckets = [
        (f"sign_in:address:{client_address or 'unknown'}", settings.sign_in_per_address),
        (f"sign_in:email:{email.strip().lower()}", settings.sign_in_per_email),
    ]
    async with pool.acquire() as conn:
        for key, limit in buckets:
            decision = await take(conn, key, limit)
            if not decision.allowed:
                raise RateLimited(
                    f"too many failed sign-ins; retry in {decision.headers()['Retry-After']} s",
                    headers=decision.headers(),
                )
        user = await conn.fetchrow(db.query("user_by_email"), email.strip())
    stored_hash = user["password_hash"] if user is not None else None
    if not await passwords.verify(stored_hash, password):
        raise Unauthorized("wrong e-mail address or password")
    async with pool.acquire() as conn:
        for key, limit in buckets:
            await conn.execute(db.query("refund_rate_limit_token"), key, float(limit.limit))
        if user["confirmed_at"] is None:
            raise EmailUnconfirmed(
                "confirm your e-mail address first: open the link in the confirmation e-mail"
            )
        membership = await conn.fetchrow(db.query("membership_for_sign_in"), user["id"], account_id)
        if membership is None:
            raise Forbidden(
                "you are not a member of that account" if account_id
                else "you are not a member of any account"
            )
        if passwords.needs_rehash(stored_hash):
            await conn.execute(
                db.query("update_password_hash"), user["id"], await passwords.hash(password)
            )
    return membership


async def invite(
    conn: asyncpg.Connection,
    settings: Config,
    *,
    account_id: str,
    invited_by: str,
    data: NewInvitation,
) -> Invitation:
    """Invite `data.email` to the account and queue the e-mail with its link, in one transaction;
    re-inviting replaces the pending invitation (its link stops working). Wake the mail sender
    after it returns. The rule behind POST /api/v1/invitations and the web app's Members page."""
    account_name = await require_active_account(conn, account_id)
    if await conn.fetchval(db.query("is_member"), account_id, data.email):
        raise ValidationFailed(["invitation.email: is already a member of this account"])
    token = new_link_token()
    async with conn.transaction():
        await conn.execute(db.query("revoke_pending_invitations"), account_id, data.email)
        row = await conn.fetchrow(
            db.query("insert_invitation"), new_id("inv"), account_id, data.email,
            data.role or "member", hash_token(token), invited_by,
            settings.members.invitation_ttl_days * 86400,
        )
        subject, body = invitation_mail(
            settings.server.web_base_url.rstrip("/"), account_name, token, row["expires_at"]
        )
        await mail.enqueue(conn, settings.mail, data.email, subject, body)
    return Invitation.from_row(row)


async def list_members(conn: asyncpg.Connection, account_id: str, page: Page) -> tuple[list[Member], int]:
    """One page of the account's members, oldest first, and how many it has."""
    total = await conn.fetchval(db.query("count_members"), account_id)
    rows = await conn.fetch(db.query("list_members"), account_id, page.size, page.offset)
    return [Member.from_row(row) for row in rows], total
