from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import asyncpg

from service import db
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
