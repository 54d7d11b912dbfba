"""Who may call a route: access policies (`requires`, `public`), the bearer-token check, and the
connection a body-less request keeps from authentication for its handler (`connection`)."""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import attrs
from aiohttp import web

from ..config import RateLimit
from ..domain.errors import Forbidden, InsufficientScope, RateLimited, ServiceUnavailable, Unauthorized
from ..domain.tokens import ROLES, SCOPES, Principal, authenticate_with
from .keys import CONFIG, POOL, SHARES

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
# The hash of the request's token, for a long-lived request to check it again (event streams).
TOKEN_HASH = web.RequestKey("token_hash", bytes)
# On a rate-limited route, the row of principal_and_rate_limit: the bucket was already taken
# from (allowed/remaining/retry_after), for the rate-limit middleware to apply.
RATE_LIMIT_TAKEN = web.RequestKey("rate_limit_taken", asyncpg.Record)


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]


def token_hash(request: web.Request) -> bytes:
    """The hash of the token the request was admitted with."""
    return request[TOKEN_HASH]


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
        public_body_limit(request)
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
        async with acquire(request.app) as conn:
            await _admit(request, conn, policy, token, query, args, keep)
        return await handler(request)
    # No body: keep the connection for the handler (db.connection), one acquire per request,
    # within the member's share of the pool (`take_share`, which may swap it for another).
    # (`acquire` written out: its context manager is a measurable share of a cheap request.)
    conn = await take_connection(request.app)
    request[REQUEST_CONNECTION] = conn
    member = None
    try:
        await _admit(request, conn, policy, token, query, args, keep)
        await take_share(request, request[PRINCIPAL].member_id)
        member = request[PRINCIPAL].member_id
        return await handler(request)
    finally:
        if member is not None:
            request.app[SHARES].give_back(member)
        await _release_held(request)


async def _admit(
    request: web.Request, conn: asyncpg.Connection, policy: Policy, token: str, query: str,
    args: tuple[Any, ...], keep: Any,
) -> None:
    """Authenticate and authorize the request, keeping its principal (and any prefetched row)."""
    who, row = await authenticate_with(conn, token, query, args)
    check(policy, who)
    request[PRINCIPAL] = who
    request[TOKEN_HASH] = bytes(row["token_hash"])
    if keep is not None:
        request[keep] = row


def public_body_limit(request: web.Request) -> None:
    """Bodies of requests from nobody known yet at most server.max_public_body_bytes (a page
    raises it back to max_body_bytes once its session is found: `full_body_limit`). A body is
    held in memory as it arrives, until body_timeout_seconds: at max_body_bytes, one anonymous
    client's 3,000 stalled bodies held 3.1 GB."""
    server = request.app[CONFIG].server
    # aiohttp's own limit, which request.read() and request.post() keep to (no public setter).
    request._client_max_size = min(server.max_public_body_bytes, server.max_body_bytes)  # type: ignore[attr-defined]


def full_body_limit(request: web.Request) -> None:
    """A signed-in page's body may be as large as the API's (server.max_body_bytes)."""
    request._client_max_size = request.app[CONFIG].server.max_body_bytes  # type: ignore[attr-defined]


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


# The connection `authorized` holds for a request without a body (see `connection`).
REQUEST_CONNECTION = web.RequestKey("connection", asyncpg.Connection)


@asynccontextmanager
async def connection(request: web.Request) -> AsyncIterator[asyncpg.Connection]:
    """A connection for a handler: the one authentication already used for this request when
    there is one (saves a pool release, whose reset costs a round trip), else one from the pool.

    Use it sequentially: asyncpg runs one statement at a time per connection.
    """
    held = request.get(REQUEST_CONNECTION)
    if held is not None:
        yield held
        return
    async with acquire(request.app) as conn:
        yield conn


