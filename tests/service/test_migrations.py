from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import resources

import asyncpg
import pytest
from cli_runner import POOLER_ENV

from service import db
from service.answering.retrieval import find_references
from service.domain.ids import new_id
from tests.conftest import CONNECT, ROOT


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


async def test_migration_0016__reindexes_existing_entries_reading_slashes_as_spaces(empty_database_url):
    conn = await asyncpg.connect(empty_database_url)
    try:
        await db.migrate(conn, before="0016")
        # Plain SQL of that schema: today's domain code writes columns later migrations add.
        account_id = new_id("acct")
        await conn.execute("INSERT INTO accounts (id, name) VALUES ($1, 'A')", account_id)
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
    empty_database_url, version, concept, phrase, other, seeded
):
    conn = await asyncpg.connect(empty_database_url)
    try:
        await db.migrate(conn, before=version)
        before = await conn.fetchval(
            "SELECT count(*) FROM knowledge_vocabulary WHERE concept = $1 AND account_id IS NULL", concept)
        operators = await conn.fetchval(
            "INSERT INTO knowledge_vocabulary (concept, phrase) VALUES ($1, $2) RETURNING id",
            concept, phrase)
        # Would fail on the unique phrase without ON CONFLICT. Up to 0019 only: the vocabulary
        # sync after the migrations makes the seeded rows sql/vocabulary.toml's, which no
        # longer lists these two migrations' phrases.
        await db.migrate(conn, before="0019")
        rows = await conn.fetch(
            "SELECT id, phrase, numnode(phrase_query) AS nodes FROM knowledge_vocabulary"
            " WHERE concept = $1 AND account_id IS NULL", concept)
        assert len(rows) == before + seeded
        phrases = {row["phrase"]: row for row in rows}
        assert phrases[phrase]["id"] == operators and other in phrases
        assert all(row["nodes"] > 0 for row in rows)  # each phrase parses to a query
    finally:
        await conn.close()


# -- checksums, functions, vocabulary, upgrades -------------------------------------------

LAST_WITHOUT_CHECKSUMS = "0018"  # the last migration main's runner applied before checksums


