"""Members: creating users, confirming e-mail addresses, invitations, and signing in for a token.

Decisions where the specification is silent (also in README "Members"):
- `terms_of_service` counts as accepted when it is JSON `true` or one of the strings "accepted",
  "true", "1", "yes" (any case, surrounding spaces ignored). Anything else is a 422.
- A user may belong to several accounts. `POST /api/v1/tokens` takes an optional `account_id`;
  without it the token belongs to the user's oldest membership. The web app's sign-in goes to
  the membership it last started a session of (domain/sessions.py), or, to open a page of a
  record in another of the user's accounts, to that account; and switches between them.
- Confirmation and invitation links carry a random token that is stored only as its SHA-256.
  The outbox keeps the message body (and so the link) until it is sent, then erases it.
- A user created by an administrator (POST /users) has no password until they confirm their
  address: the confirmation sets the password they choose. The password the administrator sent
  is validated (SPEC 4.4 requires it) and discarded; it never signs anyone in.
- Accepting an invitation as someone who already has a password they chose requires that
  password; the invitation does not replace it. Someone without one (never confirmed, or only
  an administrator-chosen password from before migration 0020) sets theirs with the invitation,
  whose link, e-mailed to the address, proves it is theirs; their old tokens are revoked.
- POST /users answers alike whether or not the address is registered in another account: an
  existing user becomes a member at once and is told so by e-mail (their own password signs
  in; without one, the e-mail is a confirmation link to choose it); the response shows the
  names the administrator gave, as for a new user.

Each state-changing action is one function here (`create_user`, `confirm_email`, `sign_in`,
`invite`, `revoke_invitation`, `accept_invitation`, `change_role`, `remove_member`, `change_password`,
`request_password_reset`, `reset_password`), the single place to record it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import attrs

from .. import db
from ..config import Config
from . import audit, mail, webhooks
from .convert import (
    Email,
    Password,
    PersonName,
    Role,
    Scope,
    TermsAcceptance,
    structure,
    unstructure,
)
from .errors import (
    Conflict,
    EmailUnconfirmed,
    Forbidden,
    NotFound,
    RateLimited,
    Unauthorized,
    UsageBlocked,
    ValidationFailed,
)
from .ids import could_be_id, new_id
from .models import Page
from .passwords import Passwords, address_key, guard_password_attempt, remember_client, take_bucket
from .rfp_items import unassign_member_items
from .tokens import ROLES, SCOPES, WRITER_ROLES, Principal, hash_token, issue_token


def _non_empty(instance: object, attribute: attrs.Attribute, value: list) -> None:
    if not value:
        raise ValueError("must name at least one scope")


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
    email: Email  # validated (at most 254 characters) before it keys a rate-limit bucket
    password: str
    scopes: list[Scope] = attrs.field(factory=lambda: list(SCOPES), validator=_non_empty)
    account_id: str | None = None


@attrs.frozen(kw_only=True)
class ConfirmationInput:
    token: str
    # Required unless the user already has a password they chose.
    password: Password | None = None


@attrs.frozen(kw_only=True)
class RoleChange:
    role: Role


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


def _hours(hours: float) -> str:
    """A link's lifetime in words: "1 hour" (the reset link's default said "1 hours"), "48 hours"."""
    return f"{hours:g} hour{'' if hours == 1 else 's'}"


def confirmation_mail(base_url: str, account_name: str, token: str, ttl_hours: float) -> tuple[str, str]:
    """The confirmation of a sign-in an admin created: the web app's /confirm page first, where
    the user chooses a password in a form; the API's way follows, for integrations."""
    account_name = mail.one_line(account_name)
    body = f"""Hello,

an administrator of {account_name} created a sign-in for you on the RFP response service.
Confirm your e-mail address and choose your password (12 to 128 characters) within
{_hours(ttl_hours)}, here (the link works once):

{base_url}/confirm?token={token}

For integrations, the API's way: POST {base_url}/api/v1/users/confirmation with
{{"token": "{token}", "password": "…"}}.

If you did not expect this message, ignore it.
"""
    return "Confirm your e-mail address", body


def invitation_mail(
    base_url: str, account_name: str, token: str, expires_at: datetime
) -> tuple[str, str]:
    """The invitation: its web page first (the web app's /invitations/{token}, where the invitee
    chooses a password and accepts the terms in a form); the API's way follows, for integrations."""
    link = f"{base_url}/invitations/{token}"
    api = f"{base_url}/api/v1/invitations/{token}"
    expires = expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    account_name = mail.one_line(account_name)
    body = f"""Hello,

you are invited to join {account_name} on the RFP response service.
Open this link to accept (it works once and expires {expires}):

{link}

There you give your name, choose your password (12 to 128 characters) and accept the terms of
service; then you are signed in. If you already have a sign-in on the service with this
address, give its password instead.

If you did not expect this message, ignore it.

For integrations, the same invitation through the API: GET {api}
shows it, and POST {api}/accept with the JSON
{{"password": "…", "first_name": "…", "last_name": "…", "terms_of_service": "accepted"}}
accepts it.
"""
    return f"You are invited to {account_name}", body