@asynccontextmanager
async def acquire(app: web.Application) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection for the block (see `take_connection`)."""
    conn = await take_connection(app)
    try:
        yield conn
    finally:
        await app[POOL].release(conn)


async def take_connection(app: web.Application) -> asyncpg.Connection:
    """A pooled connection, to be released, waited for at most
    `database.acquire_timeout_seconds`: past that, or when the database cannot be reached at all
    (its Unix socket gone, refused), 503 with Retry-After instead of a request that hangs or a
    500."""
    timeout = app[CONFIG].database.acquire_timeout_seconds
    try:
        return await app[POOL].take(timeout)
    except TimeoutError:
        raise ServiceUnavailable(
            f"no database connection became free within {timeout:g} s "
            "(database.acquire_timeout_seconds); retry shortly",
            headers={"Retry-After": str(max(1, math.ceil(timeout)))},
        ) from None
    except OSError as exc:  # FileNotFoundError (socket), ConnectionRefusedError and the like
        raise ServiceUnavailable(
            f"the database is unreachable ({type(exc).__name__}); retry shortly",
            headers={"Retry-After": "1"},
        ) from None


@asynccontextmanager
async def holding_connection(request: web.Request) -> AsyncIterator[None]:
    """One pooled connection held for a body-less request whose handler checks access itself
    (the web app's pages: the session lookup and the page's queries share it); `connection`
    hands it on, as for the API's requests. Once the member is known, the handler runs within
    their share (`take_share`), which may swap the connection for another."""
    request[REQUEST_CONNECTION] = await request.app[POOL].acquire()
    try:
        yield
    finally:
        await _release_held(request)


async def _release_held(request: web.Request) -> None:
    conn = request.pop(REQUEST_CONNECTION, None)
    if conn is not None:
        await request.app[POOL].release(conn)


class MemberShares:
    """How many pooled connections each member's body-less requests hold at once in this
    process, at most `per_member` (database.max_connections_per_member): one member's parallel
    slow requests (searches at their statement timeout) took the whole pool, and every other
    account's requests queued behind them. A request past its member's share waits, holding no
    connection, for one of the member's own requests to end (first come, first served)."""

    def __init__(self, per_member: int) -> None:
        self.per_member = per_member
        self.held: dict[str, int] = {}
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}

    def take_now(self, member: str) -> bool:
        held = self.held.get(member, 0)
        if held >= self.per_member:
            return False
        self.held[member] = held + 1
        return True

    async def wait(self, member: str, timeout: float) -> None:  # noqa: ASYNC109
        """A share handed over by `give_back` within `timeout` seconds; TimeoutError past it."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(member, collections.deque()).append(turn)
        try:
            async with asyncio.timeout(timeout):
                await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.give_back(member)  # handed over as the wait ended: pass it on
            else:
                turn.cancel()  # skipped by give_back
            raise

    def give_back(self, member: str) -> None:
        waiting = self._waiting.get(member)
        while waiting:
            turn = waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the share passes to the next waiter as it is
                if not waiting:
                    del self._waiting[member]
                return
        self._waiting.pop(member, None)
        left = self.held[member] - 1
        if left:
            self.held[member] = left
        else:
            del self.held[member]


async def take_share(request: web.Request, member: str) -> None:
    """One of `member`'s shares of the pool for this request, to be given back
    (`request.app[SHARES].give_back`). While the member holds all of theirs, the request's
    connection goes back to the pool, the request waits for one of the member's requests to
    end, at most database.acquire_timeout_seconds (then 429), and takes a connection anew."""
    shares = request.app[SHARES]
    if shares.take_now(member):
        return
    await _release_held(request)
    timeout = request.app[CONFIG].database.acquire_timeout_seconds
    try:
        await shares.wait(member, timeout)
    except TimeoutError:
        raise RateLimited(
            f"this member's requests held all {shares.per_member} of their pooled connections "
            f"(database.max_connections_per_member) for {timeout:g} s; send fewer at once",
            headers={"Retry-After": "1"},
        ) from None
    try:
        request[REQUEST_CONNECTION] = await take_connection(request.app)
    except BaseException:
        shares.give_back(member)
        raise
