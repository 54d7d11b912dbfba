"""The service as a role that may only read and write the tables, on a database whose owner
migrates (DEPLOYMENT.md, "A separate runtime role"): granted exactly what that section says."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from importlib import resources

import asyncpg
import attrs
import pgservers
import pytest
from cli_runner import cli
from conftest import CONNECT, PGBOUNCER_URL, ROOT, with_config
from helpers_questions import add_entry, ask, wait_complete
from service_process import free_port
from yarl import URL

from service import cli as service_cli
from service import db
from service.answering.embeddings import Indexer, prune_other_models
from service.config import EmbeddingsConfig
from service.domain.ids import new_id
from service.web.app import create_app

NEW_MIGRATION = "0032_schema_state"  # the first one the owner's database lacks in these tests
# How the refusal names what is pending from it: one, a few by name, or more as a range.
PENDING_FROM_NEW = rf"; pending: (migrations? |\d+ migrations, ){NEW_MIGRATION}[,; ]"


def documented_grants(owner: str, app: str, database: str) -> list[str]:
    """The statements DEPLOYMENT.md has the owner run, for these names."""
    text = (ROOT / "DEPLOYMENT.md").read_text()
    section = text[text.index("## A separate runtime role"):]
    block = re.findall(r"```sql\n(.*?)```", section, re.S)[1]
    statements = [" ".join(s.split()) for s in block.split(";") if s.strip()]
    assert statements and all(s.startswith(("GRANT ", "ALTER DEFAULT PRIVILEGES ")) for s in statements)
    names = {"rfp_owner": f'"{owner}"', "rfp_app": f'"{app}"', "rfp": f'"{database}"'}
    return [re.sub(r"\b(rfp_owner|rfp_app|rfp)\b", lambda m: names[m[1]], s) for s in statements]


@asynccontextmanager
async def _connected(url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


@attrs.frozen
class Roles:
    owner_url: str  # the owner's, on the database itself
    app_url: str  # the runtime role's, on the database itself


@pytest.fixture
async def roles(server_url: str, empty_database_url: str) -> AsyncIterator[Roles]:
    """A database owned by a role that is no superuser (pgvector created by the server's
    superuser, as managed offerings do), and a runtime role with nothing granted yet."""
    suffix = new_id("r")[-8:].lower()
    owner, app = f"rfp_owner_{suffix}", f"rfp_app_{suffix}"
    async with _connected(empty_database_url) as admin:
        name = await admin.fetchval("SELECT current_database()")
        await admin.execute(f'CREATE ROLE "{owner}" LOGIN NOSUPERUSER; CREATE ROLE "{app}" LOGIN NOSUPERUSER')
        await admin.execute(f'ALTER DATABASE "{name}" OWNER TO "{owner}";'
                            f' ALTER SCHEMA public OWNER TO "{owner}"')
        if await admin.fetchval("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"):
            await admin.execute("CREATE EXTENSION vector")
    url = URL(empty_database_url)
    yield Roles(str(url.with_user(owner)), str(url.with_user(app)))
    async with _connected(empty_database_url) as admin:
        # One statement a transaction (together they trip over the default privileges' rows).
        for statement in (f'DROP OWNED BY "{app}"', f'REASSIGN OWNED BY "{owner}" TO CURRENT_USER',
                          f'DROP OWNED BY "{owner}"'):
            await admin.execute(statement)
    async with _connected(server_url) as admin:
        await admin.execute(f'DROP ROLE IF EXISTS "{app}"; DROP ROLE IF EXISTS "{owner}"')


async def _as(url: str, sql: str | list[str], *args: object) -> object:
    async with _connected(url) as conn:
        if isinstance(sql, list):
            for statement in sql:
                await conn.execute(statement)
            return None
        return await conn.fetchval(sql, *args)


async def _grant(roles: Roles) -> None:
    owner, app, name = URL(roles.owner_url).user, URL(roles.app_url).user, URL(roles.owner_url).path[1:]
    await _as(roles.owner_url, documented_grants(owner, app, name))


@contextmanager
def _app_config(config, roles: Roles) -> Iterator:
    """The tests' configuration on the database as the runtime role; in the PgBouncer pass
    through a pooler of the test's own that runs every request as that role (the pass's shared
    one runs them as postgres), the runtime role itself what takes direct_url."""
    if not PGBOUNCER_URL:
        yield with_config(config, database={"url": roles.app_url})
        return
    app = URL(roles.app_url)
    with pgservers.pooler(app.port, app.user) as bouncer:
        through = URL(bouncer.url(app.path[1:])).with_user(app.user)
        yield with_config(config, database={"url": str(through), "direct_url": roles.app_url})


async def test_runtime_role__refused_a_pending_migration_naming_it_then_serves_once_the_owner_migrated(
    roles, config, aiohttp_client, caplog
):
    # An owner's database of the release before: the grants given, the new migration pending.
    async with asyncio.timeout(60):
        async with _connected(roles.owner_url) as conn:
            await db.migrate(conn, before=NEW_MIGRATION)
    await _grant(roles)
    app = URL(roles.app_url).user
    assert not await _as(roles.app_url, "SELECT has_schema_privilege('public', 'CREATE')")

    # The runtime role may not apply it: one line naming it and saying how.
    for command in (["serve", "--port", str(free_port())], ["housekeeping"]):
        result = await asyncio.to_thread(cli, roles.app_url, *command)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: the database role {app} may not change the schema: "), line
        assert re.search(PENDING_FROM_NEW, line), line
        assert "apply it with `python -m service migrate` run as the role that owns the schema" in line
    assert await _as(roles.owner_url, "SELECT count(*) FROM schema_migrations WHERE version = $1",
                     NEW_MIGRATION) == 0

    # The owner migrates; the runtime role then starts as `serve` does, and serves.
    result = await asyncio.to_thread(cli, roles.owner_url, "migrate")
    assert result.returncode == 0, result.stderr
    assert NEW_MIGRATION in result.stdout
    result = await asyncio.to_thread(cli, roles.app_url, "housekeeping")  # migrates first, then sweeps
    assert result.returncode == 0, result.stderr
    with _app_config(config, roles) as config:
        through = await asyncpg.connect(config.database.url, **CONNECT)  # a pooler in its pass
        try:  # the requests below run as the runtime role, not as a pooler's own server user
            assert await through.fetchval("SELECT current_user") == app
        finally:
            await through.close()
        caplog.set_level(logging.INFO)
        demo = await service_cli.bootstrap_demo(config.database.url, config)
        assert demo is not None  # the first start's demo account, made by the runtime role
        assert await service_cli.bootstrap_demo(config.database.url, config) is None
        headers = {"Authorization": f"Bearer {demo['token']}"}
        client = await aiohttp_client(create_app(config))
        try:
            response = await client.post(
                "/api/v1/knowledge_base_items/import", headers={**headers, "Content-Type": "text/csv"},
                data=b"question,answer\nDo you encrypt customer data at rest?,Yes. Customer data at rest "
                     b"is encrypted with AES-256.\n")
            assert response.status == 200, await response.text()
            response = await client.post("/api/v1/rfps", json={"rfp": {"title": "Acme"}}, headers=headers)
            assert response.status == 201, await response.text()
            rfp_id = (await response.json())["id"]
            response = await client.post(
                f"/api/v1/rfps/{rfp_id}/rfp_items/import", headers={**headers, "Content-Type": "text/csv"},
                data=b"Section,Question\nEncryption,Do you encrypt customer data at rest?\n")
            assert response.status == 201, await response.text()
            response = await client.post(f"/api/v1/rfps/{rfp_id}/answer", headers=headers)
            assert response.status == 202, await response.text()
            response = await ask(client, headers, "Is customer data encrypted at rest?")
            assert response.status == 202, await response.text()
            question = await wait_complete(client, (await response.json())["id"], headers, 30)
            assert "AES-256" in question["answer"]
            async with asyncio.timeout(30):
                while True:
                    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=headers)
                    [item] = (await response.json())["rfp_items"]
                    if item["answer"]:
                        break
                    await asyncio.sleep(0.05)
            response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{item['id']}",
                                          json={"rfp_item": {"state": "approved"}}, headers=headers)
            assert response.status == 200, await response.text()
            response = await client.get(f"/api/v1/rfps/{rfp_id}", headers=headers)
            assert (await response.json())["state"] == "approved"
        finally:
            await client.close()
    assert "permission denied" not in caplog.text and "must be owner" not in caplog.text, caplog.text
    # Nothing owned by the runtime role: it changed no part of the schema.
    assert await _as(roles.owner_url, "SELECT count(*) FROM pg_class WHERE relowner = $1::regrole",
                     app) == 0


async def test_runtime_role__a_changed_function_file_is_pending_until_the_owner_migrates(roles, tmp_path):
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn)
    await _grant(roles)
    sql = tmp_path / "sql"
    shutil.copytree(resources.files("service.sql"), sql)
    file = sql / "functions" / "display_name.sql"
    file.write_text(file.read_text().replace("split_part(email, '@', 1)", "'someone'"))
    async with _connected(roles.app_url) as conn:
        await db.migrate(conn)  # current: nothing to do, and nothing refused
        with pytest.raises(db.MigrationError, match=r"; pending: the functions of sql/functions/, "):
            await db.migrate(conn, sql)
        assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "ann"
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn, sql)
    async with _connected(roles.app_url) as conn:
        await db.migrate(conn, sql)
        assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "someone"


async def test_runtime_role__a_grant_missing_stops_the_start_naming_what_and_the_grant(roles):
    # Missing on a table that starting never touches (the mail sender's), or on all of them (the
    # first read of schema_migrations is refused): either way one line naming what is missing and
    # the GRANT to run, not "may not change the schema" with `migrate` to run (nothing is pending),
    # nor a start whose requests and background rounds then fail with tracebacks.
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn)
    await _grant(roles)
    app = URL(roles.app_url).user
    grant = f"(GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}; …)"
    await _as(roles.owner_url, f'REVOKE ALL ON mail_outbox FROM "{app}"')
    async with _connected(roles.app_url) as conn:
        with pytest.raises(db.MigrationError) as refused:
            await db.migrate(conn)
    assert str(refused.value).startswith(f"the database role {app} lacks rights the service needs in "
                                         "schema public: mail_outbox (SELECT, INSERT, UPDATE, DELETE); ")
    assert grant in str(refused.value)

    await _as(roles.owner_url, f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{app}"')
    result = await asyncio.to_thread(cli, roles.app_url, "housekeeping")
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: the database role {app} lacks rights the service needs in schema "
                           "public: accounts (SELECT, INSERT, UPDATE, DELETE), "), line
    assert re.search(r" and \d+ more; ", line) and grant in line, line

    await _grant(roles)  # as documented: it starts
    async with _connected(roles.app_url) as conn:
        assert await db.migrate(conn) == []


class ThreeDimensions:
    """An embedder whose vectors have a size the migrations made no HNSW index for."""

    def __init__(self, model: str = "three") -> None:
        self.model = model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, float(len(text) % 7), 0.5] for text in texts]


@pytest.mark.pgvector
async def test_runtime_role__indexes_a_new_vector_size_without_its_hnsw_index_saying_so(roles, caplog):
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn)
        account = new_id("acc")
        await conn.execute("INSERT INTO accounts (id, name) VALUES ($1, 'A')", account)
        await add_entry(conn, account, "Is data encrypted at rest?", "Yes, AES-256.")
    await _grant(roles)
    pool = await asyncpg.create_pool(roles.app_url, min_size=1, max_size=2)
    try:
        caplog.set_level(logging.INFO)
        indexer = Indexer(pool, ThreeDimensions(), EmbeddingsConfig(backend="openai"))
        assert await indexer.catch_up() == 1  # stored without the index the role may not make
        [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warning.startswith("no HNSW index for 3-dimension vectors, and this database role may "
                                  "not create one (must be owner of table knowledge_embeddings)")
        statement = warning[warning.index("CREATE INDEX"):]
        await _as(roles.owner_url, statement)  # as the warning says
        caplog.clear()
        # Another process (its indexer new) finds the index: no statement, no warning.
        assert await Indexer(pool, ThreeDimensions("three-b"), EmbeddingsConfig()).catch_up() == 1
        async with pool.acquire() as app:
            assert await prune_other_models(app, "three-b") == (0, 1)  # VACUUM is the owner's
    finally:
        await pool.close()
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith("this database role may not vacuum knowledge_embeddings: ")
    assert await _as(roles.owner_url, "SELECT count(*) FROM knowledge_embeddings") == 1
    if int(await _as(roles.owner_url, "SHOW server_version_num")) < 170000:
        return
    # PostgreSQL 17+: the grant DEPLOYMENT.md names lets the runtime role vacuum after a prune.
    await _as(roles.owner_url, f'GRANT MAINTAIN ON knowledge_embeddings TO "{URL(roles.app_url).user}"')
    vacuums = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'knowledge_embeddings'"
    before = await _as(roles.owner_url, vacuums)
    caplog.clear()
    pool = await asyncpg.create_pool(roles.app_url, min_size=1, max_size=2)
    try:
        assert await Indexer(pool, ThreeDimensions("three-c"), EmbeddingsConfig()).catch_up() == 1
        async with pool.acquire() as app:
            assert await prune_other_models(app, "three-c") == (0, 1)
    finally:
        await pool.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert await _as(roles.owner_url, vacuums) == before + 1


async def test_runtime_role__during_a_rolling_upgrade_an_old_version_runs_with_the_newer_functions(
    roles, caplog
):
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn)
        # As a newer release's `migrate` leaves it: a migration this version does not know, and
        # functions from other files.
        await conn.execute("INSERT INTO schema_migrations (version, checksum) VALUES ('9999_future', 'x');"
                           "UPDATE schema_state SET checksum = 'newer' WHERE name = 'functions'")
    await _grant(roles)
    async with _connected(roles.app_url) as conn:
        with caplog.at_level(logging.WARNING, logger="service.db"):
            assert await db.migrate(conn) == []
    assert "migration 9999_future is applied but unknown to this version" in caplog.text
    assert "the functions of sql/functions/ differ from the database's, which a newer release " \
           "migrated: running with that release's" in caplog.text
    assert await _as(roles.owner_url, "SELECT checksum FROM schema_state WHERE name = 'functions'") == "newer"


async def test_runtime_role__functions_an_older_release_put_back_are_a_warning_until_the_owner_migrates(
    roles, caplog
):
    older = (db.SQL / "functions" / "display_name.sql").read_text().replace(
        "split_part(email, '@', 1)", "'someone'")
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn)
        await conn.execute(older)  # a host of a release from before schema_state started
    await _grant(roles)
    async with _connected(roles.app_url) as conn:
        with caplog.at_level(logging.WARNING, logger="service.db"):
            assert await db.migrate(conn) == []  # starts: its files are those last migrated
        assert "the functions in the database are not those `migrate` last created" in caplog.text
        assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "someone"
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn)  # the owner's start (or `migrate`) puts them right
    caplog.clear()
    async with _connected(roles.app_url) as conn:
        with caplog.at_level(logging.WARNING, logger="service.db"):
            await db.migrate(conn)
        assert caplog.text == ""
        assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "ann"


async def test_runtime_role__a_public_schema_anyone_may_create_in_gets_no_migration_from_it(roles):
    """A database made before PostgreSQL 15 (pg_upgrade keeps its ACLs) lets PUBLIC create in the
    schema public. The runtime role then applied a migration that only creates a table (0032) and
    owned that table, and the owner's `migrate` failed on it (permission denied for schema_state)."""
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn, before=NEW_MIGRATION)
        await conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")  # PostgreSQL 14's default
    await _grant(roles)
    async with _connected(roles.app_url) as conn:
        with pytest.raises(db.MigrationError, match=PENDING_FROM_NEW):
            await db.migrate(conn)
    assert await _as(roles.owner_url, "SELECT to_regclass('schema_state')") is None
    async with _connected(roles.owner_url) as conn:
        assert NEW_MIGRATION in await db.migrate(conn)
    async with _connected(roles.app_url) as conn:
        assert await db.migrate(conn) == []


