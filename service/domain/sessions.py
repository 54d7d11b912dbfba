"""Web app sessions: a browser signed in with e-mail and password (`members.sign_in`) holds a
random cookie value; only its SHA-256 is stored (table web_sessions, migration 0024), next to the
session's CSRF token. A session acts with both scopes; its member's role limits it as a token's
would (service/web/auth.py `check`).

A session is of one membership. A user who is a member of several accounts moves between them
with `switch_account`: that session ends and one of the other membership starts. Every session
started records its membership as the one last used (members.web_session_at, migration 0038),
where the web app's next sign-in goes (`members.authenticate(last_used=True)`)."""

from __future__ import annotations

import hmac
import secrets

import asyncpg
import attrs

from .. import db
from .errors import NotFound, Unauthorized
from .ids import could_be_id
from .models import Page
from .tokens import Principal, hash_token

# secrets.token_urlsafe(32): 43 characters. Anything else is refused without a query.
_COOKIE_LENGTH = 43


@attrs.frozen(kw_only=True)
class Session:
    principal: Principal
    csrf_token: str
    account_name: str
    memberships: int  # the user's, in every account (the header offers the others)


async def start_session(conn: asyncpg.Connection, member_id: str, ttl_seconds: float) -> str:
    """Store a new session of `member_id`; returns the cookie value (shown this once)."""
    cookie = secrets.token_urlsafe(32)
    await conn.execute(
        db.query("insert_web_session"), hash_token(cookie), member_id, secrets.token_urlsafe(32),
        float(ttl_seconds),
    )
    return cookie


async def find_session(conn: asyncpg.Connection, cookie: str | None) -> Session | None:
    """The live session behind a cookie value, or None (absent, malformed, ended, expired)."""
    if not cookie or len(cookie) != _COOKIE_LENGTH or not cookie.isascii():
        return None
    row = await conn.fetchrow(db.query("principal_by_session_hash"), hash_token(cookie))
    if row is None:
        return None
    return Session(
        principal=Principal(
            member_id=row["member_id"], user_id=row["user_id"], account_id=row["account_id"],
            role=row["role"], scopes=frozenset(row["scopes"]), name=row["name"], email=row["email"],
        ),
        csrf_token=row["csrf_token"],
        account_name=row["account_name"],
        memberships=row["memberships"],
    )


async def user_memberships(
    conn: asyncpg.Connection, user_id: int, page: Page
) -> tuple[list[asyncpg.Record], int]:
    """A page of the user's memberships (account_id, account_name, role, is_owner), by account
    name, and how many they hold in all."""
    total = await conn.fetchval(db.query("count_user_memberships"), user_id)
    rows = await conn.fetch(db.query("user_memberships"), user_id, page.size, page.offset)
    return rows, total


async def switch_account(
    conn: asyncpg.Connection, cookie: str | None, user_id: int, account_id: str, ttl_seconds: float
) -> tuple[str, asyncpg.Record, float]:
    """End the session behind `cookie` and start one of the same user's membership in
    `account_id`: returns the new cookie value, the membership (id, account_id, account_name,
    email) and the seconds the new session lives (its cookie's Max-Age). NotFound when the user
    holds no membership there, the same for another's account as for an unknown id; nothing
    changes then. The account comes from a form: the membership is
    looked up by the session's user, never taken on trust. The new session ends when this one
    would have (at most `ttl_seconds` from now); Unauthorized when this one has ended already."""
    if not could_be_id(account_id):
        raise NotFound("you are not a member of that account")
    async with conn.transaction():
        membership = await conn.fetchrow(db.query("lock_membership_of_user"), user_id, account_id)
        if membership is None:
            raise NotFound("you are not a member of that account")
        # Only the call that ends a live session starts another: a sign-out (or another tab's
        # switch) since the page checked it would otherwise be undone by a new session. The new
        # one ends when the old one would have (switching back and forth renewed it for ever).
        left = None
        if cookie and len(cookie) == _COOKIE_LENGTH and cookie.isascii():
            left = await conn.fetchval(db.query("end_web_session_to_switch"), hash_token(cookie))
        if left is None:
            raise Unauthorized("this session has ended (signed out, or switched in another tab); "
                               "sign in again")
        lifetime = min(ttl_seconds, left)
        return await start_session(conn, membership["id"], lifetime), membership, lifetime


def csrf_matches(session: Session, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(session.csrf_token.encode(), str(sent).encode())


async def end_session(conn: asyncpg.Connection, cookie: str | None) -> None:
    """Sign-out: the session stops working on the server at once. Deleting sessions ended a day
    ago is housekeeping's (`prune_sessions`, hourly), not each sign-out's."""
    if cookie and len(cookie) == _COOKIE_LENGTH and cookie.isascii():
        await conn.execute(db.query("revoke_web_session"), hash_token(cookie))
