"""The loop an outbox's sender runs: claim a due row, attempt it, repeat; when nothing is due,
sleep until woken or until the poll interval passes. Shared by the mail sender (mail.py) and the
webhook deliverer (webhooks.py); each says how to claim a row and what an attempt is."""

from __future__ import annotations

import asyncio
import collections
import logging
import time

import asyncpg

from .. import db

log = logging.getLogger(__name__)


# How often a sender says again that the database is still unavailable.
UNAVAILABLE_REPEAT_SECONDS = 60.0


class OutboxSender:
    """Subclasses set `what` (for the log) and implement `_claim` and `_attempt`."""

    what = "outbox"

    def __init__(self, poll_interval_seconds: float) -> None:
        self._poll_interval_seconds = poll_interval_seconds
        # A wake wakes one sleeping loop, not all: it announces a row or two (a completion's
        # webhooks, a mail), and every loop woken would claim, N claims for one row or none.
        # A loop that claims a row passes the wake on to another before attempting it, and goes
        # on claiming until none is due, so a burst (a backlog, a bulk invitation) soon has every
        # loop working on it, at the cost of one empty claim when it is done.
        self._sleeping: collections.deque[asyncio.Future[None]] = collections.deque()
        # A wake that found no loop asleep (they were all claiming or attempting): the next loop
        # to go to sleep looks once more instead, so a row committed just after a loop's empty
        # claim does not wait for the poll interval.
        self._woken = False
        # Since when the database has been unavailable to this sender's rounds (monotonic), and
        # when that was last logged: during an outage its `concurrency` loops each failed a round
        # every poll interval, four WARNING lines a second per process for the webhooks alone.
        self._unavailable_since: float | None = None
        self._unavailable_logged = 0.0

    def wake(self) -> None:
        while self._sleeping:
            sleeper = self._sleeping.popleft()
            if not sleeper.done():
                sleeper.set_result(None)
                return
        self._woken = True

    async def _sleep(self) -> None:
        """Until woken or until the poll interval passes."""
        if self._woken:
            self._woken = False
            return
        sleeper = asyncio.get_running_loop().create_future()
        self._sleeping.append(sleeper)
        try:
            async with asyncio.timeout(self._poll_interval_seconds):
                await sleeper
        except TimeoutError:
            pass
        finally:
            if sleeper in self._sleeping:
                self._sleeping.remove(sleeper)

    async def _loop(self) -> None:
        while True:
            try:
                attempted = await self.deliver_due()
            except Exception as exc:  # the loop must survive whatever a round meets
                self._round_failed(exc)
                attempted = False
            else:
                self._round_done()
            if not attempted:
                await self._sleep()

    def _round_failed(self, exc: Exception) -> None:
        """A failed round's line: an outage is told once when it begins and once a minute while it
        lasts, whichever loop meets it (_round_done tells its end); any other failure each time,
        with its traceback."""
        if not db.database_unavailable(exc):
            db.log_round_failure(log, exc, "%s: delivery round failed, retrying", self.what)
            return
        now = time.monotonic()
        if self._unavailable_since is None:
            self._unavailable_since = self._unavailable_logged = now
            db.log_round_failure(log, exc, "%s: delivery round failed, retrying", self.what)
        elif now - self._unavailable_logged >= UNAVAILABLE_REPEAT_SECONDS:
            self._unavailable_logged = now
            log.warning("%s: the database is still unavailable after %.0f s (%s); retrying", self.what,
                        now - self._unavailable_since, exc)

    def _round_done(self) -> None:
        if self._unavailable_since is not None:
            log.info("%s: the database is available again after %.0f s; delivering", self.what,
                     time.monotonic() - self._unavailable_since)
            self._unavailable_since = None

    async def deliver_due(self) -> bool:
        """Attempt every row due now, one claim at a time; whether any was attempted."""
        attempted = False
        while (row := await self._claim()) is not None:
            attempted = True
            self.wake()  # there may be more: one more loop looks
            await self._attempt(row)
        return attempted

    async def _claim(self) -> asyncpg.Record | None:
        raise NotImplementedError

    async def _attempt(self, row: asyncpg.Record) -> None:
        raise NotImplementedError