async def test_runtime_role__a_schema_migrations_from_before_checksums_is_named_with_what_is_pending(roles):
    """A database last migrated by a release from before checksums (0018 and earlier): its
    schema_migrations lacks the checksum column, which only the owner may add. The runtime role
    said "pending: 32 migrations, 0001_foundation to …", although 0001 to 0018 were applied."""
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn, before="0019")
        await conn.execute("ALTER TABLE schema_migrations DROP COLUMN checksum")  # as that runner made it
    await _grant(roles)
    versions = [version for version, _ in db.migration_files() if version >= "0019"]
    async with _connected(roles.app_url) as conn:
        with pytest.raises(db.MigrationError) as refused:
            await db.migrate(conn)
    message = str(refused.value)
    assert f"; pending: the checksum column of schema_migrations, a table from before checksums, and " \
           f"{len(versions)} migrations, {versions[0]} to {versions[-1]}; apply it with " in message
    async with _connected(roles.owner_url) as conn:
        assert await db.migrate(conn) == versions
    async with _connected(roles.app_url) as conn:
        assert await db.migrate(conn) == []


async def test_runtime_role__a_newer_release_that_changed_only_a_function_leaves_an_older_one_starting(
    roles, tmp_path, caplog
):
    """During a rolling upgrade to a release that changed a function and added no migration, a host
    of the older release could not start as the runtime role once the owner had migrated: its files
    differed from the database's, which it may not re-create ("pending: the functions of …")."""
    sql = tmp_path / "sql"
    shutil.copytree(resources.files("service.sql"), sql)
    file = sql / "functions" / "display_name.sql"
    file.write_text(file.read_text().replace("split_part(email, '@', 1)", "'newer'"))
    (sql / "functions.toml").write_text(f"revision = {db.functions_revision() + 1}\n")
    async with _connected(roles.owner_url) as conn:
        await db.migrate(conn, sql)  # the newer release's `migrate`
    await _grant(roles)
    async with _connected(roles.app_url) as conn:
        with caplog.at_level(logging.WARNING, logger="service.db"):
            assert await db.migrate(conn) == []
        assert "which a newer release migrated: running with that release's" in caplog.text
        assert await conn.fetchval("SELECT display_name('', '', 'ann@example.test')") == "newer"
