from __future__ import annotations

import asyncio

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