async def _migrate_the_old_way(conn: asyncpg.Connection) -> None:
    """The runner as it was up to migration 0018 (no checksums, no functions/, no vocabulary
    file), on the migration files as they are now."""
    await conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version text PRIMARY KEY,
               applied_at timestamptz NOT NULL DEFAULT now()
           )"""
    )
    for version, path in db.migration_files():
        if version[:4] > LAST_WITHOUT_CHECKSUMS:
            break
        async with conn.transaction():
            await conn.execute(path.read_text())
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)


# Everything a migration can change, as text that compares equal when the schemas are the same.
SCHEMA_QUERIES = {
    "extensions": "SELECT extname FROM pg_extension ORDER BY 1",
    "columns": """
        SELECT table_name, column_name, ordinal_position, data_type, udt_name, is_nullable,
               column_default, is_generated, generation_expression, is_identity
          FROM information_schema.columns WHERE table_schema = 'public'
         ORDER BY table_name, ordinal_position""",
    "indexes": """
        SELECT i.indexname, i.indexdef, c.reloptions::text
          FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname
         WHERE i.schemaname = 'public' ORDER BY 1""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
          FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid)
          FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace
           AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
         ORDER BY 1, 2""",
    "triggers": """
        SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1""",
    "views": "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public' ORDER BY 1",
    "enums": """
        SELECT t.typname, array_agg(e.enumlabel ORDER BY e.enumsortorder)::text
          FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid GROUP BY 1 ORDER BY 1""",
    "migrations": "SELECT version, checksum FROM schema_migrations ORDER BY 1",
    "comments": """
        SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
          FROM pg_description d
          LEFT JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
          LEFT JOIN pg_type t ON d.classoid = 'pg_type'::regclass AND t.oid = d.objoid
         WHERE coalesce(c.relnamespace, t.typnamespace) = 'public'::regnamespace
         ORDER BY 1""",
    "seeded vocabulary": """
        SELECT concept, phrase, phrase_query::text FROM knowledge_vocabulary
         WHERE seeded ORDER BY concept, lower(phrase)""",
}


async def _schema(conn: asyncpg.Connection) -> dict[str, list[tuple]]:
    return {name: [tuple(row) for row in await conn.fetch(sql)] for name, sql in SCHEMA_QUERIES.items()}


async def test_migrate__upgrades_a_database_migrated_before_checksums_to_the_fresh_schema(
    database_url, empty_database_url
):
    old = await asyncpg.connect(empty_database_url)
    fresh = await asyncpg.connect(database_url, **CONNECT)  # the template's copy: migrated from nothing
    try:
        await _migrate_the_old_way(old)
        await old.execute("INSERT INTO accounts (id, name) VALUES ('acct_old', 'Old')")
        await old.execute(
            "INSERT INTO knowledge_items (id, account_id, question, answer)"
            " VALUES ('kb_old', 'acct_old', 'Do you enforce MFA?', 'Yes, for every login.')")
        # An operator's phrases: one of the account's, one for every account.
        await old.execute(
            "INSERT INTO knowledge_vocabulary (account_id, concept, phrase)"
            " VALUES ('acct_old', 'mfa', 'two-step verification'), (NULL, 'sso', 'Okta')")
        assert await old.fetchval("SELECT count(*) FROM schema_migrations") == len(
            [v for v, _ in db.migration_files() if v[:4] <= LAST_WITHOUT_CHECKSUMS])

        applied = await db.migrate(old)

        assert applied == [v for v, _ in db.migration_files() if v[:4] > LAST_WITHOUT_CHECKSUMS]
        upgraded, expected = await _schema(old), await _schema(fresh)
        for part in SCHEMA_QUERIES:
            assert upgraded[part] == expected[part], part
        assert len(expected["seeded vocabulary"]) == len(db.vocabulary())
        assert all(checksum for _, checksum in upgraded["migrations"])
        assert await old.fetch(
            "SELECT account_id, concept, phrase FROM knowledge_vocabulary WHERE NOT seeded ORDER BY id"
        ) == [("acct_old", "mfa", "two-step verification"), (None, "sso", "Okta")]
        # The functions work on the data the old schema held.
        found = await old.fetch(
            "SELECT id, concepts FROM knowledge_retrieve('acct_old', 'Is 2FA required?', 100, 1000, 30, '{}')"
        )
        assert [row["id"] for row in found] == [None, "kb_old"] and "mfa" in found[0]["concepts"]
        assert await old.fetchrow(db.query("principal_by_token_hash"), b"no such token") is None
        assert await db.migrate(old) == []
        assert await _schema(old) == upgraded  # a second run changes nothing
    finally:
        await old.close()
        await fresh.close()


def _sql_copy(tmp_path):
    """A copy of sql/ to change: what a checkout with edited files would hold."""
    with resources.as_file(db.SQL) as source:
        return shutil.copytree(source, tmp_path / "sql", ignore=shutil.ignore_patterns("__pycache__"))


async def test_migrate__refuses_a_changed_migration_naming_it_and_applies_nothing(conn, tmp_path):
    sql = _sql_copy(tmp_path)
    edited = sql / "migrations" / "0013_retrieval_one_statement.sql"
    edited.write_text(edited.read_text() + "\n-- an afterthought\n")
    (sql / "migrations" / "9999_later.sql").write_text("CREATE TABLE later (id integer);")

    with pytest.raises(db.MigrationError, match=r"sql/migrations/0013_retrieval_one_statement\.sql changed"):
        await db.migrate(conn, sql)

    assert await conn.fetchval("SELECT to_regclass('later')") is None
    edited.write_text(edited.read_text().removesuffix("\n-- an afterthought\n"))  # as it landed
    assert await db.migrate(conn, sql) == ["9999_later"]


async def test_migrate__refuses_an_applied_migration_without_its_file(conn, tmp_path):
    sql = _sql_copy(tmp_path)
    (sql / "migrations" / "0014_question_handoff.sql").rename(sql / "migrations" / "0014_handoff.sql")

    with pytest.raises(db.MigrationError, match=r"0014_question_handoff is applied .* is missing"):
        await db.migrate(conn, sql)
    assert await conn.fetchval("SELECT count(*) FROM schema_migrations WHERE version = '0014_handoff'") == 0


async def test_migrate__allows_migrations_of_a_newer_release(conn):
    await conn.execute("INSERT INTO schema_migrations (version, checksum) VALUES ('9999_newer', 'x')")
    assert await db.migrate(conn) == []


async def test_migrate__fills_checksums_of_migrations_applied_without_them(conn):
    await conn.execute("UPDATE schema_migrations SET checksum = NULL")
    await db.migrate(conn)
    stored = dict(await conn.fetch("SELECT version, checksum FROM schema_migrations"))
    assert stored == {version: db.checksum(file) for version, file in db.migration_files()}


def test_cli_migrate__refuses_to_start_naming_the_changed_migration(database_url):
    async def tamper() -> None:
        conn = await asyncpg.connect(database_url, **CONNECT)
        try:
            await conn.execute(
                "UPDATE schema_migrations SET checksum = 'edited' WHERE version = '0005_members'")
        finally:
            await conn.close()

    asyncio.run(tamper())
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT), **POOLER_ENV}
    result = subprocess.run([sys.executable, "-m", "service", "migrate"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "sql/migrations/0005_members.sql changed after it was applied" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_migrate__a_migration_that_fails_is_one_line_naming_it(database_url):
    """A probe: with a migration's schema_migrations row gone (its tables still there), `serve`
    and `migrate` ended in a 30-line traceback (exit 1) from re-running it."""
    async def forget() -> None:
        conn = await asyncpg.connect(database_url, **CONNECT)
        try:
            await conn.execute("DELETE FROM schema_migrations WHERE version = '0024_web_sessions'")
        finally:
            await conn.close()

    from cli_runner import cli
    from service_process import free_port

    asyncio.run(forget())
    for command in (["migrate"], ["serve", "--port", str(free_port())]):
        result = cli(database_url, *command)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            "error: sql/migrations/0024_web_sessions.sql failed and nothing of it was applied: "
            'relation "web_sessions" already exists (SQLSTATE 42P07); the database is not as the '
            "migrations before it left it"]


@pytest.mark.parametrize(("tables", "why"), [
    ("CREATE TABLE schema_migrations (version varchar PRIMARY KEY);"  # Rails
     " INSERT INTO schema_migrations VALUES ('20230101120000')",
     "public.schema_migrations is not this service's table (columns: version character varying)"),
    ("CREATE TABLE schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL);"  # golang-migrate
     " INSERT INTO schema_migrations VALUES (20230101120000, false)",
     "public.schema_migrations is not this service's table (columns: version bigint, dirty boolean)"),
    ("CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz);"
     " INSERT INTO schema_migrations VALUES ('20230101120000'), ('0001_foundation')",
     "public.schema_migrations lists migrations that are not this service's (20230101120000)"),
    ("CREATE TABLE users (id bigint PRIMARY KEY); CREATE TABLE accounts (id bigint);"
     " CREATE VIEW active AS SELECT 1 AS one; CREATE SEQUENCE tickets; CREATE TABLE zones (id int)",
     "the schema public already holds accounts, active, tickets, users … and no schema_migrations"),
])
def test_cli_migrate__another_applications_database_is_refused_unchanged(empty_database_url, tables, why):
    """A probe: on a database whose schema_migrations was Rails' (version varchar), `migrate`
    added a checksum column to it and listed its 32 migrations there; on golang-migrate's (version
    bigint) it added the column, then ended in a TypeError traceback."""
    from cli_runner import cli
    from service_process import free_port

    async def sql(statement: str, *, many: bool = False) -> object:
        conn = await asyncpg.connect(empty_database_url)
        try:
            return await (conn.execute if many else conn.fetchval)(statement)
        finally:
            await conn.close()

    asyncio.run(sql(tables, many=True))
    shape = ("SELECT array_agg(attrelid::regclass || '.' || attname ORDER BY attrelid, attnum)"
             " FROM pg_attribute WHERE attrelid IN (SELECT oid FROM pg_class WHERE relnamespace ="
             " 'public'::regnamespace) AND attnum > 0")
    before = asyncio.run(sql(shape))
    for command in (["migrate"], ["serve", "--port", str(free_port())]):
        result = cli(empty_database_url, *command)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"error: this database looks like another application's: {why}. Nothing was changed; "
            'give the service a database of its own (README, "Using an existing PostgreSQL")']
    assert asyncio.run(sql(shape)) == before


async def test_functions__every_function_of_the_schema_has_its_file(conn):
    defined = await conn.fetch(SCHEMA_QUERIES["functions"])
    assert sorted(name for name, _ in defined) == sorted(name for name, _ in db.function_files())


async def test_functions__are_reapplied_from_their_files(conn, tmp_path):
    sql = _sql_copy(tmp_path)
    file = sql / "functions" / "display_name.sql"
    file.write_text(file.read_text().replace("split_part(email, '@', 1)", "'someone'"))
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "ann"
    await db.migrate(conn, sql)
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "someone"


# -- comments (what psql's \d+ and \dT+ show) -----------------------------------------------

# Not made by an extension (pgvector's and pg_trgm's objects are theirs to describe).
NOT_FROM_AN_EXTENSION = "NOT EXISTS (SELECT FROM pg_depend e WHERE e.objid = {}.oid AND e.deptype = 'e')"
UNCOMMENTED_RELATIONS = f"""
    SELECT c.relname FROM pg_class c
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
       AND obj_description(c.oid, 'pg_class') IS NULL AND {NOT_FROM_AN_EXTENSION.format("c")}
     ORDER BY 1"""
UNCOMMENTED_TYPES = f"""
    SELECT t.typname FROM pg_type t
     WHERE t.typnamespace = 'public'::regnamespace AND t.typtype IN ('e', 'd', 'r')
       AND obj_description(t.oid, 'pg_type') IS NULL AND {NOT_FROM_AN_EXTENSION.format("t")}
     ORDER BY 1"""
# Columns that hold a hash, a secret or a lease/claim: what they hold is never obvious.
UNCOMMENTED_SENSITIVE_COLUMNS = f"""
    SELECT c.relname || '.' || a.attname
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
       AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attname ~ '(hash|sha256|secret|token|password|lease|claim)'
       AND col_description(c.oid, a.attnum) IS NULL AND {NOT_FROM_AN_EXTENSION.format("c")}
     ORDER BY 1"""


async def test_comments__every_table_view_and_type_of_the_schema_has_one(conn):
    r"""Operators read the schema with psql (\d+, \dt+, \dT+): a migration that adds a table,
    view or enum type comments it (COMMENT ON), as 0031_comments did for those before it."""
    assert await conn.fetch(UNCOMMENTED_RELATIONS) == []
    assert await conn.fetch(UNCOMMENTED_TYPES) == []
    assert await conn.fetch(UNCOMMENTED_SENSITIVE_COLUMNS) == []
    # Made by `migrate` itself rather than a migration, and commented all the same.
    assert await conn.fetchval("SELECT obj_description('schema_migrations'::regclass, 'pg_class')")


# Foreign keys into a table, with whether an index leads with the referring column and holds every
# row its ON DELETE statement can match (no predicate, or only "column IS NOT NULL").
FOREIGN_KEYS_INTO = """
SELECT c.conrelid::regclass::text AS referring, a.attname AS col,
       EXISTS (SELECT 1 FROM pg_index i
                WHERE i.indrelid = c.conrelid AND i.indkey[0] = c.conkey[1]
                  AND (i.indpred IS NULL
                       OR pg_get_expr(i.indpred, i.indrelid) = '(' || a.attname || ' IS NOT NULL)'))
         AS indexed
  FROM pg_constraint c
  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
 WHERE c.contype = 'f' AND c.confrelid::regclass::text = ANY ($1::text[])
 ORDER BY 1, 2"""


async def test_foreign_keys__into_tables_the_service_deletes_from_are_indexed(conn):
    """A deletion checks or updates every row that refers to the deleted one, through the foreign key;
    without an index on the referring column that reads the whole referring table, every account's
    rows (removing a member read every question and entry until migration 0040). The tables are those
    the service's own SQL deletes from."""
    sql = "\n".join(p.read_text() for p in (ROOT / "sql").rglob("*.sql") if "migrations" not in p.parts)
    deleted = sorted(set(re.findall(r"DELETE FROM (\w+)", sql, flags=re.IGNORECASE)))
    assert "members" in deleted and "knowledge_items" in deleted
    keys = await conn.fetch(FOREIGN_KEYS_INTO, deleted)
    named = {(k["referring"], k["col"]) for k in keys}
    assert {("questions", "member_id"), ("rfp_items", "knowledge_item_id")} <= named
    assert [(k["referring"], k["col"]) for k in keys if not k["indexed"]] == []


