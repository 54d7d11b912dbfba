"""API tokens (format, checksum, hashing), who holds them (`Principal`), roles and scopes.

A token is `rfpk_` + 30 random base62 characters + a 6-character base62 CRC32 of those 30: a
mistyped token fails the checksum and is rejected without a database query. Only its SHA-256 is
stored; the lookup is by hash, and the stored hash is compared again in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import attrs

from .. import db
from .errors import Forbidden, NotFound
from .ids import BASE62, base62

TOKEN_PREFIX = "rfpk_"
SCOPES = ("read", "write")
ROLES = ("admin", "member", "viewer")
WRITER_ROLES = ("admin", "member")  # the roles that may write RFPs (and be assigned their items)
_BASE62_CHARS = frozenset(BASE62)
_RANDOM_LEN = 30
_CHECKSUM_LEN = 6
_TOKEN_SPACE = 62**_RANDOM_LEN


def _checksum(body: str) -> str:
    return base62(zlib.crc32(body.encode()), _CHECKSUM_LEN)


def new_token() -> str:
    body = base62(secrets.randbelow(_TOKEN_SPACE), _RANDOM_LEN)
    return TOKEN_PREFIX + body + _checksum(body)


def token_well_formed(token: str) -> bool:
    if not token.startswith(TOKEN_PREFIX) or len(token) != len(TOKEN_PREFIX) + 36:
        return False
    body, checksum = token[len(TOKEN_PREFIX) : -_CHECKSUM_LEN], token[-_CHECKSUM_LEN:]
    return _BASE62_CHARS.issuperset(body) and hmac.compare_digest(_checksum(body), checksum)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@attrs.frozen(kw_only=True)
class Principal:
    """Who is calling: a membership (member of one account) through one token."""

    member_id: str
    user_id: int
    account_id: str
    role: str
    scopes: frozenset[str]
    name: str
    email: str


async def issue_token(
    conn: asyncpg.Connection,
    member_id: str,
    scopes: Iterable[str],
    expires_at: datetime | None = None,
    source: str = "sign_in",
) -> str:
    """Store a new token for a member and return it; this is the only time it is visible.
    `source`: sign_in, cli or demo (shown in the member's token list)."""
    token = new_token()
    await conn.execute(
        db.query("insert_api_token_from"), member_id, hash_token(token), sorted(set(scopes)),
        expires_at, source,
    )
    return token


def expiry(ttl_days: int) -> datetime | None:
    """When a token made now with a lifetime of `ttl_days` expires; None for 0 (never)."""
    return datetime.now(UTC) + timedelta(days=ttl_days) if ttl_days else None


@attrs.frozen(kw_only=True)
class TokenInfo:
    """A token as its member and admins see it: never the token or its hash."""

    id: int
    member_id: str
    scopes: list[str]
    source: str
    state: str  # live, expired or revoked
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], member_id: str | None = None) -> TokenInfo:
        state = "live" if row["live"] else "revoked" if row["revoked_at"] else "expired"
        return cls(
            id=row["id"], member_id=member_id or row["member_id"], scopes=list(row["scopes"]),
            source=row["source"], state=state, created_at=row["created_at"],
            expires_at=row["expires_at"], revoked_at=row["revoked_at"],
        )


def _may_manage(who: Principal, member_id: str) -> None:
    # A member manages their own tokens; an admin with the write scope anyone's in the account.
    if who.member_id != member_id and not (who.role == "admin" and "write" in who.scopes):
        raise Forbidden("only an admin (with a write token) manages other members' tokens")


async def list_tokens(conn: asyncpg.Connection, who: Principal, member_id: str) -> list[TokenInfo]:
    """A member's tokens, newest first: theirs, or any member's for an admin."""
    if who.member_id != member_id and who.role != "admin":
        raise Forbidden("only an admin lists other members' tokens")
    if not await conn.fetchval(db.query("get_member"), member_id, who.account_id):
        raise NotFound(f"no member {member_id} in this account")
    rows = await conn.fetch(db.query("list_member_tokens"), member_id, who.account_id)
    return [TokenInfo.from_row(row, member_id) for row in rows]


async def revoke_token(conn: asyncpg.Connection, who: Principal, token_id: int) -> TokenInfo:
    """Revoke a token of the caller's account at once (the next request with it gets 401)."""
    row = await conn.fetchrow(db.query("token_in_account"), token_id, who.account_id)
    if row is None:
        raise NotFound(f"no token {token_id} in this account")
    _may_manage(who, row["member_id"])
    return TokenInfo.from_row(await conn.fetchrow(db.query("revoke_token"), token_id))


async def authenticate_with(
    conn: asyncpg.Connection, token: str, query: str, args: tuple[Any, ...]
) -> tuple[Principal | None, asyncpg.Record | None]:
    """The principal behind `token` and the row of `query`, which takes the token hash and then
    `args` and returns the principal's columns (principal_by_token_hash's) beside whatever else
    it reads in the same round trip; (None, None) when the token is refused."""
    if not token_well_formed(token):
        return None, None
    digest = hash_token(token)
    row = await conn.fetchrow(db.query(query), digest, *args)
    if row is None or not hmac.compare_digest(bytes(row["token_hash"]), digest):
        return None, None
    return _principal(row), row


async def token_is_live(conn: asyncpg.Connection, token_hash: bytes) -> bool:
    """Whether the token of this hash may still be used: not revoked, not expired, its member
    not removed (a long-lived request's re-check, such as an event stream's)."""
    return bool(await conn.fetchval(db.query("token_is_live"), token_hash))


def _principal(row: asyncpg.Record) -> Principal:
    return Principal(
        member_id=row["member_id"],
        user_id=row["user_id"],
        account_id=row["account_id"],
        role=row["role"],
        scopes=frozenset(row["scopes"]),
        name=row["name"],
        email=row["email"],
    )
