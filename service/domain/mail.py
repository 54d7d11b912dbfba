"""Outgoing mail: an outbox row written in the caller's transaction, delivered in the background.

Each of a process's `mail.concurrency` sending loops claims one due message at a time with
`FOR UPDATE SKIP LOCKED` and a lease (the row's `next_attempt_at` moves past the SMTP timeout), so
several loops or processes never send the same message at once; a message whose sender died is
picked up again when the lease runs out. Delivery is at-least-once: a crash between the SMTP
server's acceptance and the `sent` update sends it again, with the same Message-ID. Failures are
retried with exponential backoff up to `max_attempts`. With no SMTP host configured, a message is
held (state `held`, body kept) for the operator to read with `python -m service mail show ID`; the
log says only that it is undelivered, never its link.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from email.message import EmailMessage

import aiosmtplib
import asyncpg

from .. import db
from ..config import MailConfig
from .outbox import OutboxSender

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 3600.0


def one_line(text: str) -> str:
    """A name or title as a mail writes it into its Subject or a sentence: its whitespace runs,
    line breaks among them, each one space (a line break makes a Subject unbuildable, and in a
    body it writes lines of the name's author's own)."""
    return " ".join(text.split())


async def enqueue(
    conn: asyncpg.Connection, config: MailConfig, recipient: str, subject: str, body: str,
    *, kind: str, requested_by: str | None = None, account_id: str | None = None,
) -> int:
    """Store a message of `kind` (what it is for: mail_outbox.kind), written for the action of
    member `requested_by` if any, on behalf of their `account_id` (kept only with a member: what
    counts against mail.account_mails_per_hour; check `account_mail_wait` first), to send once
    the caller's transaction commits; returns its outbox id."""
    account_id = account_id if requested_by is not None else None
    _, from_address = email.utils.parseaddr(config.from_address)
    domain = from_address.rpartition("@")[2] or "localhost"
    message_id = email.utils.make_msgid(domain=domain)
    return await conn.fetchval(db.query("enqueue_mail"), message_id, recipient, subject, body, kind,
                               requested_by, account_id)


async def sent_recently(
    conn: asyncpg.Connection, recipient: str, kind: str, requested_by: str | None, seconds: float
) -> int:
    """How many messages of `kind` member `requested_by` had written to `recipient` in the last
    `seconds`, counted in the caller's transaction with those messages locked until it ends:
    another transaction's count waits until this one has written (or not) its own, so a limit
    checked with it holds however many requests arrive at once."""
    await conn.execute(db.query("lock_recent_mail"), recipient, kind, requested_by)
    return await conn.fetchval(db.query("count_recent_mail"), recipient, kind, requested_by, seconds)


# The window mail.account_mails_per_hour and mail.invitation_mails_per_hour count in.
ACCOUNT_WINDOW_SECONDS = 3600


async def account_mail_wait(conn: asyncpg.Connection, config: MailConfig, account_id: str) -> int:
    """0 when a member's action may have one more message written on behalf of `account_id`
    (fewer than mail.account_mails_per_hour in the last hour, or no bound: 0), else the whole
    seconds until it may. Counted in the caller's transaction with the account's messages locked
    until it ends, as `sent_recently` counts: another transaction's count waits until this one has
    written (or not) its own, so the bound holds however many requests arrive at once. Take it
    after any address lock and just before writing: it holds the account's mail until commit."""
    limit = config.account_mails_per_hour
    if not limit:
        return 0
    await conn.execute(db.query("lock_account_mail"), account_id)
    wait = await conn.fetchval(db.query("account_mail_wait"), account_id, limit,
                               ACCOUNT_WINDOW_SECONDS)
    return wait or 0


async def address_mail_wait(
    conn: asyncpg.Connection, config: MailConfig, account_id: str, recipient: str
) -> int:
    """0 when a member's action may have one more invitation, "you were added" or confirmation
    written to `recipient` (any case) on behalf of `account_id` (fewer than
    mail.invitation_mails_per_hour in the last hour, or no bound: 0), else the whole seconds until
    it may. Take it under the address's lock (lock_address), which every writer of these kinds
    takes: the bound then holds however many requests arrive at once."""
    limit = config.invitation_mails_per_hour
    if not limit:
        return 0
    wait = await conn.fetchval(db.query("address_mail_wait"), account_id, recipient, limit,
                               ACCOUNT_WINDOW_SECONDS)
    return wait or 0