async def test_comments__a_table_type_or_secret_column_without_one_is_named(conn):
    await conn.execute("CREATE TABLE uncommented (id int, secret text);"
                       " CREATE TYPE uncommented_state AS ENUM ('a')")
    assert [tuple(r) for r in await conn.fetch(UNCOMMENTED_RELATIONS)] == [("uncommented",)]
    assert [tuple(r) for r in await conn.fetch(UNCOMMENTED_TYPES)] == [("uncommented_state",)]
    assert [tuple(r) for r in await conn.fetch(UNCOMMENTED_SENSITIVE_COLUMNS)] == [("uncommented.secret",)]


async def test_migration_0031__applies_without_the_embeddings_table(empty_database_url):
    """0011 makes knowledge_embeddings only where pgvector is found: 0031 comments it only there."""
    conn = await asyncpg.connect(empty_database_url)
    try:
        await db.migrate(conn, before="0031")
        await conn.execute("DROP TABLE IF EXISTS knowledge_embeddings")
        await db.migrate(conn, before="0032")
        assert await conn.fetchval("SELECT to_regclass('knowledge_embeddings')") is None
        assert await conn.fetchval("SELECT obj_description('questions'::regclass, 'pg_class')")
    finally:
        await conn.close()


def test_function_files__each_after_the_functions_it_calls():
    order = [name for name, _ in db.function_files()]
    assert order.index("knowledge_text") < order.index("knowledge_retrieve")


