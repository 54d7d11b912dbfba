"""Housekeeping: idle rate-limit buckets, ended web sessions, old e-mails and expired links are
deleted, the rest stays; a bucket deleted while idle behaves as a full one (webhook retention:
tests/web/test_webhooks.py)."""

from __future__ import annotations

import asyncio

import asyncpg
from conftest import CONNECT, with_config

from service import db
from service.config import Config
from service.domain import housekeeping, import_reports


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
        " ('<2@x>', 'b@example.test', 'Old, held', 'link', 'held', now() - interval '45 days'),"
        " ('<3@x>', 'c@example.test', 'Old, still pending', 'link', 'pending', now() - interval '31 days'),"
        " ('<4@x>', 'd@example.test', 'Recent, sent', '', 'sent', now() - interval '29 days')")
    # Held (no SMTP server): kept while an invitation link in it may still work.
    await conn.execute(
        "INSERT INTO mail_outbox (message_id, recipient, subject, body, state, created_at) VALUES"
        " ('<5@x>', 'e@example.test', 'Held, link alive', 'link', 'held', now() - interval '35 days')")
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
        assert await housekeeping.prune_mail(pool, keep_days=0, held_days=41) == 0
        long_invitations = with_config(Config(), members={"invitation_ttl_days": 40})
        assert housekeeping.longest_link_days(long_invitations) == 41
        deleted = await housekeeping.sweep(pool, long_invitations)
    finally:
        await pool.close()
    assert deleted == {"webhook_events": 0, "rate_limit_buckets": 3, "web_sessions": 2, "mail": 2,
                       "links": 4, "import_reports": 0}
    assert sorted(r[0] for r in await conn.fetch("SELECT subject FROM mail_outbox")) == [
        "Held, link alive", "Old, still pending", "Recent, sent"]
    for table in ("email_confirmations", "password_resets"):
        assert sorted(bytes(r[0]) for r in await conn.fetch(f"SELECT token_hash FROM {table}")) \
            == [b"\x03", b"\x04"]
    assert [r[0] for r in await conn.fetch("SELECT bucket_key FROM rate_limit_buckets")] == ["busy"]
    assert await conn.fetchval("SELECT count(*) FROM web_sessions") == 1
    # A deleted bucket starts full, as it would have been.
    allowed = await conn.fetchrow(take, "idle:a", 10.0, 10 / 60)
    assert allowed["allowed"] and allowed["remaining"] == 9


async def test_sweep__import_reports_a_week_old_go(conn, database_url, admin, make_rfp):
    """The web app's import reports (migration 0045) are read right after their import: kept
    import_reports.KEEP_DAYS, then swept; their pages are then the 404 page."""
    rfp_id = await make_rfp(admin)
    for number, (age, rfp) in enumerate([("8 days", None), ("7 days 1 hour", rfp_id), ("6 days", None),
                                         ("1 minute", rfp_id)]):
        await conn.execute(
            "INSERT INTO import_reports (id, account_id, member_id, rfp_id, created_at, report)"
            "VALUES ($1, $2, $3, $4, now() - $5::text::interval, '{}')",
            f"imp_{number}", admin.account_id, admin.member_id, rfp, age)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, **CONNECT)
    try:
        assert import_reports.KEEP_DAYS == 7
        assert await housekeeping.prune_import_reports(pool, batch=1) == 2  # in batches of one
        deleted = await housekeeping.sweep(pool, Config())
    finally:
        await pool.close()
    assert deleted["import_reports"] == 0
    assert [r[0] for r in await conn.fetch("SELECT id FROM import_reports ORDER BY id")] == ["imp_2", "imp_3"]


async def test_take_rate_limit_token__a_bucket_deleted_between_its_two_statements_starts_full(conn):
    # Housekeeping may delete an idle bucket between the function's INSERT … DO NOTHING and its
    # SELECT … FOR UPDATE; a trigger does just that, once. (Before, the take found no row and
    # answered allowed false with no retry time: a 500 for its caller.)
    take = db.query("take_rate_limit_token")
    refill = 10 / 3600
    await conn.fetchrow(take, "k", 10.0, refill)  # 9 left
    await conn.execute("""
        CREATE TABLE pruned_once (armed boolean);
        INSERT INTO pruned_once VALUES (true);
        CREATE FUNCTION prune_once() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (SELECT armed FROM pruned_once) THEN
                UPDATE pruned_once SET armed = false;
                DELETE FROM rate_limit_buckets WHERE bucket_key = NEW.bucket_key;
                RETURN NULL;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER prune_once BEFORE INSERT ON rate_limit_buckets
            FOR EACH ROW EXECUTE FUNCTION prune_once();
    """)
    row = await conn.fetchrow(take, "k", 10.0, refill)
    assert not await conn.fetchval("SELECT armed FROM pruned_once")  # it did delete the bucket
    assert row["allowed"] and row["remaining"] == 9  # full again, less this one (not ~8)
    assert row["retry_after"] is not None


async def test_sweep__a_failing_step_is_logged_and_the_others_still_run(conn, database_url, caplog):
    await conn.execute("INSERT INTO rate_limit_buckets VALUES ('idle', 1, now() - interval '1 day')")
    await conn.execute("DROP TABLE mail_outbox")  # the mail step fails
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, **CONNECT)
    try:
        deleted = await housekeeping.sweep(pool, Config())
    finally:
        await pool.close()
    assert deleted["mail"] is None and deleted["rate_limit_buckets"] == 1
    assert deleted["links"] == 0 and deleted["web_sessions"] == 0 and deleted["import_reports"] == 0
    assert "housekeeping: deleting old mail failed" in caplog.text


async def test_run__never_sweeps_when_switched_off(database_url):
    off = with_config(Config(), housekeeping={"every_seconds": 0})
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1, **CONNECT)
    try:  # returns at once rather than sleeping until its first sweep
        await asyncio.wait_for(housekeeping.run(pool, off), timeout=5)
    finally:
        await pool.close()