def backoff_seconds(config: MailConfig, attempts: int) -> float:
    """Delay before the next attempt after `attempts` failed ones: base, 2 * base, 4 * base …, at most 1 h."""
    return min(MAX_BACKOFF_SECONDS, config.retry_base_seconds * 2 ** max(0, attempts - 1))


# Recording a sent message stops this long before its lease ends, so another sender never sees it
# due while this one still records it.
RECORD_MARGIN_SECONDS = 5.0


class MailSender(OutboxSender):
    """Delivers due outbox messages until cancelled; `wake()` makes it look right away."""

    what = "mail sender"

    def __init__(self, pool: asyncpg.Pool, config: MailConfig) -> None:
        super().__init__(config.poll_interval_seconds)
        self._pool = pool
        self._config = config
        # Long enough that a slow SMTP exchange ends before another sender may claim the row.
        self.lease_seconds = config.timeout_seconds * 2 + 30

    async def run(self) -> None:
        await asyncio.gather(*(self._loop() for _ in range(self._config.concurrency)))

    async def _claim(self) -> asyncpg.Record | None:
        async with self._pool.acquire() as conn:
            return await conn.fetchrow(db.query("claim_mail"), 1, self.lease_seconds)

    async def _attempt(self, row: asyncpg.Record) -> None:
        if not self._config.smtp_host:
            async with self._pool.acquire() as conn:
                await conn.execute(db.query("mark_mail_held"), row["id"], row["attempts"])
            log.info(
                "mail %s to %s undelivered: no SMTP host is configured; the operator can read it "
                "with `python -m service mail show %s`", row["id"], row["recipient"], row["id"],
            )
            return
        # Until then no other sender claims the row: recording a success may be retried that long.
        lease_ends = time.monotonic() + self.lease_seconds - RECORD_MARGIN_SECONDS
        try:
            await self._send(row)
        except Exception as exc:  # any failure of one message is recorded on it, never fatal
            error = f"{type(exc).__name__}: {exc}"[:1000]
            delay = backoff_seconds(self._config, row["attempts"])
            async with self._pool.acquire() as conn:
                state = await conn.fetchval(
                    db.query("mark_mail_failed"), row["id"], row["attempts"], delay,
                    self._config.max_attempts, error,
                )
            if state == "failed":
                log.error("mail %s to %s: giving up after %d attempts: %s",
                          row["id"], row["recipient"], row["attempts"], error)
            else:
                log.warning("mail %s to %s: attempt %d failed (%s); retrying in %.0f s",
                            row["id"], row["recipient"], row["attempts"], error, delay)
            return
        await self._record_sent(row, lease_ends)
        log.info("mail %s to %s sent", row["id"], row["recipient"])

    async def _record_sent(self, row: asyncpg.Record, lease_ends: float) -> None:
        """Mark the message sent. The database may be away right now (a restart): a message
        recorded later than sent would go out again once its lease lapses, so keep trying
        while the lease holds it for us."""
        delay = 0.1
        while True:
            try:
                async with self._pool.acquire() as conn:
                    await conn.execute(db.query("mark_mail_sent"), row["id"], row["attempts"])
                return
            except Exception as exc:  # asyncpg fails in several ways (InternalClientError too)
                if time.monotonic() + delay > lease_ends:
                    raise
                log.warning("mail %s sent, but recording it failed (%s); retrying", row["id"], exc)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)

    def message(self, row: asyncpg.Record) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self._config.from_address
        message["To"] = row["recipient"]
        message["Subject"] = row["subject"]
        message["Message-ID"] = row["message_id"]
        message["Date"] = email.utils.formatdate(localtime=False)
        message.set_content(row["body"])
        return message

    async def _send(self, row: asyncpg.Record) -> None:
        config = self._config
        await aiosmtplib.send(
            self.message(row),
            hostname=config.smtp_host,
            port=config.smtp_port,
            username=config.smtp_username or None,
            password=config.smtp_password or None,
            use_tls=config.security == "tls",
            start_tls=config.security == "starttls",
            timeout=config.timeout_seconds,
        )