async def test_vocabulary__synced_with_its_file_keeping_operators_rows(conn, tmp_path):
    account = await conn.fetchval("INSERT INTO accounts (id, name) VALUES ('acct_v', 'V') RETURNING id")
    await conn.execute(
        "INSERT INTO knowledge_vocabulary (account_id, concept, phrase)"
        " VALUES ($1, 'mfa', 'OTP'), (NULL, 'mfa', 'passkey'), (NULL, 'sso', 'Okta')", account)
    operators = await conn.fetch("SELECT * FROM knowledge_vocabulary WHERE NOT seeded ORDER BY id")
    sql = _sql_copy(tmp_path)
    concepts = tomllib.loads((sql / "vocabulary.toml").read_text())
    concepts["mfa"].remove("OTP")
    concepts["mfa"].append("passkey")  # which an operator has already, for every account
    concepts["wireless"][concepts["wireless"].index("Wi-Fi")] = "WI-FI"  # the same to the unique index
    concepts["quantum"] = ["post-quantum cryptography"]
    (sql / "vocabulary.toml").write_text(
        "".join(f"{concept} = {json.dumps(phrases)}\n" for concept, phrases in concepts.items()))

    await db.migrate(conn, sql)

    seeded = await conn.fetch("SELECT concept, phrase FROM knowledge_vocabulary WHERE seeded")
    listed = db.vocabulary(sql)
    assert sorted(map(tuple, seeded)) == sorted(row for row in listed if row != ("mfa", "passkey"))
    assert ("wireless", "WI-FI") in listed and ("quantum", "post-quantum cryptography") in listed
    assert await conn.fetch("SELECT * FROM knowledge_vocabulary WHERE NOT seeded ORDER BY id") == operators
    await db.migrate(conn)  # back to the file as it is
    seeded = await conn.fetch("SELECT concept, phrase FROM knowledge_vocabulary WHERE seeded")
    assert sorted(map(tuple, seeded)) == sorted(db.vocabulary())


def test_vocabulary__file_rejects_a_phrase_listed_twice(tmp_path):
    sql = _sql_copy(tmp_path)
    (sql / "vocabulary.toml").write_text('mfa = ["MFA", "2FA", "mfa"]\n')
    with pytest.raises(ValueError, match="mfa lists 'mfa' twice"):
        db.vocabulary(sql)


