"""Password hashing with argon2id, off the event loop.

Parameters are OWASP's minimum for argon2id (m=19 MiB, t=2, p=1): about 20-40 ms per hash on a
current CPU, and 19 MiB per concurrent hash. Hashing and verifying run in a thread pool of their
own (auth.password_hash_workers; argon2 releases the GIL), so a sign-in never stalls other
requests nor waits behind other work in the default executor.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import math
import secrets
from concurrent.futures import ThreadPoolExecutor

import asyncpg
from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from .. import db
from ..config import MembersConfig, RateLimit
from .errors import RateLimited

MIN_LENGTH = 12
MAX_LENGTH = 128


def hasher() -> PasswordHasher:
    return PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1, type=Type.ID)


class Passwords:
    """Hash and verify passwords; `verify` costs the same whether or not the user exists."""

    def __init__(self, password_hasher: PasswordHasher, dummy_hash: str,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self._hasher = password_hasher
        self._executor = executor
        # Verified against when there is no stored hash, so unknown users take as long as known ones.
        self._dummy_hash = dummy_hash

    @classmethod
    async def create(cls, workers: int = 2) -> Passwords:
        password_hasher = hasher()
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="argon2")
        dummy = await asyncio.get_running_loop().run_in_executor(
            executor, password_hasher.hash, secrets.token_urlsafe(24)
        )
        return cls(password_hasher, dummy, executor)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    async def hash(self, password: str) -> str:
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self._hasher.hash, password
        )

    async def verify(self, stored_hash: str | None, password: str) -> bool:
        """Whether `password` matches `stored_hash`; always False (after the same work) without one."""
        target = stored_hash or self._dummy_hash
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._hasher.verify, target, password
            )
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
        return stored_hash is not None

    def needs_rehash(self, stored_hash: str) -> bool:
        return self._hasher.check_needs_rehash(stored_hash)


# -- guessing limits, change and reset (issue 17) ---------------------------------------------


def client_key(remote: str | None) -> str:
    """Who a sign-in limit counts against: an IPv4 address, or an IPv6 /64 (one host's
    usual allocation, so cycling through its addresses gains nothing)."""
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return remote or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def address_key(email: str) -> str:
    # Hashed: the key stays short whatever the caller sent, and the table holds no addresses.
    return hashlib.sha256(email.strip().lower().encode()).hexdigest()


async def take_bucket(conn: asyncpg.Connection, key: str, limit: RateLimit) -> asyncpg.Record:
    return await conn.fetchrow(
        db.query("take_rate_limit_token"), key, float(limit.limit), limit.limit / limit.period_seconds
    )


def _rate_limited(row: asyncpg.Record) -> RateLimited:
    retry = max(1, math.ceil(row["retry_after"]))
    return RateLimited(
        f"too many password attempts; retry in {retry} s", headers={"Retry-After": str(retry)}
    )


async def guard_password_attempt(
    conn: asyncpg.Connection, config: MembersConfig, client: str, email: str, user_id: int | None
) -> None:
    """Spend one password attempt against `email` from `client`, or raise 429.

    Every attempt counts, successful or not, so holding one account gives no extra guesses at
    others. The per-client bucket is absolute. The per-address one is not a lockout for the
    owner: once it is empty, a client the user signed in from successfully within
    `known_client_days` may still try (a stranger's failures cannot lock the user out of their
    usual network); everyone else gets 429, whether or not the address exists.
    Outside a transaction: the buckets commit on their own (see take_rate_limit_token).
    """
    by_client = await take_bucket(conn, f"sign_in:address:{client}", config.sign_in_per_address)
    if not by_client["allowed"]:
        raise _rate_limited(by_client)
    by_address = await take_bucket(conn, f"sign_in:email:{address_key(email)}", config.sign_in_per_email)
    if by_address["allowed"]:
        return
    if user_id is not None and await conn.fetchval(
        db.query("is_known_sign_in_client"), user_id, client, config.known_client_days * 86400
    ):
        return
    raise _rate_limited(by_address)


async def remember_client(conn: asyncpg.Connection, user_id: int, client: str) -> None:
    await conn.execute(db.query("remember_sign_in_client"), user_id, client)
