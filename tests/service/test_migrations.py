from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import asyncpg
import pytest

from service import db
from service.answering.retrieval import find_references
from service.domain import accounts
from service.domain.ids import new_id
from tests.conftest import ROOT


async def _migrate(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return await db.migrate(conn)
    finally:
        await conn.close()


async def test_migrate__concurrent_runs_apply_each_migration_once(empty_database_url):
    results = await asyncio.gather(*(_migrate(empty_database_url) for _ in range(3)))

    versions = [version for version, _ in db.migration_files()]
    # The advisory lock lets exactly one run apply everything; the others find nothing to do.
    assert sorted(results, key=len) == [[], [], versions]
    conn = await asyncpg.connect(empty_database_url)
    try:
        stored = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")]
        assert sorted(stored) == versions
    finally:
        await conn.close()


async def test_migrate__second_run_applies_nothing(database_url):
    assert await _migrate(database_url) == []


async def test_migrate__cli_runs_started_together_both_succeed(empty_database_url):
    env = {**os.environ, "DATABASE_URL": empty_database_url, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "service", "migrate", "--json"]
    procs = [
        await asyncio.create_subprocess_exec(
            *command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outputs = [await proc.communicate() for proc in procs]

    assert [proc.returncode for proc in procs] == [0, 0], outputs
    applied = sorted((json.loads(out)["applied"] for out, _ in outputs), key=len)
    assert applied == [[], [version for version, _ in db.migration_files()]]


def test_load_queries__every_block_has_a_description_and_sql():
    for name, sql in db.QUERIES.items():
        first, _, rest = sql.partition("\n")
        assert first.startswith("-- "), name
        assert rest.strip(), name


async def _migrate_before(conn: asyncpg.Connection, version: str, folder) -> None:
    """Apply the migrations older than `version` only (copied into `folder`)."""
    for older, path in db.migration_files():
        if older < version:
            (folder / path.name).write_text(path.read_text())
    await db.migrate(conn, folder)


async def test_migration_0016__reindexes_existing_entries_reading_slashes_as_spaces(
    empty_database_url, tmp_path
):
    conn = await asyncpg.connect(empty_database_url)
    try:
        await _migrate_before(conn, "0016", tmp_path)
        account_id = (await accounts.create_account(conn, "A", "a@example.invalid", 0))["account"]["id"]
        await conn.execute(
            "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES ($1, $2, $3, $4)",
            new_id("kb"), account_id, "Is there a plan?", "A Business Continuity/Disaster Recovery plan.")
        await conn.execute(
            "INSERT INTO knowledge_vocabulary (account_id, concept, phrase) VALUES ($1, 'drp', 'BC/DR')",
            account_id)
        matching = ("SELECT count(*) FROM knowledge_items"
                    " WHERE search_vector @@ to_tsquery('english', 'disaster')")
        assert await conn.fetchval(matching) == 0  # "Continuity/Disaster" was one token

        await db.migrate(conn)
        assert await conn.fetchval(matching) == 1
        [found] = await find_references(conn, account_id, "Is there a disaster recovery plan?")
        assert found.question == "Is there a plan?"
        terms = dict(await conn.fetch("SELECT lexeme, df FROM knowledge_terms WHERE account_id = $1",
                                      account_id))
        assert terms["disast"] == terms["continu"] == 1 and "continuity/disaster" not in terms
        assert await conn.fetchval(
            "SELECT phrase_query::text FROM knowledge_vocabulary WHERE account_id = $1", account_id
        ) == "'bc' <-> 'dr'"
    finally:
        await conn.close()


@pytest.mark.parametrize(("version", "concept", "phrase", "other", "seeded"), [
    ("0017", "annual", "annually", "last 12 months", 11),
    ("0018", "high_availability", "geographically diverse", "geographically separate", 4),
])
async def test_vocabulary_migration__keeps_an_operator_phrase_it_also_seeds(
    empty_database_url, tmp_path, version, concept, phrase, other, seeded
):
    conn = await asyncpg.connect(empty_database_url)
    try:
        await _migrate_before(conn, version, tmp_path)
        before = await conn.fetchval(
            "SELECT count(*) FROM knowledge_vocabulary WHERE concept = $1 AND account_id IS NULL", concept)
        operators = await conn.fetchval(
            "INSERT INTO knowledge_vocabulary (concept, phrase) VALUES ($1, $2) RETURNING id",
            concept, phrase)
        await db.migrate(conn)  # would fail on the unique phrase without ON CONFLICT
        rows = await conn.fetch(
            "SELECT id, phrase, numnode(phrase_query) AS nodes FROM knowledge_vocabulary"
            " WHERE concept = $1 AND account_id IS NULL", concept)
        assert len(rows) == before + seeded
        phrases = {row["phrase"]: row for row in rows}
        assert phrases[phrase]["id"] == operators and other in phrases
        assert all(row["nodes"] > 0 for row in rows)  # each phrase parses to a query
    finally:
        await conn.close()