# The sha256 of each migration as it landed. A database that applied one refuses a changed file at
# start (MigrationError); this catches the edit before any database does. A new migration is added
# here once it has landed on main.
LANDED = {
    "0001_foundation": "e2ceb4013eb3c7863b92de53c0d63c2d4d37485dd63e1ff4b67c0392a36fb98e",
    "0002_knowledge": "ed866d84350858326fe6c3793f2af7b0dd9bf85547aa0e9d3c2483b682994ca5",
    "0003_knowledge_search": "75ffa3e99cef7f45fd60233376f52f6ea24a583be06b6b575fc78baf9eebb1d4",
    "0004_questions": "50974d3ca704af07ee06422b9bf06bc0644545e258ce4c2d230a843fc3ad1f55",
    "0005_members": "11bbfab07ccaf88a9b6a5cead006f7a15ebb1e3ee39119dde53e9acbe3db7f9a",
    "0006_rfp_workflow": "f484f4be989962b8f8ebd83728010870e85c0f8db56a2cfd02224d5129904fe6",
    "0011_embeddings": "3db71c858272607774d5a7be9e369810ef54605317274e55fdf56a4965fd4615",
    "0012_search_index": "5b4e7312b91efc79caba106b162028ded5a68bdbac45b2937043dee889e402eb",
    "0013_retrieval_one_statement": "546a7b37ac991176df582d863dc3bcf133591c83eb0d2d7783ca807f22285974",
    "0014_question_handoff": "f65924a54983b3662e5a12ce84d99ca4f5ece6e5517a187e8892a0450b45b632",
    "0015_vocabulary_review": "9599569663b07292973698c32356f60b460a029fbba8a4848062885f2fa2d5bf",
    "0016_retrieval_question_words": "2ec19d933e3d42ad3ec2c2fafea9e54c8e5aa37bcbbc1b65bca77ad46550f37e",
    "0017_vocabulary_annual": "02f90266b5c92524fb053f87fd60c81445c87fc39fa5fbe0e81ecf98b68e938b",
    "0018_vocabulary_geographic": "17a879586039700e1994cbd9dff7c9142e19000251290d9d343f7ee652af81c5",
    "0019_vocabulary_seeded": "f4420db34dc1a0101d877caf094b8ab04411e9ab5e09e1c1fbcd2e2ef116ef96",
    "0020_accounts_hardening": "fcd2a59713bc4bbec6057532109d2f9ae24b5cfee11d80c98528657ff0ee8b20",
    "0021_question_failed_attempts": "6e1d18b5e5a72e266b95db6f32e9b22143f3448c5ed1547bc98a2a9d42b7e1f3",
    "0022_library": "7e724ad7ffff19958ab9edad5fc79c53a1818988b29d0f06879e2e408c64c497",
    "0022_library_drop_trigram": "68303d1101bcad6017aa18bfa4d151a1b67b1208b78ef9ccc01214390ee49366",
    "0023_webhooks_audit": "8dfea0da3e5b482a54247b0592188325c0a7112fdb05c30012cdab31e32e32f8",
    "0024_web_sessions": "8de9416064e146fa3cb90d72c3f18df30a38da7c28540343d6944f2323ed55d2",
    "0025_retrieval_marks": "1563685bb7930bb074703be6bfe1f04e29b9f4e980c1314d1bee6acc9b80381e",
    "0026_webhook_retention": "6a69695ae941452cb3870ec3ec08e694ebac8782b89ba8055de02d0b7579f7ed",
    "0027_question_claim_by_account": "20e415980f840972419f95d7af205464de817f8cb2bd85e4b46874f215bbcd4f",
    "0028_webhook_claim_by_account": "1bd3a260452c523047db4899e1491039233ba659b2ba2f8f7d64aee40ee8ddb4",
    "0029_knowledge_search_trgm": "97a3ef647df77a6035cf3a1798215b67be782e0f4f20a5659dce5f9047513f9c",
    "0030_rfp_items_in_flight": "c37ab3f8eaffc626a5dd77cfe989a76188c2b6bc6fe783358e9e2b9d95f46b99",
    "0031_comments": "2b87a0fdb06e750db94a0c0b3f9a782734e19a6d775fb492da17928cbd646cf4",
    "0032_schema_state": "e4242330a375b46c122bcdc45cc1f48e528e60997c7ae8c79072efb0f1ea5d5c",
    "0033_rfp_item_assignee": "8ae839bc77e2f25e5fc3b3bf270c2831c38cf96e2eea9f85960a647fa0bcae26",
    "0034_mail_kind": "bef0f6b6e0a2a2df36bac9857cf5f53dd3a1f930724bf908ba057573fff682dd",
    "0035_mail_account": "e4e2cb8c0ebbfa9a1fda054f12d049b2951b1769227d8855db79eaae24be7033",
    "0036_uncovered_item_answers": "6dc737f590cf63d4131c844a1c7440e00922a96bcb161596324a9bb752ffdc7f",
    "0037_invitation_revoked_comment": "930b972a4171c8ff4f16c36834611dde15aa61e8ad349ac34f1e2d55d2ba6981",
    "0038_member_web_sessions": "34b7453523f9fae8eef581ccdd4a8652d89b9db3a4aa87f426bf1249d07f1c4d",
    "0039_rfp_items_saved_as": "21ecf1d0067d563b12692f1eaa21a250d614ee93b266ecdff6e793d23a235dd1",
    "0040_member_references": "554d60ac19252b377de21730d8c364e56042cc67630dce9c3d539a7af127f80a",
    "0041_rfp_items_questionnaire_file": "0e5daa748a68aea9d71668b284671d96160b639eb15af1080319a5d361505de2",
    "0042_knowledge_embedding_queue": "2be155d43a53d38148b079c8211a6aa58008861fda1a776c4bb90a77d7d26a3a",
    "0043_duplicate_run_started_comment": "f6406c1e37664049777afe8c37b03835beb2bfd8eab8e8755876141ab16130a3",
    "0044_rfp_items_search_trgm": "3560d79f8aa323a551ca37ad71d5e311d904f8cc8d4efcd09746e1beed1c1e12",
    "0045_import_reports": "262d96cfe751e28609c9bdf4a6e6e3d2524aff23b0647aaebb2bef7573ce88c7",
    "0046_audit_events_write_time": "a64c16e55d83aac78030649e44a8f296ee2343fd536b4ce4038da69c5ae35254",
}


