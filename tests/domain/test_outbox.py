from __future__ import annotations

import asyncio
import logging

from service.domain.outbox import OutboxSender


class Counting(OutboxSender):
    """An outbox with nothing due: it counts the claims its loops make."""

    def __init__(self, poll_interval_seconds: float = 30.0) -> None:
        super().__init__(poll_interval_seconds)
        self.claims = 0
        self.during_claim = lambda: None
        self.claimed = asyncio.Condition()

    async def _claim(self) -> None:
        self.claims += 1
        self.during_claim()
        async with self.claimed:
            self.claimed.notify_all()
        return None

    async def until(self, condition, seconds: float = 2.0) -> None:
        async with asyncio.timeout(seconds), self.claimed:
            await self.claimed.wait_for(condition)


async def test_wake__wakes_one_sleeping_loop_not_all():
    sender = Counting()
    loops = [asyncio.create_task(sender._loop()) for _ in range(4)]
    try:
        await sender.until(lambda: sender.claims == 4)  # each looked once at start, then sleeps
        await asyncio.sleep(0.05)
        sender.wake()
        await sender.until(lambda: sender.claims >= 5)
        await asyncio.sleep(0.1)
        assert sender.claims == 5  # one claim for one wake, not one per loop
        for _ in range(3):
            sender.wake()
        await sender.until(lambda: sender.claims == 8)  # three wakes reach three loops
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)


async def test_wake__a_loop_that_claims_a_row_passes_the_wake_on():
    """Loops asleep, a backlog and one wake: every loop soon works on it, not only the one woken."""

    class Backlog(OutboxSender):
        def __init__(self, rows: int) -> None:
            super().__init__(poll_interval_seconds=30.0)
            self.rows, self.attempting, self.peak = rows, 0, 0

        async def _claim(self) -> int | None:
            if self.rows == 0:
                return None
            self.rows -= 1
            return self.rows

        async def _attempt(self, row: int) -> None:
            self.attempting += 1
            self.peak = max(self.peak, self.attempting)
            await asyncio.sleep(0.05)
            self.attempting -= 1

    sender = Backlog(rows=0)
    loops = [asyncio.create_task(sender._loop()) for _ in range(3)]
    try:
        await asyncio.sleep(0.05)  # each looked, found nothing and sleeps (30 s)
        sender.rows = 9
        sender.wake()
        async with asyncio.timeout(2):
            while sender.rows or sender.attempting:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
    assert sender.peak == 3


async def test_wake__during_a_claim_that_found_nothing_is_not_lost():
    # The row was committed (and the wake sent) after the claim looked: the loop must look again
    # now, not after the poll interval (30 s here).
    sender = Counting()
    sender.during_claim = lambda: sender.wake() if sender.claims == 1 else None
    loop = asyncio.create_task(sender._loop())
    try:
        await sender.until(lambda: sender.claims == 2, seconds=1.0)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_sleep__ends_with_the_poll_interval_without_a_wake():
    sender = Counting(poll_interval_seconds=0.05)
    loop = asyncio.create_task(sender._loop())
    try:
        await sender.until(lambda: sender.claims >= 3, seconds=1.0)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_outage__is_logged_once_by_all_loops_and_its_end_once(caplog):
    # PostgreSQL stopped under two hosts for 15 s: each host's four webhook loops logged a WARNING
    # per round, every poll interval (62 lines a host), and nothing said when it was back.
    class Unreachable(OutboxSender):
        what = "webhooks"

        def __init__(self) -> None:
            super().__init__(poll_interval_seconds=0.01)
            self.down, self.rounds = True, 0

        async def _claim(self) -> None:
            self.rounds += 1
            if self.down:
                raise ConnectionRefusedError(111, "Connect call failed")
            return None

    caplog.set_level(logging.INFO, logger="service.domain.outbox")
    sender = Unreachable()
    loops = [asyncio.create_task(sender._loop()) for _ in range(4)]
    try:
        async with asyncio.timeout(2):
            while sender.rounds < 40:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        sender.down = False
        async with asyncio.timeout(2):
            while not any(r.levelno == logging.INFO for r in caplog.records):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
    [down, back] = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert down == ("WARNING", "webhooks: delivery round failed, retrying: the database is unavailable "
                               "([Errno 111] Connect call failed)")
    assert back[0] == "INFO" and back[1].startswith("webhooks: the database is available again after ")
