"""Deleting rows nothing reads any more, so that no table grows for ever: every process sweeps
hourly (`run`; `housekeeping.every_seconds`), webhook events, mail and links in short batches that
skip rows another process holds, buckets and sessions in one statement each.

- webhook events older than `webhooks.keep_days` with every delivery finished, with their
  deliveries (the delivery log keeps that long; a pending delivery keeps its event);
- rate-limit buckets untouched for longer than the longest configured period: such a bucket has
  refilled, and is the same as none (take_rate_limit_token creates it full again). Sign-in buckets
  are keyed by the e-mail address tried, so a client trying addresses would otherwise add rows;
- web sessions that ended (signed out, expired or ended by a password change) a day ago;
- e-mails no longer pending written more than `mail.keep_days` ago (their recipients are personal
  data; held ones not before their links expire), and confirmation and password reset links
  expired a day ago (refused alike when unknown);
- the web app's import reports `import_reports.KEEP_DAYS` old (their pages are then 404).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random

import asyncpg
import attrs

from .. import db
from ..config import Config, RateLimit
from . import import_reports

log = logging.getLogger(__name__)

# The first sweep comes at a random moment of a process's first FIRST_WITHIN seconds (processes
# started together do not sweep together), then every `housekeeping.every_seconds`; a batched
# statement deletes at most BATCH rows, with a pause between batches (a backlog is worked through
# in short transactions).
FIRST_WITHIN = 600.0
BATCH = 1000
PAUSE_SECONDS = 0.1


def longest_rate_limit_period(config: Config) -> float:
    """The longest `period_seconds` of any rate limit in the configuration (seconds)."""
    found: list[float] = []

    def visit(value: object) -> None:
        if isinstance(value, RateLimit):
            found.append(value.period_seconds)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif attrs.has(type(value)):
            for field in attrs.fields(type(value)):
                visit(getattr(value, field.name))

    visit(config)
    return max(found, default=0.0)


async def _batches(pool: asyncpg.Pool, statements: tuple[str, ...], *args: object,
                   batch: int = BATCH) -> list[int]:
    """Run the statements (each deleting at most `batch` rows, returning how many) in one
    transaction, again while any deleted a whole batch; the rows each deleted in all."""
    deleted = [0] * len(statements)
    while True:
        async with pool.acquire() as conn, conn.transaction():
            counts = [await conn.fetchval(db.query(name), *args, batch) for name in statements]
        deleted = [total + count for total, count in zip(deleted, counts, strict=True)]
        if all(count < batch for count in counts):
            return deleted
        await asyncio.sleep(PAUSE_SECONDS)


async def prune_webhooks(pool: asyncpg.Pool, keep_days: int, batch: int = BATCH) -> int:
    """Webhook events older than `keep_days` whose deliveries are all finished go, with those
    deliveries: how many events went. Nothing when keep_days is 0.

    Two statements a batch: the first locks the events, the second deletes them with a snapshot
    taken after the locks. A manual retry holds its event while it makes a delivery pending, so
    one that committed before the locks is seen by the second statement (its event stays), and
    one after them waits and finds its delivery gone. In one statement, a retry committed between
    its snapshot and its locks let a sibling's log entry go while that delivery was pending.

    Migration 0026's indexes serve it; that migration's comment names `Deliverer.prune`, where
    this lived when it landed, and stays as it is: an applied migration's file is checksummed
    (service/db.py `check_applied`)."""
    if not keep_days:
        return 0
    deleted = 0
    while True:
        async with pool.acquire() as conn, conn.transaction():
            events = await conn.fetchval(db.query("lock_old_webhook_events"), keep_days, batch)
            if events:
                deleted += await conn.fetchval(db.query("prune_webhook_events"), events)
        if len(events) < batch:
            return deleted
        await asyncio.sleep(PAUSE_SECONDS)


async def prune_rate_limit_buckets(pool: asyncpg.Pool, idle_seconds: float) -> int:
    """Buckets untouched for `idle_seconds` (at least the longest period: full again) go."""
    async with pool.acquire() as conn:
        return await conn.fetchval(db.query("prune_rate_limit_buckets"), idle_seconds)


async def prune_mail(pool: asyncpg.Pool, keep_days: int, held_days: int, batch: int = BATCH) -> int:
    """E-mails no longer pending written more than `keep_days` ago go (none when 0); held ones
    (no SMTP server: kept for `python -m service mail show`) after `held_days` (at least
    `keep_days`): their one-time links may work that long."""
    if not keep_days:
        return 0
    [messages] = await _batches(pool, ("prune_mail",), keep_days, max(keep_days, held_days),
                                batch=batch)
    return messages


def longest_link_days(config: Config) -> int:
    """Whole days, with one to spare, that the longest-lived e-mailed link stays valid."""
    members = config.members
    longest = max(members.invitation_ttl_days, members.confirmation_ttl_hours / 24,
                  members.password_reset_ttl_hours / 24)
    return math.ceil(longest) + 1


async def prune_sessions(pool: asyncpg.Pool) -> int:
    """Web sessions that ended a day ago go (few rows: one statement)."""
    async with pool.acquire() as conn:
        return await conn.fetchval(db.query("delete_old_web_sessions"))


async def prune_links(pool: asyncpg.Pool) -> int:
    """Confirmation and password reset links expired a day ago go."""
    return sum(await _batches(pool, ("prune_email_confirmations", "prune_password_resets")))


async def prune_import_reports(pool: asyncpg.Pool, keep_days: int = import_reports.KEEP_DAYS,
                               batch: int = BATCH) -> int:
    """The web app's import reports kept more than `keep_days` go."""
    [reports] = await _batches(pool, ("prune_import_reports",), keep_days, batch=batch)
    return reports


async def sweep(pool: asyncpg.Pool, config: Config) -> dict[str, int | None]:
    """One sweep: how many rows of each kind went (None: that step failed, and is logged; the
    others still run)."""
    steps = {
        "webhook_events": lambda: prune_webhooks(pool, config.webhooks.keep_days),
        "rate_limit_buckets": lambda: prune_rate_limit_buckets(
            pool, longest_rate_limit_period(config)),
        "web_sessions": lambda: prune_sessions(pool),
        "mail": lambda: prune_mail(pool, config.mail.keep_days, longest_link_days(config)),
        "links": lambda: prune_links(pool),
        "import_reports": lambda: prune_import_reports(pool),
    }
    deleted: dict[str, int | None] = {}
    for what, step in steps.items():
        try:
            deleted[what] = await step()
        except Exception as exc:  # the next sweep tries again
            db.log_round_failure(log, exc, "housekeeping: deleting old %s failed",
                                 what.replace("_", " "))
            deleted[what] = None
    return deleted


async def run(pool: asyncpg.Pool, config: Config) -> None:
    """Sweep every `housekeeping.every_seconds` until cancelled (never when 0)."""
    every = config.housekeeping.every_seconds
    if not every:
        return
    await asyncio.sleep(random.uniform(0, min(FIRST_WITHIN, every)))
    while True:
        deleted = await sweep(pool, config)
        if any(deleted.values()):
            log.info("housekeeping: deleted %s", ", ".join(
                f"{count} {what.replace('_', ' ')}" for what, count in deleted.items() if count))
        await asyncio.sleep(every)