def test_migrations__landed_ones_are_never_edited():
    current = {version: db.checksum(file) for version, file in db.migration_files()}
    assert {version: current.get(version) for version in LANDED} == LANDED


async def test_vocabulary__every_seeded_phrase_parses_to_a_query(conn):
    # A phrase of stop words only ("at the") would match nothing: the file must not hold one.
    assert await conn.fetch(
        "SELECT concept, phrase FROM knowledge_vocabulary WHERE seeded AND numnode(phrase_query) = 0") == []
    seeded = await conn.fetchval("SELECT count(*) FROM knowledge_vocabulary WHERE seeded")
    assert seeded == len(db.vocabulary())


async def test_migrate__a_database_owner_that_is_no_superuser_migrates_again_and_retrieves(
    server_url, empty_database_url
):
    # Managed PostgreSQL: the service's role owns its database but is no superuser, and pgvector
    # was installed by the provider's. `migrate` re-creates the functions; a function carrying
    # an extension's setting (SET hnsw.ef_search) was refused then, so the service did not start.
    role = f"rfp_owner_{new_id('r')[-8:].lower()}"
    admin = await asyncpg.connect(empty_database_url)
    try:
        name = await admin.fetchval("SELECT current_database()")
        if not await admin.fetchval("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"):
            pytest.skip("this server has no pgvector")
        await admin.execute("CREATE EXTENSION vector")
        await admin.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER')
        await admin.execute(f'ALTER DATABASE "{name}" OWNER TO "{role}"')
        await admin.execute(f'ALTER SCHEMA public OWNER TO "{role}"')
    finally:
        await admin.close()
    try:
        for again in (False, True):
            conn = await asyncpg.connect(empty_database_url, user=role)
            try:
                assert not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
                # Again as `migrate` does: the functions re-created although their files are
                # unchanged (a start leaves them be).
                await db.migrate(conn, recreate_functions=again)
            finally:
                await conn.close()
        conn = await asyncpg.connect(empty_database_url, user=role)
        try:
            account = new_id("acc")
            await conn.execute("INSERT INTO accounts (id, name) VALUES ($1, 'A')", account)
            async with conn.transaction():
                await conn.execute("SET LOCAL hnsw.ef_search = 17")
                rows = await conn.fetch(
                    "SELECT * FROM knowledge_retrieve_nearest($1, 'm', $2, 3, 50, 100, '{}',"
                    " '{backup}', '{}')", account, "[1,0,0]")
                # Nothing near (no entries yet), and the caller's setting as it was.
                assert rows == []
                assert await conn.fetchval("SHOW hnsw.ef_search") == "17"
        finally:
            await conn.close()
    finally:
        await _drop_role(server_url, empty_database_url, role)


