"""The harness hands a finished test's database to the next test only when it is as fresh as a new
copy of the template (tests/spare_databases.py): rows go, anything else gets a new database."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import asyncpg
import pytest
import spare_databases
from conftest import _admin

from service import db
from service.domain.ids import new_id


@pytest.fixture
async def used(server_url: str, template_db: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a new copy of the template, as a test would leave it used."""
    name = f"rfp_spare_{secrets.token_hex(6)}"
    await _admin(server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    conn = await asyncpg.connect(db.with_database(server_url, name))
    yield conn
    await conn.close()
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def add_account(conn: asyncpg.Connection) -> str:
    account_id = new_id("acct")
    await conn.execute("INSERT INTO accounts (id, name, credits) VALUES ($1, 'Acme', 5)", account_id)
    return account_id


async def test_rows__deleted_the_seeded_kept_and_the_database_given_again(used, template_state):
    account_id = await add_account(used)
    await used.execute("INSERT INTO knowledge_vocabulary (account_id, concept, phrase) "
                       "VALUES ($1, 'mfa', 'two-step sign-in')", account_id)

    assert await spare_databases.reset(used, template_state)

    assert await used.fetchval("SELECT count(*) FROM accounts") == 0
    assert await used.fetchval("SELECT count(*) FROM knowledge_vocabulary WHERE account_id IS NOT NULL") == 0
    assert await used.fetchval("SELECT count(*) FROM knowledge_vocabulary") > 0  # the seeded terms
    assert await used.fetchval("SELECT count(*) FROM library_settings") == 1
    assert await used.fetchval(spare_databases.CATALOG_DIGEST) == template_state.catalog
    assert template_state.sequences  # the vocabulary's identity: where the template has it again
    for sequence, position in template_state.sequences.items():
        assert tuple(await used.fetchrow(f"SELECT last_value, is_called FROM {sequence}")) == position


@pytest.mark.parametrize("change", [
    ["CREATE FUNCTION t_fail() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RAISE EXCEPTION ''x''; END'",
     "CREATE TRIGGER t_fail BEFORE UPDATE ON rfp_items FOR EACH ROW EXECUTE FUNCTION t_fail()"],
    "ALTER TABLE questions DISABLE TRIGGER USER",
    "DROP INDEX rfp_items_search_trgm",
    "ANALYZE accounts",
    "GRANT SELECT ON accounts TO PUBLIC",
    "ALTER TABLE accounts ADD COLUMN extra text",
    "COMMENT ON TABLE accounts IS 'changed'",
    "UPDATE library_settings SET review_period_days = 30",
    "DELETE FROM knowledge_vocabulary WHERE account_id IS NULL",
    # What the catalog digest does not name, told by the catalogs' rows (their xmin):
    "CREATE RULE keep AS ON DELETE TO accounts DO INSTEAD NOTHING",
    "ALTER SEQUENCE knowledge_vocabulary_id_seq INCREMENT BY 100",
    "ALTER FUNCTION knowledge_text(text) CALLED ON NULL INPUT",
    "ALTER FUNCTION knowledge_text(text) VOLATILE",
    ["DROP TRIGGER questions_notify_state ON questions",  # the same name and function, other events
     "CREATE TRIGGER questions_notify_state AFTER INSERT ON questions "
     "FOR EACH ROW EXECUTE FUNCTION notify_question_state()"],
    'ALTER TABLE accounts ALTER COLUMN name TYPE text COLLATE "C"',
    "ALTER TABLE accounts FORCE ROW LEVEL SECURITY",
    "SELECT lo_from_bytea(0, 'left by a test')",
    "CREATE PUBLICATION everything FOR TABLE accounts",
    "ALTER TEXT SEARCH CONFIGURATION english DROP MAPPING FOR asciiword",
    "CREATE FUNCTION pg_catalog.left_by_a_test() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    # The database itself (a shared catalog's row):
    "DO $$ BEGIN EXECUTE format('COMMENT ON DATABASE %I IS ''changed''', current_database()); END $$",
])
async def test_anything_but_rows__the_database_is_not_given_again(used, template_state, change):
    for statement in [change] if isinstance(change, str) else change:
        await used.execute(statement)

    assert not await spare_databases.reset(used, template_state)


async def test_a_table_grown_past_ten_pages__not_given_again(used, template_state):
    """The planner takes a never-vacuumed table under 10 pages for 10; past that it counts them,
    and the dead rows a deletion leaves would make a later test plan as over a full table."""
    account_id = await add_account(used)
    await used.execute(
        "INSERT INTO knowledge_vocabulary (account_id, concept, phrase) "
        "SELECT $1, 'c' || i, repeat('p', 200) || i FROM generate_series(1, 2000) i", account_id)

    assert not await spare_databases.reset(used, template_state)


async def test_another_session_on_it__ended_and_the_database_given_again(
    used, template_state, server_url,
):
    """A session the test left (a pooler's server connection, a child process) holding a row lock
    is ended, as DROP DATABASE … WITH (FORCE) ended it."""
    account_id = await add_account(used)
    name = await used.fetchval("SELECT current_database()")
    left = await asyncpg.connect(db.with_database(server_url, name))
    tr = left.transaction()
    await tr.start()
    await left.execute("UPDATE accounts SET credits = 6 WHERE id = $1", account_id)

    assert await spare_databases.reset(used, template_state)
    assert left.is_closed() or await _closed_on_use(left)
    assert await used.fetchval("SELECT count(*) FROM accounts") == 0


async def _closed_on_use(conn: asyncpg.Connection) -> bool:
    try:
        await conn.fetchval("SELECT 1")
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
        return True
    return False


async def test_activity_counters__zeroed_as_a_new_copy_has_them(used, template_state, server_url):
    """Rows deleted by the reset and written by earlier tests would count towards autovacuum's
    thresholds (50 rows changed): a later test's tables vacuumed or analyzed midway, which a new
    copy's would not be."""
    account_id = await add_account(used)
    await used.execute("UPDATE accounts SET credits = credits + 1 WHERE id = $1", account_id)

    assert await spare_databases.reset(used, template_state)

    name = await used.fetchval("SELECT current_database()")
    await used.close()
    other = await asyncpg.connect(db.with_database(server_url, name))
    try:
        counters = await other.fetchrow(
            "SELECT n_tup_ins, n_tup_del, n_dead_tup, n_mod_since_analyze FROM pg_stat_user_tables "
            "WHERE relname = 'accounts'")
    finally:
        await other.close()
    assert counters is None or tuple(counters) == (0, 0, 0, 0)