def added_mail(base_url: str, account_name: str) -> tuple[str, str]:
    """"You were added": the web app's sign-in page first; the API's way follows, for integrations."""
    account_name = mail.one_line(account_name)
    body = f"""Hello,

an administrator of {account_name} added you as a member on the RFP response service.
Sign in with your existing password:

{base_url}/signin

For integrations, the API's way: POST {base_url}/api/v1/tokens with your e-mail address,
password and this account's id (README: Members).

If you did not expect this, tell the account's administrator; your password is unchanged.
"""
    return f"You were added to {account_name}", body


@asynccontextmanager
async def _race_is_conflict() -> AsyncIterator[None]:
    """A unique index refusing a row written meanwhile by a request that took no address lock
    (the operator CLI adding the same member) is a 409 to retry, not a 500."""
    try:
        yield
    except asyncpg.UniqueViolationError:
        raise Conflict("the same change was made at the same moment; try again") from None


def _base_url(config: Config) -> str:
    return config.server.web_base_url.rstrip("/")


async def _within_account_mail_bound(
    conn: asyncpg.Connection, config: Config, account_id: str, email: str
) -> None:
    """429 rate_limited, with Retry-After, when the account's members already had
    mail.invitation_mails_per_hour invitations, "you were added" or confirmations written to
    `email` in the last hour (counted under the caller's lock_address), or
    mail.account_mails_per_hour e-mails of any kind (mail.account_mail_wait: the account's mail
    is locked until the caller's transaction ends). Raised inside the caller's transaction, it
    writes nothing: no user, membership or invitation without its e-mail."""
    wait = await mail.address_mail_wait(conn, config.mail, account_id, email)
    if wait:
        raise RateLimited(
            f"this account's members had {config.mail.invitation_mails_per_hour} invitations or "
            "welcome e-mails sent to this address in the last hour, as many as "
            f"mail.invitation_mails_per_hour allows; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    wait = await mail.account_mail_wait(conn, config.mail, account_id)
    if wait:
        raise RateLimited(
            f"this account's members had {config.mail.account_mails_per_hour} e-mails sent in the "
            f"last hour, as many as mail.account_mails_per_hour allows; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


ALREADY_A_MEMBER = "is already a member of this account"
T = TypeVar("T")


async def _structure_new_address(
    conn: asyncpg.Connection, account_id: str, fields: Any, cls: type[T], root: str
) -> T:
    """`fields` (a new user or invitation) as `cls`. When other fields are refused, an address
    that is already a member here is said among them, so that one 422 lists all there is to put
    right; when none is, the caller checks it again under the address's lock."""
    try:
        return structure(fields, cls, root=root)
    except ValidationFailed as exc:
        email = fields.get("email") if isinstance(fields, dict) else None
        try:
            address = structure(email, Email)
        except ValidationFailed:  # refused among the others already
            raise exc from None
        if await conn.fetchval(db.query("is_member"), account_id, address):
            exc.details = [f"{root}.email: {ALREADY_A_MEMBER}", *(exc.details or [])]
        raise


async def member_created(
    conn: asyncpg.Connection, actor: audit.Actor | None, account_id: str, member: Member
) -> None:
    """A new membership's audit event and member.created webhook, in the caller's transaction."""
    data = unstructure(member)
    if actor is not None:
        await audit.record(conn, actor, "member.created", record_id=member.id, account_id=account_id,
                           after={k: data[k] for k in ("email", "first_name", "last_name", "role")})
    await webhooks.emit(conn, account_id, "member.created", member.id, data)


async def create_user(
    conn: asyncpg.Connection, config: Config, account_id: str, fields: Any,
    actor: audit.Actor | None = None, *, requested_by: str | None = None,
) -> Member:
    """POST /users: make the address a member of the account and e-mail it; when member
    `requested_by` asks, the e-mail counts against mail.invitation_mails_per_hour and
    mail.account_mails_per_hour (429 past either, nothing written).

    The answer is the same whether or not the address belongs to a user of another account
    (module docstring); only an address that is already a member here is refused, which the
    administrator can see in the member list anyway.
    """
    account_name = await require_active_account(conn, account_id)
    data = await _structure_new_address(conn, account_id, fields, NewUser, "user")
    first, last = data.first_name or "", data.last_name or ""
    role = data.role or "member"
    async with _race_is_conflict(), conn.transaction():
        await conn.execute(db.query("lock_address"), data.email)
        if await conn.fetchval(db.query("is_member"), account_id, data.email):
            raise ValidationFailed([f"user.email: {ALREADY_A_MEMBER}"])
        if requested_by is not None:
            await _within_account_mail_bound(conn, config, account_id, data.email)
        user = await conn.fetchrow(db.query("user_by_email"), data.email)
        if user is None:
            user_id = await conn.fetchval(db.query("insert_unconfirmed_user"), data.email, first, last)
        else:
            user_id = user["id"]
        if user is None or not user["password_chosen_by_user"]:
            # Without a password of their own they need the link that lets them choose one.
            token = new_link_token()
            ttl_hours = config.members.confirmation_ttl_hours
            await conn.execute(
                db.query("insert_email_confirmation"), user_id, hash_token(token), ttl_hours * 3600
            )
            subject, body = confirmation_mail(_base_url(config), account_name, token, ttl_hours)
            kind = "confirmation"
        else:
            subject, body = added_mail(_base_url(config), account_name)
            kind = "added"
        member_id = await conn.fetchval(
            db.query("insert_membership"), new_id("mbr"), account_id, user_id, role
        )
        await mail.enqueue(conn, config.mail, data.email, subject, body, kind=kind,
                           requested_by=requested_by, account_id=account_id)
        member = await fetch_member(conn, member_id, account_id)
        if user is not None:  # show what a new user would show: the names given, not theirs
            name = await conn.fetchval(db.query("display_name_of"), first, last, member.email)
            member = attrs.evolve(member, first_name=first, last_name=last, name=name)
        await member_created(conn, actor, account_id, member)
    return member


async def confirm_email(
    pool: asyncpg.Pool, passwords: Passwords, token: str, password: str | None,
    actor: audit.Actor | None = None,
) -> asyncpg.Record:
    """Spend a confirmation link; it also sets the password the user chose, which is required
    unless they already have one of their own (a 422 leaves the link unspent). A password of
    their own (chosen since, e.g. with an invitation) is kept: a link replaces no password."""
    digest = hash_token(token)
    async with pool.acquire() as conn:
        user = await conn.fetchrow(db.query("user_for_confirmation"), digest)
    if user is None:
        raise NotFound("this confirmation link is unknown, already used or expired")
    if user["password_chosen_by_user"]:
        password = None
    elif password is None:
        raise ValidationFailed(["password: choose your password (12 to 128 characters)"])
    new_hash = await passwords.hash(password) if password is not None else None
    async with pool.acquire() as conn, conn.transaction():
        user_id = await conn.fetchval(db.query("use_email_confirmation"), digest)
        if user_id is None:
            raise NotFound("this confirmation link is unknown, already used or expired")
        row = await conn.fetchrow(db.query("confirm_user"), user_id, new_hash)
        if actor is not None:
            account_id = await conn.fetchval(db.query("first_account_of_user"), user_id)
            await audit.record(conn, attrs.evolve(actor, label=row["email"]), "user.email_confirmed",
                               record_id=str(user_id), account_id=account_id)
        return row


async def confirmation_needs_password(conn: asyncpg.Connection, token: str) -> bool:
    """Whether a live confirmation link still needs the user to choose a password."""
    user = await conn.fetchrow(db.query("user_for_confirmation"), hash_token(token))
    if user is None:
        raise NotFound("this confirmation link is unknown, already used or expired")
    return not user["password_chosen_by_user"]


def confirmed_body(row: asyncpg.Record) -> dict[str, Any]:
    return {"confirmed": True, "email": row["email"], "confirmed_at": unstructure(row["confirmed_at"])}


def _expires_at(ttl_days: int) -> datetime | None:
    return datetime.now(UTC) + timedelta(days=ttl_days) if ttl_days else None


def _usable(row: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if row is None:
        raise NotFound("this invitation link is unknown")
    if row["state"] == "accepted":
        raise NotFound("this invitation has already been accepted")
    if row["state"] == "revoked":
        raise NotFound(
            "this invitation was replaced by a newer one or withdrawn; use the latest e-mail, or ask "
            "an administrator of the account to invite you again"
        )
    if row["expired"]:
        raise NotFound("this invitation has expired; ask an administrator for a new one")
    return row


# -- signing in -------------------------------------------------------------------------------


async def sign_in(
    pool: asyncpg.Pool, passwords: Passwords, config: Config, fields: Any, client: str,
    actor: audit.Actor | None = None,
) -> dict[str, Any]:
    """POST /tokens: e-mail and password (`authenticate`) for an API token of one membership."""
    if not isinstance(fields, dict):
        raise ValidationFailed(["the body must be a JSON object with email and password"])
    data = structure(fields, SignIn)
    membership = await authenticate(
        pool, passwords, config, email=data.email, password=data.password,
        account_id=data.account_id, client=client, actor=actor,
    )
    scopes = sorted(set(data.scopes))
    expires_at = _expires_at(config.auth.token_ttl_days)
    async with pool.acquire() as conn, conn.transaction():
        token = await issue_token(conn, membership["id"], scopes, expires_at)
        if actor is not None:
            signed_in = signed_in_actor(actor, membership)
            await audit.record(conn, signed_in, "auth.signed_in", record_id=membership["id"])
            await audit.record(conn, signed_in, "token.created", record_id=membership["id"],
                               after={"scopes": scopes, "expires_at": expires_at})
    return {
        "token": token,
        "scopes": scopes,
        "expires_at": expires_at,
        "account_id": membership["account_id"],
        "member_id": membership["id"],
    }


def signed_in_actor(actor: audit.Actor, membership: Mapping[str, Any]) -> audit.Actor:
    """The audit actor of a successful sign-in: the member it signed in as."""
    return attrs.evolve(actor, type="member", id=membership["id"], label=membership["email"],
                        account_id=membership["account_id"])


async def authenticate(
    pool: asyncpg.Pool,
    passwords: Passwords,
    config: Config,
    *,
    email: str,
    password: str,
    account_id: str | None,
    client: str,
    actor: audit.Actor | None = None,
    last_used: bool = False,
    holding: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The membership (`id`, `account_id`, `email`) an e-mail address and password sign in to:
    the one rule behind POST /api/v1/tokens (`sign_in`) and the web app's sign-in page. Without
    `account_id`, the user's oldest membership, or with `last_used` (the web app) the one whose
    web session started last (sessions.py), the oldest when none has had one; before either,
    with `holding` (a record's kind and id: the page the web app signs in to open), the
    membership in the account that holds it, when that account is one of the user's.

    Throttled by `guard_password_attempt` (every attempt counts); a failure is audited when an
    `actor` is given. A password an administrator chose (from before migration 0020) is refused
    after it is checked: it is not the user's own, so it must be replaced by a reset first.
    """
    email = email.strip()
    if len(email) > 254 or "\x00" in email:  # NUL: a form may carry one; PostgreSQL cannot
        raise ValidationFailed(["email: is not a valid e-mail address"])
    async with pool.acquire() as conn:
        user = await conn.fetchrow(db.query("user_by_email"), email)
        await guard_password_attempt(
            conn, config.members, client, email, user["id"] if user is not None else None
        )
    stored_hash = user["password_hash"] if user is not None else None
    if not await passwords.verify(stored_hash, password):
        if actor is not None:  # committed on its own: the refusal follows
            async with pool.acquire() as conn:
                membership = None if user is None else await conn.fetchrow(
                    db.query("membership_for_sign_in"), user["id"], account_id
                )
                await audit.record(
                    conn, attrs.evolve(actor, label=email), "auth.sign_in_failed",
                    record_id=None if user is None else str(user["id"]),
                    account_id=None if membership is None else membership["account_id"],
                )
        raise Unauthorized("wrong e-mail address or password")
    async with pool.acquire() as conn:
        if user["confirmed_at"] is None:
            raise EmailUnconfirmed(
                "confirm your e-mail address first: open the link in the confirmation e-mail"
            )
        if not user["password_chosen_by_user"]:
            raise Forbidden(
                "this password was chosen by an administrator; choose your own first: "
                "POST /api/v1/users/password/reset with your e-mail address"
            )
        await remember_client(conn, user["id"], client)
        membership = None
        if holding is not None and account_id is None and could_be_id(holding[1]):
            membership = await conn.fetchrow(
                db.query("membership_holding_record"), user["id"], holding[1], holding[0]
            )
        if membership is None and last_used and account_id is None:
            membership = await conn.fetchrow(db.query("membership_last_used"), user["id"])
        elif membership is None:
            membership = await conn.fetchrow(
                db.query("membership_for_sign_in"), user["id"], account_id
            )
        if membership is None:
            raise Forbidden(
                "you are not a member of that account" if account_id
                else "you are not a member of any account"
            )
        if passwords.needs_rehash(stored_hash):
            await conn.execute(
                db.query("update_password_hash"), user["id"], await passwords.hash(password)
            )
    return {**dict(membership), "email": user["email"]}


# -- invitations ------------------------------------------------------------------------------


async def invite(
    conn: asyncpg.Connection, config: Config, who: Principal, fields: Any,
    actor: audit.Actor | None = None, *, replacing: str | None = None,
) -> Invitation:
    """POST /invitations: (re-)invite an address; a newer invitation replaces the pending one.
    Its e-mail counts against mail.invitation_mails_per_hour (to the address) and
    mail.account_mails_per_hour: 429 past either, nothing written. With `replacing` (the Members
    page's "Send again" of one invitation), a 409 unless that invitation of the address is still
    pending: one revoked since the page was shown is not sent again."""
    account_name = await require_active_account(conn, who.account_id)
    data = await _structure_new_address(conn, who.account_id, fields, NewInvitation, "invitation")
    token = new_link_token()
    async with _race_is_conflict(), conn.transaction():
        # Concurrent invitations to one address wait here instead of failing on
        # invitations_one_pending: each replaces the one before.
        await conn.execute(db.query("lock_address"), data.email)
        if await conn.fetchval(db.query("is_member"), who.account_id, data.email):
            raise ValidationFailed([f"invitation.email: {ALREADY_A_MEMBER}"])
        # Locked: a revoke under way is waited for, then this finds nothing. An id no invitation
        # can have (a form's NUL byte) finds nothing either.
        if replacing is not None and (
            not could_be_id(replacing) or await conn.fetchval(
                db.query("lock_pending_invitation_to"), replacing, who.account_id, data.email
            ) is None
        ):
            raise Conflict(f"the invitation to {data.email} is no longer pending (revoked, accepted "
                           "or sent again since the page was shown); nothing was sent")
        await _within_account_mail_bound(conn, config, who.account_id, data.email)
        await conn.execute(db.query("revoke_pending_invitations"), who.account_id, data.email)
        row = await conn.fetchrow(
            db.query("insert_invitation"), new_id("inv"), who.account_id, data.email,
            data.role or "member", hash_token(token), who.member_id,
            config.members.invitation_ttl_days * 86400,
        )
        subject, body = invitation_mail(_base_url(config), account_name, token, row["expires_at"])
        await mail.enqueue(conn, config.mail, data.email, subject, body, kind="invitation",
                           requested_by=who.member_id, account_id=who.account_id)
        if actor is not None:
            await audit.record(conn, actor, "invitation.created", record_id=row["id"],
                               after={"email": data.email, "role": row["role"]})
    return Invitation.from_row(row)


async def list_invitations(
    conn: asyncpg.Connection, account_id: str, page: Page
) -> tuple[list[Invitation], int]:
    """The invitations that wait for their invitee (an expired one shows as expired: sending it
    again or revoking it is the admin's choice), newest first; not those of an address that
    became a member another way (POST /users, the CLI), whose link is a 409 already."""
    total = await conn.fetchval(db.query("count_pending_invitations"), account_id)
    rows = await conn.fetch(db.query("list_pending_invitations"), account_id, page.size, page.offset)
    return [Invitation.from_row(row) for row in rows], total


async def revoke_invitation(
    conn: asyncpg.Connection, account_id: str, invitation_id: str, actor: audit.Actor | None = None
) -> Invitation:
    """An admin withdraws a pending invitation (sent to a wrong address, or no longer wanted):
    its link stops working at once. Another account's invitation is as unknown as none."""
    async with conn.transaction():
        row = await conn.fetchrow(db.query("revoke_invitation"), invitation_id, account_id)
        if row is None:
            state = await conn.fetchval(db.query("invitation_state_in_account"), invitation_id, account_id)
            if state is None:
                raise NotFound(f"no invitation {invitation_id} in this account")
            newer = await conn.fetchval(db.query("pending_invitation_replacing"), invitation_id, account_id)
            if newer is not None:  # "Send again" replaced it meanwhile: that link is live
                raise Conflict(f"invitation {invitation_id} was replaced by a newer invitation to the "
                               f"same address, {newer}, still pending: revoke that one")
            raise Conflict(f"invitation {invitation_id} is {state}, not pending: there is nothing to revoke")
        if actor is not None:
            await audit.record(conn, actor, "invitation.revoked", record_id=row["id"],
                               before={"email": row["email"], "role": row["role"]})
    return Invitation.from_row(row)


async def read_invitation(conn: asyncpg.Connection, token: str) -> dict[str, Any]:
    row = await conn.fetchrow(db.query("invitation_by_token_hash"), hash_token(token))
    if row is None:
        raise NotFound("this invitation link is unknown")
    data = unstructure(Invitation.from_row(row))
    data["account_name"] = row["account_name"]
    return data


async def accept_invitation(
    pool: asyncpg.Pool, passwords: Passwords, config: Config, token: str, fields: Any, client: str,
    actor: audit.Actor | None = None,
) -> Member:
    """Accept an invitation link. A user with a password they chose must give it (throttled
    like sign-in); anyone else sets their password here (module docstring)."""
    digest = hash_token(token)
    if not isinstance(fields, dict):
        raise ValidationFailed(["the body must be a JSON object with password and terms_of_service"])
    async with pool.acquire() as conn:
        invitation = _usable(await conn.fetchrow(db.query("invitation_by_token_hash"), digest))
        data = structure(fields, InvitationAcceptance)
        user = await conn.fetchrow(db.query("user_by_email"), invitation["email"])
        await guard_password_attempt(
            conn, config.members, client, invitation["email"],
            user["id"] if user is not None else None,
        )
    new_hash: str | None = None
    if user is not None and user["password_chosen_by_user"]:
        if not await passwords.verify(user["password_hash"], data.password):
            raise ValidationFailed(
                ["password: you already have a sign-in with this address; give its password"]
            )
    else:
        new_hash = await passwords.hash(data.password)
    first, last = data.first_name or "", data.last_name or ""
    async with _race_is_conflict(), pool.acquire() as conn, conn.transaction():
        # Two acceptances for one new address (invitations from two accounts) wait here; the
        # second then finds the user the first created, instead of failing on users_email_key.
        await conn.execute(db.query("lock_address"), invitation["email"])
        invitation = _usable(await conn.fetchrow(db.query("lock_invitation_by_token_hash"), digest))
        user = await conn.fetchrow(db.query("lock_user_by_email"), invitation["email"])
        if user is None:
            user_id = await conn.fetchval(
                db.query("insert_confirmed_user"), invitation["email"], first, last, new_hash
            )
        else:
            if new_hash is None and not user["password_chosen_by_user"]:
                raise Conflict("the sign-in of this address changed meanwhile; try again")
            if new_hash is not None and user["password_chosen_by_user"]:
                # Someone chose a password for this address since we looked: it must be given.
                raise ValidationFailed(
                    ["password: you already have a sign-in with this address; give its password"]
                )
            user_id = user["id"]
            await conn.execute(
                db.query("accept_terms_for_invited_user"), user_id, new_hash, first, last
            )
            if new_hash is not None and user["password_hash"] is not None:
                # Tokens may have been signed in with the password an administrator chose.
                await conn.execute(db.query("revoke_user_tokens"), user_id, None)
        if await conn.fetchval(db.query("is_member"), invitation["account_id"], invitation["email"]):
            raise Conflict(f"{invitation['email']} is already a member of this account")
        member_id = await conn.fetchval(
            db.query("insert_membership"), new_id("mbr"), invitation["account_id"], user_id,
            invitation["role"],
        )
        if await conn.fetchval(db.query("mark_invitation_accepted"), invitation["id"], member_id) is None:
            raise NotFound("this invitation has already been accepted")
        await remember_client(conn, user_id, client)
        member = await fetch_member(conn, member_id, invitation["account_id"])
        if actor is not None:
            actor = attrs.evolve(actor, label=invitation["email"])
            await audit.record(conn, actor, "invitation.accepted", record_id=invitation["id"],
                               account_id=invitation["account_id"])
        await member_created(conn, actor, invitation["account_id"], member)
        return member


# -- managing members -------------------------------------------------------------------------


async def list_members(
    conn: asyncpg.Connection, account_id: str, page: Page
) -> tuple[list[Member], int]:
    total = await conn.fetchval(db.query("count_members"), account_id)
    rows = await conn.fetch(db.query("list_members"), account_id, page.size, page.offset)
    return [Member.from_row(row) for row in rows], total


async def _lock_member(
    conn: asyncpg.Connection, account_id: str, member_id: str, actor: audit.Actor | None = None
) -> asyncpg.Record:
    """The member whose role or membership changes, locked. With `actor` another member of the
    account (an admin's request), the actor's own membership is locked too (FOR SHARE, both in
    id order, so two admins changing each other take them in one order) and must still be an
    admin's: X making Y a viewer while Y removed X each locked only the other, and both applied,
    which neither order gives."""
    acting = actor.member_id if actor is not None and actor.member_id != member_id else None
    if acting is not None and acting < member_id:
        await _lock_acting_admin(conn, account_id, acting)
    row = await conn.fetchrow(db.query("lock_member"), member_id, account_id)
    if row is None:
        raise NotFound(f"no member {member_id} in this account")
    if acting is not None and acting > member_id:
        await _lock_acting_admin(conn, account_id, acting)
    return row


async def _lock_acting_admin(conn: asyncpg.Connection, account_id: str, member_id: str) -> None:
    if await conn.fetchval(db.query("lock_acting_member"), member_id, account_id) != "admin":
        raise Forbidden("you are no longer an admin of this account (your role changed or you were "
                        "removed meanwhile); nothing was changed")


async def _keep_an_admin(conn: asyncpg.Connection, account_id: str, member: asyncpg.Record) -> None:
    if member["is_owner"]:
        raise Forbidden("the account's owner cannot be removed or given another role")
    if member["role"] == "admin" and await conn.fetchval(db.query("count_admins"), account_id) <= 1:
        raise Conflict("the account's last admin cannot be removed or given another role")


async def change_role(
    conn: asyncpg.Connection, account_id: str, member_id: str, role: str,
    actor: audit.Actor | None = None,
) -> Member:
    """Give a member another role. It applies to their tokens at once: every request reads the
    role. Their scopes stay: a viewer's write-scoped token may still ask questions (DESIGN.md
    roles), and narrowing it would not keep anything from a viewer, who can sign in for another."""
    if role not in ROLES:
        raise ValidationFailed([f"member.role: must be one of {', '.join(ROLES)}; got {role!r}"])
    async with conn.transaction():
        member = await _lock_member(conn, account_id, member_id, actor)
        if member["role"] != role:
            await _keep_an_admin(conn, account_id, member)
            await conn.execute(db.query("change_member_role"), member_id, account_id, role)
            after: dict[str, Any] = {"role": role}
            if role not in WRITER_ROLES:  # a viewer answers nothing: their items are unassigned
                after |= await _unassign(conn, account_id, member["user_id"], actor)
            if actor is not None:
                await audit.record(conn, actor, "member.role_changed", record_id=member_id,
                                   account_id=account_id, before={"role": member["role"]},
                                   after=after)
        return await fetch_member(conn, member_id, account_id)


async def _unassign(
    conn: asyncpg.Connection, account_id: str, user_id: int, actor: audit.Actor | None
) -> dict[str, int]:
    """Unassign the member's items of the account, each with its rfp_item.assigned webhook
    (rfp_items.unassign_member_items says why one per item); for the audit event, how many
    items there were."""
    count, _ = await unassign_member_items(conn, account_id, user_id, actor)
    return {"items_unassigned": count} if count else {}


async def remove_member(
    conn: asyncpg.Connection, account_id: str, member_id: str, actor: audit.Actor | None = None
) -> None:
    """Remove a membership; its tokens are deleted with it, so they stop working at once, and
    the items assigned to it are unassigned."""
    async with conn.transaction():
        member = await _lock_member(conn, account_id, member_id, actor)
        await _keep_an_admin(conn, account_id, member)
        # Their items first, while the membership is there: an admin removing their own is
        # the events' `assigned_by` (read through it), not nobody (the operator's CLI).
        unassigned = await _unassign(conn, account_id, member["user_id"], actor)
        await conn.execute(db.query("delete_member"), member_id, account_id)
        if actor is not None:
            await audit.record(conn, actor, "member.removed", record_id=member_id,
                               account_id=account_id, before={"role": member["role"]},
                               after=unassigned or None)



# -- passwords: change and reset ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PasswordChange:
    current_password: str
    new_password: Password


@attrs.frozen(kw_only=True)
class PasswordResetRequest:
    email: str


@attrs.frozen(kw_only=True)
class PasswordReset:
    token: str
    password: Password


async def change_password(
    pool: asyncpg.Pool,
    passwords: Passwords,
    config: Config,
    who: Principal,
    fields: Any,
    client: str,
    keep_token_hash: bytes,
    actor: audit.Actor | None = None,
) -> None:
    """A signed-in user replaces their password, giving the current one. Every other token of
    the user (in every account) is revoked; the one making the request keeps working."""
    data = structure(fields, PasswordChange)
    async with pool.acquire() as conn:
        await guard_password_attempt(conn, config.members, client, who.email, who.user_id)
        user = await conn.fetchrow(db.query("password_of_user"), who.user_id)
    if not await passwords.verify(user["password_hash"], data.current_password):
        raise ValidationFailed(["current_password: is not your current password"])
    new_hash = await passwords.hash(data.new_password)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(db.query("set_own_password"), who.user_id, new_hash, False)
        await conn.execute(db.query("revoke_user_tokens"), who.user_id, keep_token_hash)
        await remember_client(conn, who.user_id, client)
        if actor is not None:
            await audit.record(conn, actor, "password.changed", record_id=str(who.user_id))


def password_reset_mail(base_url: str, token: str, ttl_hours: float) -> tuple[str, str]:
    """The reset link: the web app's /password/reset page first, where the new password is typed
    in a form; the API's way follows, for integrations."""
    link = f"{base_url}/password/reset?token={token}"
    body = f"""Hello,

someone (hopefully you) asked to reset the password of this address on the RFP response service.
Open this link within {_hours(ttl_hours)} to choose a new password (it works once):

{link}

Every sign-in made with the old password ends. If you did not ask for this, ignore this
message: your password stays as it is.

For integrations, the same through the API:
curl -X POST {base_url}/api/v1/users/password/reset/complete -H 'Content-Type: application/json' \\
     -d '{{"token": "{token}", "password": "…"}}'
"""
    return "Reset your password", body


async def password_reset_link_is_live(conn: asyncpg.Connection, token: str) -> bool:
    """Whether a reset link still works (unknown, used and expired ones do not), without
    spending it: the web app's reset page says so before its form is filled in."""
    return bool(await conn.fetchval(db.query("password_reset_is_live"), hash_token(token)))


# How long a reset request's answer takes at least. A known address's link is stored and its
# e-mail queued before the answer (committed first, as everything the service accepts), which
# took 0.7 ms more than an unknown address's nothing (1.57 against 0.87 ms, median, measured
# through the web app's form): without a floor the answer's time would tell whether an address
# has a sign-in. 50 ms hides that work under any load where it stays under 50 ms.
RESET_ANSWER_SECONDS = 0.05


@asynccontextmanager
async def reset_answer_time() -> AsyncIterator[None]:
    """Around a reset request, its database connection inside: the answer comes no sooner than
    RESET_ANSWER_SECONDS after it began (waited with the connection given back). An error (a
    malformed address) is answered at once: it does not depend on whether the address is known."""
    started = time.monotonic()
    yield
    await asyncio.sleep(max(0.0, started + RESET_ANSWER_SECONDS - time.monotonic()))


async def request_password_reset(
    conn: asyncpg.Connection, config: Config, fields: Any, actor: audit.Actor | None = None
) -> bool:
    """E-mail a one-time reset link to the address if it belongs to a user. The caller answers
    the same whether or not it did (the return value, for tests and logs only)."""
    data = structure(fields, PasswordResetRequest)
    email = data.email.strip()
    if not email or len(email) > 254:
        raise ValidationFailed(["email: is not a valid e-mail address"])
    # Counted for every address, known or not, so a 429 says nothing; the callers answer within
    # reset_answer_time, so the answer's time says nothing either.
    bucket = await take_bucket(
        conn, f"password_reset:{address_key(email)}", config.members.password_reset_per_email
    )
    user = await conn.fetchrow(db.query("user_by_email"), email)
    if user is None or not bucket["allowed"]:
        return False
    token = secrets.token_urlsafe(32)
    ttl_hours = config.members.password_reset_ttl_hours
    subject, body = password_reset_mail(config.server.web_base_url.rstrip("/"), token, ttl_hours)
    async with conn.transaction():
        await conn.execute(
            db.query("insert_password_reset"), user["id"], hash_token(token), ttl_hours * 3600
        )
        await mail.enqueue(conn, config.mail, user["email"], subject, body, kind="password_reset")
        if actor is not None:
            account_id = await conn.fetchval(db.query("first_account_of_user"), user["id"])
            await audit.record(conn, attrs.evolve(actor, label=user["email"]),
                               "password.reset_requested", record_id=str(user["id"]),
                               account_id=account_id)
    return True


async def reset_password(
    pool: asyncpg.Pool, passwords: Passwords, fields: Any, actor: audit.Actor | None = None
) -> None:
    """Complete a reset: the link proves the address; the new password is the user's own, and
    every token of the user is revoked."""
    data = structure(fields, PasswordReset)
    digest = hash_token(data.token)
    async with pool.acquire() as conn:  # no hashing work for a made-up token
        if not await conn.fetchval(db.query("password_reset_is_live"), digest):
            raise NotFound("this reset link is unknown, already used or expired")
    new_hash = await passwords.hash(data.password)
    async with pool.acquire() as conn, conn.transaction():
        user_id = await conn.fetchval(db.query("use_password_reset"), digest)
        if user_id is None:
            raise NotFound("this reset link is unknown, already used or expired")
        await conn.execute(db.query("set_own_password"), user_id, new_hash, True)
        await conn.execute(db.query("revoke_user_tokens"), user_id, None)
        if actor is not None:
            account_id = await conn.fetchval(db.query("first_account_of_user"), user_id)
            await audit.record(conn, actor, "password.reset", record_id=str(user_id),
                               account_id=account_id)
