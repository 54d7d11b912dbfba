"""Tokens (format, checksum, hashing), the authenticated principal, and access policies.

A token is `rfpk_` + 30 random base62 characters + a 6-character base62 CRC32 of those 30: a
mistyped token fails the checksum and is rejected without a database query. Only its SHA-256 is
stored; the lookup is by hash, and the stored hash is compared again in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import zlib
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

import asyncpg
import attrs
from aiohttp import web

from . import db
from .config import RateLimit
from .errors import Forbidden, InsufficientScope, Unauthorized
from .keys import POOL

TOKEN_PREFIX = "rfpk_"
SCOPES = ("read", "write")
ROLES = ("admin", "member", "viewer")
_BASE62 = string.digits + string.ascii_letters
_BASE62_CHARS = frozenset(_BASE62)
_RANDOM_LEN = 30
_CHECKSUM_LEN = 6
_ID_SPACE = 62**22  # uniform over every 22-character base62 string
_TOKEN_SPACE = 62**_RANDOM_LEN


# Every two-digit base62 string, so encoding takes half the divisions: the checksum is
# computed on every authenticated request.
_BASE62_PAIRS = [a + b for a in _BASE62 for b in _BASE62]


def base62(number: int, width: int) -> str:
    """`number` (< 62**width) as `width` base62 digits, most significant first."""
    parts = []
    for _ in range(width // 2):
        number, pair = divmod(number, 3844)
        parts.append(_BASE62_PAIRS[pair])
    if width % 2:
        parts.append(_BASE62[number % 62])
    return "".join(reversed(parts))


def new_id(prefix: str) -> str:
    """A prefixed, unguessable, URL-safe id: `rfp_` + 22 base62 characters (~131 bits)."""
    return f"{prefix}_" + base62(secrets.randbelow(_ID_SPACE), 22)  # one draw, not 22


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


async def authenticate(conn: asyncpg.Connection, token: str) -> Principal | None:
    who, _ = await authenticate_with(conn, token, "principal_by_token_hash", ())
    return who


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


# -- access policies -------------------------------------------------------------------


@attrs.frozen
class Prefetch:
    """A query run instead of `principal_by_token_hash` for a body-less request: it takes the
    token hash and then the path parameters `params`, and returns the principal's columns beside
    the handler's record, saving the handler's own round trip. The handler reads the row with
    `prefetched(request)` once the policy check has passed."""

    query: str
    params: tuple[str, ...]


@attrs.frozen
class Policy:
    public: bool = False
    scope: str | None = None
    roles: frozenset[str] = frozenset(ROLES)
    # Whether a body-less request keeps its auth connection for the handler (db.connection).
    # Off for long-lived streams, which must not pin a pool connection while they wait.
    hold_connection: bool = True
    prefetch: Prefetch | None = None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def requires(
    scope: str,
    roles: Iterable[str] = ROLES,
    *,
    hold_connection: bool = True,
    prefetch: Prefetch | None = None,
) -> Callable[[Handler], Handler]:
    """Mark a handler as needing a token with `scope`, held by a member with one of `roles`."""
    assert scope in SCOPES
    assert prefetch is None or hold_connection  # a prefetch is the body-less, held path

    def mark(handler: Handler) -> Handler:
        handler.policy = Policy(  # type: ignore[attr-defined]
            scope=scope, roles=frozenset(roles), hold_connection=hold_connection,
            prefetch=prefetch,
        )
        return handler

    return mark


def public(handler: Handler) -> Handler:
    """Mark a handler as reachable without a token (health checks, sign-in)."""
    handler.policy = Policy(public=True)  # type: ignore[attr-defined]
    return handler


def policy_of(handler: object) -> Policy | None:
    return getattr(handler, "policy", None)


def _challenge(error: str | None = None) -> dict[str, str]:
    value = 'Bearer realm="api"'
    if error:
        value += f', error="{error}"'
    return {"WWW-Authenticate": value}


PRINCIPAL = web.RequestKey("principal", Principal)
PREFETCHED = web.RequestKey("prefetched", asyncpg.Record)
# On a rate-limited route, the row of principal_and_rate_limit: the bucket was already taken
# from (allowed/remaining/retry_after), for the rate-limit middleware to apply.
RATE_LIMIT_TAKEN = web.RequestKey("rate_limit_taken", asyncpg.Record)


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]


def prefetched(request: web.Request) -> asyncpg.Record | None:
    """The row of the policy's prefetch query, or None when it did not run (a request with a
    body takes the plain path): the handler then reads its record itself."""
    return request.get(PREFETCHED)


async def authorized(
    request: web.Request, handler: Handler, policy: Policy, limit: RateLimit | None
) -> web.StreamResponse:
    """Call `handler` once `policy` admits the request's token (service/middleware.py). `limit`
    is the route's rate limit, if it has one: its bucket is taken in the token lookup."""
    if policy.public:
        return await handler(request)

    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise Unauthorized(
            "authentication required: send Authorization: Bearer <token>", headers=_challenge()
        )
    if scheme.lower() != "bearer":  # RFC 6750 3.1: another scheme gets a bare challenge
        raise Unauthorized(
            "the Authorization header must be 'Bearer <token>'", headers=_challenge()
        )
    token = token.strip()
    if not token:
        raise Unauthorized(
            "the Authorization header must be 'Bearer <token>'",
            headers=_challenge("invalid_request"),
        )
    # One statement reads the principal and, where the route asks for it, what comes next: the
    # rate-limit bucket (a limited route) or the handler's record (a prefetch, body-less only).
    body = request.body_exists
    query, args, keep = "principal_by_token_hash", (), None
    if limit is not None:
        query, keep = "principal_and_rate_limit", RATE_LIMIT_TAKEN
        args = (
            policy.scope, sorted(policy.roles), f"{request.match_info.route.name}:",
            float(limit.limit), limit.limit / limit.period_seconds,
        )
    elif policy.prefetch is not None and not body:
        query, keep = policy.prefetch.query, PREFETCHED
        args = tuple(request.match_info[p] for p in policy.prefetch.params)
    if body or not policy.hold_connection:
        # Not held while a (possibly slow) client uploads a body, nor for a stream: release now,
        # and the handler acquires anew.
        async with request.app[POOL].acquire() as conn:
            who, row = await authenticate_with(conn, token, query, args)
        check(policy, who)
        request[PRINCIPAL] = who
        if keep is not None:
            request[keep] = row
        return await handler(request)
    # No body: keep the connection for the handler (db.connection), one acquire per request.
    async with request.app[POOL].acquire() as conn:
        who, row = await authenticate_with(conn, token, query, args)
        check(policy, who)
        request[PRINCIPAL] = who
        if keep is not None:
            request[keep] = row
        request[db.REQUEST_CONNECTION] = conn
        try:
            return await handler(request)
        finally:
            del request[db.REQUEST_CONNECTION]


def check(policy: Policy, who: Principal | None) -> None:
    """Raise unless `who` is a live token holder with the policy's scope and role."""
    if who is None:
        raise Unauthorized(
            "the token is invalid, expired or revoked", headers=_challenge("invalid_token")
        )
    if policy.scope not in who.scopes:
        raise InsufficientScope(
            f"this operation needs a token with the {policy.scope!r} scope",
            headers={
                "WWW-Authenticate": f'Bearer realm="api", error="insufficient_scope", '
                f'scope="{policy.scope}"'
            },
        )
    if who.role not in policy.roles:
        allowed = " or ".join(sorted(policy.roles))
        raise Forbidden(f"this operation needs the {allowed} role; yours is {who.role}")