async def _drop_role(server_url: str, database_url: str, role: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER; DROP OWNED BY "{role}"')
    finally:
        await conn.close()
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP ROLE IF EXISTS "{role}"')
    finally:
        await conn.close()


@pytest.mark.parametrize(("may_create", "migrated_by_owner"), [(False, False), (True, False), (True, True)])
async def test_cli_migrate__a_role_that_may_not_change_the_schema_is_one_line_saying_so(
    server_url, empty_database_url, may_create, migrated_by_owner
):
    """A probe: a role without CREATE on schema public (any non-owner on PostgreSQL 15+), or with
    it but not the database's owner (a migration creates an extension; the owner's tables and
    functions are re-created), ended `serve` and `migrate` in a traceback (InsufficientPrivilegeError)."""
    from cli_runner import cli
    from yarl import URL

    role = f"rfp_user_{new_id('r')[-8:].lower()}"
    admin = await asyncpg.connect(empty_database_url)
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER')
        if migrated_by_owner:
            await db.migrate(admin)
        if may_create:
            await admin.execute(f'GRANT CREATE ON SCHEMA public TO "{role}"')
        await admin.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
    finally:
        await admin.close()
    try:
        result = await asyncio.to_thread(cli, str(URL(empty_database_url).with_user(role)), "migrate")
    finally:
        await _drop_role(server_url, empty_database_url, role)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith(f"error: the database role {role} may not change the schema: ")
    # What it was applying, and how to apply it.
    versions = [version for version, _ in db.migration_files()]
    assert (f"; pending: {len(versions)} migrations, {versions[0]} to {versions[-1]}; " in line
            if not migrated_by_owner else "; `migrate` re-creates the functions of sql/functions/; " in line)
    assert line.endswith("apply it with `python -m service migrate` run as the role that owns the schema "
                         "(its URL in DATABASE_URL), then start this one again (DEPLOYMENT.md, "
                         "\"A separate runtime role\")")


EMBEDDINGS_COMMENTS = """
    SELECT objsubid, description FROM pg_description
     WHERE objoid = 'knowledge_embeddings'::regclass AND classoid = 'pg_class'::regclass ORDER BY 1"""


async def test_migrate__pgvector_installed_after_migration_0011_gets_its_table_at_the_next_start(
    empty_database_url, caplog
):
    """0011 only leaves a notice on a server without pgvector, and is then recorded as applied:
    installing pgvector later changed nothing, and the warning said to re-create the database.
    Every migrate now makes the table once pgvector can be created."""
    await _migrate(empty_database_url)
    conn = await asyncpg.connect(empty_database_url)
    try:
        if not await db.pgvector_available(conn):
            pytest.skip("this server has no pgvector")
        comments = await conn.fetch(EMBEDDINGS_COMMENTS)
        assert len(comments) == 5  # as 0031_comments left them
        # As 0011 leaves a server without pgvector: recorded as applied, no extension, no table.
        await conn.execute("DROP TABLE knowledge_embeddings; DROP EXTENSION vector CASCADE")
        assert not await db.pgvector_available(conn)
        with caplog.at_level("INFO", logger="service.db"):
            assert await db.migrate(conn) == []
        assert await db.pgvector_available(conn)
        assert "pgvector is now installed" in caplog.text
        indexes = await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'knowledge_embeddings'")
        assert {r["indexname"] for r in indexes} == {
            "knowledge_embeddings_pkey", "knowledge_embeddings_account", "knowledge_embeddings_hnsw_384",
        }
        # Commented as 0031 comments the table 0011 made (sql/queries/migrate.sql repeats them).
        assert await conn.fetch(EMBEDDINGS_COMMENTS) == comments
        caplog.clear()
        with caplog.at_level("INFO", logger="service.db"):
            await db.migrate(conn)  # once there, left alone
        assert "pgvector is now installed" not in caplog.text
    finally:
        await conn.close()


async def test_migrate__a_new_database_logs_its_migrations_not_the_vocabulary_sync(
    empty_database_url, caplog
):
    """A probe: a fresh install logged "vocabulary: removed 15 seeded phrase(s)", the sync
    finishing what the seeding migrations began, which puzzled an operator. A later run still
    logs what its sync changes."""
    with caplog.at_level("INFO", logger="service.db"):
        applied = await _migrate(empty_database_url)
    assert applied and "applied migration" in caplog.text
    assert "vocabulary:" not in caplog.text
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute("DELETE FROM knowledge_vocabulary WHERE seeded AND concept = 'backup'")
        caplog.clear()
        with caplog.at_level("INFO", logger="service.db"):
            await db.migrate(conn)
        assert "vocabulary: added" in caplog.text
    finally:
        await conn.close()


async def test_functions__a_start_leaves_current_ones_and_restores_a_missing_one(conn):
    """A start re-creates the functions only when their files changed or one is missing: re-creating
    needs their owner, and a runtime role must be able to start (DEPLOYMENT.md)."""
    made = "SELECT xmin::text FROM pg_proc WHERE proname = 'display_name'"
    before = await conn.fetchval(made)
    assert await conn.fetchval("SELECT checksum FROM schema_state WHERE name = 'functions'") == \
        db.functions_checksum()
    await db.migrate(conn)
    assert await conn.fetchval(made) == before
    await db.migrate(conn, recreate_functions=True)  # as the `migrate` command
    assert await conn.fetchval(made) != before
    await conn.execute("DROP FUNCTION webhook_wanted")
    await db.migrate(conn)
    assert await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname = 'webhook_wanted'") == 1


async def test_functions__a_start_after_an_older_release_re_created_them_restores_these_files(conn):
    """A release from before schema_state (0032) re-creates every function at each start, from its
    own files, and records nothing: during a rolling upgrade such a host restarting after the new
    release's `migrate` put its definitions back. The checksum of the files still matched, so every
    later start of the new release left those definitions in place for good."""
    older = (db.SQL / "functions" / "display_name.sql").read_text().replace(
        "split_part(email, '@', 1)", "'someone'")
    await conn.execute(older)  # the older release's start: its files, schema_state untouched
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "someone"
    await db.migrate(conn)  # the new release's next start
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "ann"


async def test_functions__a_start_during_a_rolling_upgrade_keeps_the_newer_release_s(conn, caplog):
    """A host of this release restarting after a newer release's `migrate` put this release's
    functions back under the newer hosts, and when the newer release had changed a function's
    result type (as 0025 did) it could not start at all: InvalidFunctionDefinitionError
    "cannot change return type of existing function", a traceback."""
    await conn.execute("""
        INSERT INTO schema_migrations (version, checksum) VALUES ('9999_newer', 'x');
        UPDATE schema_state SET checksum = 'newer' WHERE name = 'functions';
        DROP FUNCTION webhook_wanted(text, text);
        CREATE FUNCTION webhook_wanted(p_account text, event_type text) RETURNS integer
            STABLE LANGUAGE sql AS $$ SELECT 1 $$;
        CREATE OR REPLACE FUNCTION display_name(first_name text, last_name text, email text)
            RETURNS text IMMUTABLE LANGUAGE sql AS $$ SELECT 'newer' $$;
        DROP FUNCTION api_token_is_live(timestamptz, timestamptz);
    """)
    with caplog.at_level("WARNING", logger="service.db"):
        assert await db.migrate(conn) == []
    assert "which a newer release migrated: running with that release's; created the missing " \
           "api_token_is_live" in caplog.text
    assert await conn.fetchval("SELECT webhook_wanted('a', 'b')") == 1
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "newer"
    assert await conn.fetchval("SELECT api_token_is_live(NULL, NULL)") is True
    assert await conn.fetchval("SELECT checksum FROM schema_state WHERE name = 'functions'") == "newer"


def _newer_release_s_functions(tmp_path):
    """A copy of sql/ as a later release that changed only a function would hold: display_name
    answers 'newer', the revision of sql/functions.toml one higher, no new migration."""
    sql = _sql_copy(tmp_path)
    file = sql / "functions" / "display_name.sql"
    file.write_text(file.read_text().replace("split_part(email, '@', 1)", "'newer'"))
    (sql / "functions.toml").write_text(f"revision = {db.functions_revision() + 1}\n")
    return sql


async def test_functions__a_start_after_a_newer_release_that_changed_only_a_function_keeps_it(
    conn, tmp_path, caplog
):
    """With no migration to tell it, a host of this release restarting during a rolling upgrade
    put its own functions back under the newer hosts (their files' checksum differs), until one of
    those restarted. The revision `migrate` stores with the functions now tells it."""
    newer = _newer_release_s_functions(tmp_path)
    await db.migrate(conn, newer)  # the newer release's `migrate`
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "newer"
    with caplog.at_level("WARNING", logger="service.db"):
        assert await db.migrate(conn) == []  # a host of this release restarts
    assert "which a newer release migrated: running with that release's" in caplog.text
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "newer"
    assert await conn.fetchval("SELECT checksum FROM schema_state WHERE name = 'functions'") == \
        db.functions_checksum(newer)
    # This release's `migrate` command (a rollback, say) still puts this release's back.
    await db.migrate(conn, recreate_functions=True)
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "ann"
    caplog.clear()
    with caplog.at_level("WARNING", logger="service.db"):
        await db.migrate(conn)
    assert caplog.text == ""


async def test_functions__a_newer_revision_counts_only_with_the_functions_it_was_stored_with(conn, tmp_path):
    """A release from before revisions (a third release in the same rollout) re-creates its own
    functions at a start, recording their checksum and leaving the revision row: the revision
    stored no longer describes the functions there, and this release's start re-creates its own."""
    await db.migrate(conn, _newer_release_s_functions(tmp_path))
    older = (db.SQL / "functions" / "display_name.sql").read_text().replace(
        "split_part(email, '@', 1)", "'older'")
    await conn.execute(older)
    await conn.execute("UPDATE schema_state SET checksum = 'older' WHERE name = 'functions'")
    await db.migrate(conn)
    assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "ann"


# The checksum of sql/functions/ (db.functions_checksum) at each revision of sql/functions.toml.
# A change to a function raises the revision, and its checksum is recorded here: a start of an
# older release keeps the functions of a newer revision (a rolling upgrade), which it cannot tell
# from its own files' checksum alone.
FUNCTION_REVISIONS = {
    1: "ad90b97e41b16fb09a9ef6517385fabd8c2c92b7244c2abba63d1a53d24f6148",
    2: "43100033f61c455307235314be8b99ae30c5016b7a1a39cba47ab88956a98441",
    3: "ef30db3a5f0e9f95f2908624f51de874b8a4ac53575529ec468089c1d2d59b2d",
    4: "b8f64222a72c89493be9f11f2e539fd5d554c9add32cf375a39e6b483018df69",
    5: "2e6b67b8a06d6370bb32a9e49e4d08479051b5f57619ef55da799d14513281c5",
    6: "08f2b06ed3c49cc06a7f28064c7250b46400a8e17d40d355120ce103e826508a",
}


def test_functions__a_change_raises_their_revision():
    revision, current = db.functions_revision(), db.functions_checksum()
    assert revision == max(FUNCTION_REVISIONS), "record the new revision of sql/functions.toml here"
    assert FUNCTION_REVISIONS[revision] == current, (
        f"sql/functions/ changed: raise the revision in sql/functions.toml (once a branch, over the "
        f"last landed) and record its checksum here: {current}")
