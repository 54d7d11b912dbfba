"""Housekeeping: idle rate-limit buckets, ended web sessions, old e-mails and expired links are
deleted, the rest stays; a bucket deleted while idle behaves as a full one (webhook retention:
tests/web/test_webhooks.py)."""

from __future__ import annotations

import asyncpg
from conftest import CONNECT, with_config

from service import db
from service.config import Config
from service.domain import housekeeping


def test_longest_rate_limit_period__every_configured_limit_counts():
    config = Config()
    assert housekeeping.longest_rate_limit_period(config) == 3600  # password_reset_per_email
    longer = with_config(config, rate_limits={"ask_question": {"limit": 10, "period_seconds": 86400}})
    assert housekeeping.longest_rate_limit_period(longer) == 86400


async def test_sweep__what_nothing_reads_goes_the_rest_stays(conn, database_url, admin):
    take = db.query("take_rate_limit_token")
    for key in ("idle:a", "idle:b", "idle:c", "busy"):
        await conn.fetchrow(take, key, 10.0, 10 / 60)
    # Emptied, then left alone for longer than the longest period: full again, deletable.
    for _ in range(9):
        await conn.fetchrow(take, "idle:a", 10.0, 10 / 60)
    await conn.execute("UPDATE rate_limit_buckets SET refilled_at = now() - interval '2 hours'"
                       " WHERE bucket_key LIKE 'idle:%'")
    await conn.execute(
        "INSERT INTO web_sessions (token_hash, member_id, csrf_token, expires_at, revoked_at) VALUES"
        " ('\\x01', $1, 'a', now() - interval '2 days', NULL),"
        " ('\\x02', $1, 'b', now() + interval '1 hour', now() - interval '3 days'),"
        " ('\\x03', $1, 'c', now() + interval '1 hour', NULL)", admin.member_id)

    await conn.execute(
        "INSERT INTO mail_outbox (message_id, recipient, subject, body, state, created_at) VALUES"
        " ('<1@x>', 'a@example.test', 'Old, sent', '', 'sent', now() - interval '31 days'),"
        " ('<2@x>', 'b@example.test', 'Old, held', 'link', 'held', now() - interval '31 days'),"
        " ('<3@x>', 'c@example.test', 'Old, still pending', 'link', 'pending', now() - interval '31 days'),"
        " ('<4@x>', 'd@example.test', 'Recent, sent', '', 'sent', now() - interval '29 days')")
    user_id = await conn.fetchval("SELECT user_id FROM members WHERE id = $1", admin.member_id)
    for table in ("email_confirmations", "password_resets"):
        await conn.execute(
            f"INSERT INTO {table} (user_id, token_hash, expires_at, used_at) VALUES"
            " ($1, '\\x01', now() - interval '2 days', NULL),"
            " ($1, '\\x02', now() - interval '2 days', now() - interval '3 days'),"
            " ($1, '\\x03', now() - interval '1 hour', NULL),"
            " ($1, '\\x04', now() + interval '1 hour', NULL)", user_id)

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, **CONNECT)
    try:
        assert await housekeeping.prune_rate_limit_buckets(pool, 3600, batch=2) == 3
        assert await housekeeping.prune_mail(pool, keep_days=0) == 0
        deleted = await housekeeping.sweep(pool, Config())
    finally:
        await pool.close()
    assert deleted == {"webhook_events": 0, "rate_limit_buckets": 0, "web_sessions": 2, "mail": 2,
                       "confirmation_links": 2, "reset_links": 2}
    assert sorted(r[0] for r in await conn.fetch("SELECT subject FROM mail_outbox")) == [
        "Old, still pending", "Recent, sent"]
    for table in ("email_confirmations", "password_resets"):
        assert sorted(bytes(r[0]) for r in await conn.fetch(f"SELECT token_hash FROM {table}")) \
            == [b"\x03", b"\x04"]
    assert [r[0] for r in await conn.fetch("SELECT bucket_key FROM rate_limit_buckets")] == ["busy"]
    assert await conn.fetchval("SELECT count(*) FROM web_sessions") == 1
    # A deleted bucket starts full, as it would have been.
    allowed = await conn.fetchrow(take, "idle:a", 10.0, 10 / 60)
    assert allowed["allowed"] and allowed["remaining"] == 9
