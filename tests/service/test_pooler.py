"""PgBouncer in transaction mode in front of PostgreSQL (`database.pooler`, issue 18).

The settings' effects are checked everywhere; the tests through a real PgBouncer run in the
PgBouncer pass (`make test-pgbouncer`, which sets PGBOUNCER_URL) and skip elsewhere.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pgservers
import pytest
from yarl import URL

from service import config as config_module
from service import db
from service.web.app import create_app
from tests.conftest import PGBOUNCER_URL, with_config
from tests.helpers_questions import add_entry, ask, wait_complete

through_pgbouncer = pytest.mark.skipif(
    not PGBOUNCER_URL, reason="needs PgBouncer in transaction mode: make test-pgbouncer"
)


def _config(**database: str):
    return config_module.structure({"database": {"url": "postgresql://pooler/db", **database}})


def test_pooler__turns_off_server_side_prepared_statements():
    assert db.connect_options(_config()) == {}
    assert db.connect_options(_config(pooler="pgbouncer-transaction")) == {"statement_cache_size": 0}


def test_pooler__sessions_go_to_direct_url_or_nowhere():
    assert db.session_url(_config()) == "postgresql://pooler/db"
    pooled = _config(pooler="pgbouncer-transaction", direct_url="postgresql://pg/db")
    assert db.session_url(pooled) == "postgresql://pg/db"
    assert db.session_url(_config(pooler="pgbouncer-transaction")) is None


def test_pooler__set_from_the_environment():
    loaded = config_module.load(env={"RFP_DATABASE_POOLER": "pgbouncer-transaction",
                                     "DATABASE_DIRECT_URL": "postgresql://pg/db"})
    assert (loaded.database.pooler, loaded.database.direct_url) == (
        "pgbouncer-transaction", "postgresql://pg/db")
    with pytest.raises(config_module.ConfigError, match=r"database\.pooler"):
        config_module.structure({"database": {"pooler": "pgpool"}})


@through_pgbouncer
async def test_pgbouncer__questions_complete_and_stream_with_listen(aiohttp_client, config, conn, admin):
    assert config.database.pooler == "pgbouncer-transaction" and config.database.direct_url
    client = await aiohttp_client(create_app(config))
    await add_entry(conn, admin.account_id, "Is data encrypted at rest?", "Yes, AES-256.")
    # The entry's own question, asked ten times (ten questions: no idempotency key).
    responses = [await ask(client, admin.headers, "Is data encrypted at rest?") for _ in range(10)]
    assert [r.status for r in responses] == [202] * 10
    for response in responses:
        done = await wait_complete(client, (await response.json())["id"], admin.headers)
        assert done["answer"] == "Yes, AES-256."


@through_pgbouncer
async def test_pgbouncer__without_direct_url_events_are_polled_with_a_notice(
    aiohttp_client, config, conn, admin, caplog
):
    caplog.set_level(logging.WARNING, logger="service.web.app")
    polled = with_config(config, database={"direct_url": ""}, questions={"poll_seconds": 0.2})
    client = await aiohttp_client(create_app(polled))
    assert any("polled" in r.getMessage() for r in caplog.records)
    body = await (await ask(client, admin.headers, "Anything?")).json()
    response = await client.get(f"/api/v1/questions/{body['id']}/events", headers=admin.headers)
    async with asyncio.timeout(15):
        text = await response.text()
    assert "event: complete" in text


@through_pgbouncer
async def test_pgbouncer__migrate_without_direct_url_leaves_no_lock_behind(empty_database_url):
    from yarl import URL

    pooled = db.with_database(PGBOUNCER_URL, URL(empty_database_url).path.lstrip("/"))
    conns = [await asyncpg.connect(pooled, statement_cache_size=0) for _ in range(2)]
    try:
        # Two start-ups at once: one migrates, the other waits on the lock, then finds it done.
        results = await asyncio.gather(*(db.migrate(c, session=False) for c in conns))
        assert sorted(len(applied) for applied in results)[0] == 0
        assert max(len(applied) for applied in results) == len(db.migration_files())
    finally:
        for c in conns:
            await c.close()
    direct = await asyncpg.connect(empty_database_url)
    try:
        held = await direct.fetchval(
            # pg_locks is the cluster's: another test's migration of its own database holds the same id.
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            db.MIGRATION_LOCK_ID,
        )
        assert held == 0
    finally:
        await direct.close()


@through_pgbouncer  # a server on TCP for a pooler of the test's own (the embedded one has a socket only)
async def test_pooler__left_none_through_pgbouncer_in_transaction_mode_is_refused_saying_what_to_set(
    empty_database_url,
):
    # The operator forgot database.pooler: the service started, and then lost its cached prepared
    # statements to other server connections (500s now and then, a traceback each background round).
    # A pooler of its own: on the pass's shared one another test may take the server connection
    # between the check's statements, and the check then (rightly) says nothing.
    server = URL(empty_database_url)
    with pgservers.pooler(server.port, server.user) as bouncer:
        through = bouncer.url(server.path[1:])
        with pytest.raises(config_module.ConfigError) as refused:
            await db.connect_for_admin(_config(url=through), through)
        assert str(refused.value).startswith("database.pooler: database.url goes through a pooler in "
                                             "transaction mode (two connections' statements ran on one ")
        assert 'set it to "pgbouncer-transaction" (env RFP_DATABASE_POOLER)' in str(refused.value)
        conn, session = await db.connect_for_admin(_config(url=through, pooler="pgbouncer-transaction"),
                                                   through)
        await conn.close()
        assert not session
    # PostgreSQL itself: each connection its own backend, nothing to say.
    conn, session = await db.connect_for_admin(_config(url=empty_database_url), empty_database_url)
    await conn.close()
    assert session


def test_session_state__only_set_local_and_transaction_scoped_locks():
    # Behind a transaction pooler a plain SET or a session advisory lock stays on whichever server
    # connection ran it, for whoever gets it next. Only the migration lock (db.migrate, which
    # takes it over direct_url or falls back to a transaction lock) may be a session lock.
    import re

    from tests.conftest import ROOT

    offenders = []
    sources = [*ROOT.glob("sql/queries/*.sql"), *ROOT.glob("service/**/*.py")]
    for path in sources:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("--")[0] if path.suffix == ".sql" else line
            if re.search(r"""(^|[;"'(]\s*)SET\s+(?!LOCAL\b)(SESSION\s+)?[a-z_.]+\s*(=|TO\b)""", code) or (
                "pg_advisory_lock(" in code and path.name != "db.py"
            ) or re.search(r"set_config\([^)]*,\s*false\s*\)", code):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_eval__behind_a_pooler_needs_direct_url(tmp_path):
    # eval makes scratch databases and pools on them: through PgBouncer's cache-less, LISTEN-less
    # sessions it would fail half-way; it says what to set instead.
    from tests.cli_runner import cli

    for name in ("kb.csv", "q.csv", "l.csv"):
        (tmp_path / name).write_text("id\n")
    result = cli("postgresql://nobody@127.0.0.1:1/none", "eval", "--kb", str(tmp_path / "kb.csv"),
                 "--questions", str(tmp_path / "q.csv"), "--labels", str(tmp_path / "l.csv"),
                 env={"RFP_DATABASE_POOLER": "pgbouncer-transaction", "DATABASE_DIRECT_URL": ""})
    assert result.returncode == 2  # a configuration error, as for every other setting
    assert "database.direct_url" in result.stderr
