"""Password hashing with argon2id, off the event loop.

Parameters are OWASP's minimum for argon2id (m=19 MiB, t=2, p=1): about 20-40 ms per hash on a
current CPU, and 19 MiB per concurrent hash. Hashing and verifying run in a thread pool of their
own (auth.password_hash_workers; argon2 releases the GIL), so a sign-in never stalls other
requests nor waits behind other work in the default executor.
"""

from __future__ import annotations

import asyncio
import secrets
from concurrent.futures import ThreadPoolExecutor

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

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
