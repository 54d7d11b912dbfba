"""The mail outbox and its sender, against a real SMTP server on loopback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from conftest import SmtpSink, free_port, mail_settings, with_config

from service import config as config_module
from service import db
from service.domain import mail
from service.domain.mail import MailSender
from service.web.app import create_app
from tests.conftest import CONNECT


def mail_config(**settings: Any) -> Any:
    return config_module.structure({"mail": settings}).mail


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=6)
    yield pool
    await pool.close()


async def outbox(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT state::text, attempts, body, last_error FROM mail_outbox ORDER BY id")


async def wait_until(probe: Any, within_seconds: float = 10.0) -> None:
    async with asyncio.timeout(within_seconds):
        # Polling: the outbox is a table; there is no event to wait on.
        while not await probe():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_sender__server_down_then_back_delivers_once(aiohttp_client, config, admin, conn):
    sink = SmtpSink(free_port())  # not started: connections are refused
    settings = mail_settings(sink.port) | {"max_attempts": 20, "retry_base_seconds": 0.05}
    client = await aiohttp_client(create_app(with_config(config, mail=settings)))
    response = await client.post(
        "/api/v1/users",
        json={"user": {"email": "ada@example.test", "password": "correct horse battery",
                       "terms_of_service": True}},
        headers=admin.headers,
    )
    assert response.status == 201
    async def retried() -> bool:
        return (await outbox(conn))[0]["attempts"] >= 2

    await wait_until(retried)
    [row] = await outbox(conn)
    assert row["state"] == "pending" and row["last_error"]
    assert sink.messages == []

    sink.start()
    try:
        [message] = await sink.wait_for(1)
        assert message["To"] == "ada@example.test"

        async def sent() -> bool:
            return (await outbox(conn))[0]["state"] == "sent"

        await wait_until(sent)
        await asyncio.sleep(0.3)  # a few more polling rounds: nothing is sent again
        assert len(sink.messages) == 1
    finally:
        sink.stop()


async def test_sender__concurrent_senders_send_each_message_once(pool, smtp):
    config = mail_config(**mail_settings(smtp.port))
    async with pool.acquire() as conn:
        for number in range(30):
            await mail.enqueue(conn, config, f"user{number}@example.test", f"hello {number}", "body",
                               kind="test")
    senders = [MailSender(pool, config) for _ in range(3)]
    await asyncio.gather(*(sender.deliver_due() for sender in senders))
    messages = await smtp.wait_for(30)
    await asyncio.sleep(0.2)
    assert len(smtp.messages) == 30
    assert len({m["Message-ID"] for m in messages}) == 30
    async with pool.acquire() as conn:
        rows = await outbox(conn)
    assert {(r["state"], r["attempts"]) for r in rows} == {("sent", 1)}


async def test_sender__a_backlog_goes_out_over_several_connections_at_once(pool):
    """One process sent one message at a time: 700 invitations to an SMTP server taking 150 ms
    each took over 90 s. Its `concurrency` loops now share a backlog that one wake announced."""
    sink = SmtpSink(delay_seconds=0.2)
    sink.start()
    config = mail_config(**mail_settings(sink.port) | {"poll_interval_seconds": 30.0, "concurrency": 4})
    sender = MailSender(pool, config)
    running = asyncio.create_task(sender.run())
    try:
        await asyncio.sleep(0.2)  # every loop has looked once and sleeps (30 s)
        async with pool.acquire() as conn:
            for number in range(12):
                await mail.enqueue(conn, config, f"user{number}@example.test", f"hello {number}", "body",
                               kind="test")
        sender.wake()  # as one bulk invitation's commit does
        messages = await sink.wait_for(12)
        await asyncio.sleep(0.3)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        sink.stop()
    assert len(sink.messages) == 12 and len({m["Message-ID"] for m in messages}) == 12
    assert sink.peak == 4


async def test_claim__a_claimed_message_is_not_claimed_again_within_its_lease(conn):
    config = mail_config()
    first = await mail.enqueue(conn, config, "a@example.test", "a", "body", kind="test")
    second = await mail.enqueue(conn, config, "b@example.test", "b", "body", kind="test")
    claimed = [await conn.fetchrow(db.query("claim_mail"), 1, 60) for _ in range(3)]
    assert [row["id"] if row else None for row in claimed] == [first, second, None]
    await conn.execute("UPDATE mail_outbox SET next_attempt_at = now() - interval '1 second'")
    retaken = await conn.fetchrow(db.query("claim_mail"), 1, 60)  # lease over: the sender died
    assert retaken["id"] == first and retaken["attempts"] == 2


async def test_sender__without_smtp_holds_message_and_logs_no_link(pool, caplog):
    config = mail_config()  # no smtp_host
    async with pool.acquire() as conn:
        mail_id = await mail.enqueue(
            conn, config, "ada@example.test", "Confirm", "open https://x.test/confirm?token=abc",
            kind="test",
        )
    with caplog.at_level(logging.INFO, logger="service.domain.mail"):
        assert await MailSender(pool, config).deliver_due()
    assert "token=abc" not in caplog.text and "https://x.test" not in caplog.text
    assert "undelivered" in caplog.text and f"python -m service mail show {mail_id}" in caplog.text
    async with pool.acquire() as conn:
        [row] = await conn.fetch("SELECT state::text AS state, body FROM mail_outbox")
        assert (row["state"], row["body"]) == ("held", "open https://x.test/confirm?token=abc")
        assert not await MailSender(pool, config).deliver_due()  # held: not attempted again


async def test_sender__gives_up_after_max_attempts_and_erases_body(pool):
    config = mail_config(**mail_settings(free_port()) | {"max_attempts": 2, "retry_base_seconds": 0.01})
    async with pool.acquire() as conn:
        await mail.enqueue(conn, config, "ada@example.test", "Confirm", "secret link", kind="test")
    sender = MailSender(pool, config)
    async with asyncio.timeout(5):
        while True:
            await sender.deliver_due()
            async with pool.acquire() as conn:
                [row] = await outbox(conn)
            if row["state"] != "pending":
                break
            await asyncio.sleep(0.02)
    assert (row["state"], row["attempts"], row["body"]) == ("failed", 2, "")
    assert row["last_error"]


async def test_outbox__mail_rolls_back_with_its_transaction(conn):
    config = mail_config()
    with pytest.raises(RuntimeError):
        async with conn.transaction():
            await mail.enqueue(conn, config, "ada@example.test", "Confirm", "link", kind="test")
            raise RuntimeError("the user could not be stored")
    assert await outbox(conn) == []


def test_config_example__documents_mail_and_members_defaults():
    import tomllib

    from conftest import ROOT

    raw = tomllib.loads((ROOT / "config.example.toml").read_text())
    example = config_module.structure(raw)
    assert example.mail == config_module.MailConfig()
    assert example.members == config_module.MembersConfig()


class KillingSink(SmtpSink):
    """Accepts each message, then takes the database away for `outage` seconds (connections
    refused, existing ones terminated): the sender loses it between sending and recording, as
    in a database restart."""

    def __init__(self, server_url: str, database: str, outage: float = 1.0) -> None:
        super().__init__()
        self.server_url, self.database, self.outage = server_url, database, outage
        self.back = asyncio.Event()

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(self.server_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        await self._admin(f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS false')
        await self._admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          f" WHERE datname = '{self.database}'")

        async def reopen() -> None:
            await asyncio.sleep(self.outage)
            await self._admin(f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS true')
            self.back.set()

        self.reopening = asyncio.ensure_future(reopen())  # on the sink's own loop and thread
        return await super().handle_DATA(server, session, envelope)


async def test_sender__database_lost_after_sending_records_it_once_sent(
    pool, server_url, direct_database_url
):
    # Before: the failed "sent" mark left the message pending until its lease lapsed, then it
    # went out a second time (make soak-restart saw doubles).
    from yarl import URL

    sink = KillingSink(server_url, URL(direct_database_url).path.lstrip("/"))
    sink.start()
    try:
        config = mail_config(**mail_settings(sink.port))
        async with pool.acquire() as conn:
            await mail.enqueue(conn, config, "ada@example.test", "Confirm", "body", kind="test")
        await MailSender(pool, config).deliver_due()
        async with pool.acquire() as conn:
            assert [(r["state"], r["attempts"]) for r in await outbox(conn)] == [("sent", 1)]
        assert len(sink.messages) == 1
    finally:
        sink.stop()

