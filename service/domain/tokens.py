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
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import asyncpg
import attrs

from .. import db
from .ids import BASE62, base62

TOKEN_PREFIX = "rfpk_"
SCOPES = ("read", "write")
ROLES = ("admin", "member", "viewer")
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
) -> str:
    """Store a new token for a member and return it; this is the only time it is visible."""
    token = new_token()
    await conn.execute(
        db.query("insert_api_token"), member_id, hash_token(token), sorted(set(scopes)), expires_at
    )
    return token


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
