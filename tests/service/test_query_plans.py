"""Every statement of sql/queries reaches the rows it wants through an index: a query whose
WHERE no index serves reads every account's rows, which tests on small tables never show
(migrations 0039, 0040 and 0041 each added one that was missing, found after the fact)."""

from __future__ import annotations

import json
import re

import pytest

from service import db
from tests.helpers_plans import seq_scans

# Statements that read a whole table on purpose, each with why.
WHOLE_TABLE = {
    "delete_old_web_sessions": "housekeeping sweep of ended sessions",
    "prune_email_confirmations": "housekeeping sweep",
    "prune_password_resets": "housekeeping sweep",
    "prune_rate_limit_buckets": "housekeeping sweep",
    "delete_unlisted_vocabulary": "start-up sync of the seeded vocabulary",
    "embeddings_pending": "the indexer's queue of written entries is its round's work",
    "embeddings_prune": "the operator's `embeddings prune`: every other model's vectors",
    "functions_missing": "pg_proc, at start-up",
    "set_review_period": "library_settings holds one row",
    "mark_knowledge_item_reviewed": "library_settings holds one row",
}

# A generic plan (the statement's parameters unknown, as a prepared statement's is) of `sql`.
EXPLAIN = """CREATE FUNCTION pg_temp.generic_plan(statement text) RETURNS json LANGUAGE plpgsql AS $f$
    DECLARE plan json;
    BEGIN EXECUTE 'EXPLAIN (GENERIC_PLAN, FORMAT JSON) ' || statement INTO plan; RETURN plan; END $f$"""


def _plannable(sql: str) -> bool:
    """A query or data change (not DDL, SET or VACUUM, nor a template of the code's)."""
    body = re.sub(r"--[^\n]*", "", sql).lstrip().upper()
    return body.startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")) and "{" not in sql


async def test_queries__read_their_tables_through_an_index(conn):
    if int(await conn.fetchval("SHOW server_version_num")) < 160000:
        pytest.skip("EXPLAIN (GENERIC_PLAN) is PostgreSQL 16's")
    await conn.execute("SET enable_seqscan = off")  # a seq scan is then the plan only without an index
    await conn.execute(EXPLAIN)
    planned, scanning = 0, {}
    for name, sql in sorted(db.QUERIES.items()):
        if not _plannable(sql):
            continue
        plan = json.loads(await conn.fetchval("SELECT pg_temp.generic_plan($1)", sql))
        planned += 1
        if tables := seq_scans(plan[0]["Plan"]):
            scanning[name] = sorted(tables)
    assert planned > 200
    assert {name: tables for name, tables in scanning.items() if name not in WHOLE_TABLE} == {}
    assert set(WHOLE_TABLE) <= set(scanning), "a statement listed in WHOLE_TABLE no longer needs it"
