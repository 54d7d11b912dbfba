"""The loop an outbox's sender runs: claim a due row, attempt it, repeat; when nothing is due,
sleep until woken or until the poll interval passes. Shared by the mail sender (mail.py) and the
webhook deliverer (webhooks.py); each says how to claim a row and what an attempt is."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

log = logging.getLogger(__name__)


class OutboxSender:
    """Subclasses set `what` (for the log) and implement `_claim` and `_attempt`."""

    what = "outbox"

    def __init__(self, poll_interval_seconds: float) -> None:
        self._poll_interval_seconds = poll_interval_seconds
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                attempted = await self.deliver_due()
            except Exception:  # the database may be away for a while; the loop must survive it
                log.exception("%s: delivery round failed; retrying", self.what)
                attempted = False
            if not attempted:
                try:
                    async with asyncio.timeout(self._poll_interval_seconds):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()

    async def deliver_due(self) -> bool:
        """Attempt every row due now, one claim at a time; whether any was attempted."""
        attempted = False
        while (row := await self._claim()) is not None:
            attempted = True
            await self._attempt(row)
        return attempted

    async def _claim(self) -> asyncpg.Record | None:
        raise NotImplementedError

    async def _attempt(self, row: asyncpg.Record) -> None:
        raise NotImplementedError
