"""Test harness: a real PostgreSQL (embedded, or $DATABASE_URL), one database per test as fresh
as a new one.

A template database is migrated once per session; a test gets the database a finished test of the
same worker left, emptied back to the template's rows, or else `CREATE DATABASE … TEMPLATE`
(tests/spare_databases.py says when a used one is given again, and why).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import attrs
import pytest
import spare_databases
from aiohttp.test_utils import TestClient

from service import config as config_module
from service import db
from service.config import Config
from service.domain import accounts
from service.domain.ids import new_id
from service.web.app import create_app

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """An admin URL of the PostgreSQL server the tests use."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    server = db.EmbeddedPostgres(ROOT / "var" / "test")
    # The tests' own server keeps nothing worth a flush to disk per commit (as tests/pgservers.py
    # starts Debian's): without this, commits wait on the disk.
    for sql in ("ALTER SYSTEM SET fsync = off", "ALTER SYSTEM SET full_page_writes = off",
                "ALTER SYSTEM SET synchronous_commit = off", "SELECT pg_reload_conf()"):
        asyncio.run(_admin(server.url(), sql))
    yield server.url()
    server.stop()


async def _admin(server_url: str, sql: str) -> None:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = f"rfp_template_{os.getpid()}"

    async def build() -> None:
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}"')
        await _admin(server_url, f'CREATE DATABASE "{name}"')
        await db.migrate_url(db.with_database(server_url, name))
        conn = await asyncpg.connect(db.with_database(server_url, name))
        try:
            await spare_databases.settle(conn)
        finally:
            await conn.close()

    asyncio.run(build())
    yield name

    async def drop_all() -> None:
        for spare in _SPARES:
            await _admin(server_url, f'DROP DATABASE IF EXISTS "{spare}" WITH (FORCE)')
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    asyncio.run(drop_all())


@pytest.fixture(scope="session")
def template_state(server_url: str, template_db: str) -> spare_databases.Template:
    async def read() -> spare_databases.Template:
        conn = await asyncpg.connect(db.with_database(server_url, template_db))
        try:
            return await spare_databases.describe(conn)
        finally:
            await conn.close()

    return asyncio.run(read())


@pytest.fixture(scope="session")
def pgvector_on_server(server_url: str, template_db: str) -> bool:
    """Whether the test server has pgvector (the migrated template has the embeddings table)."""

    async def check() -> bool:
        conn = await asyncpg.connect(db.with_database(server_url, template_db))
        try:
            return await db.pgvector_available(conn)
        finally:
            await conn.close()

    return asyncio.run(check())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests (service processes, the fuzzer, the browser: up to a minute each) first, in
    their order: pytest-xdist hands tests out in this order, so the long ones start while short
    ones are left to fill the workers' ends, rather than one worker running the fuzzer alone
    after the others finished."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _skip_without_pgvector(request: pytest.FixtureRequest) -> None:
    """Tests marked `pgvector` skip, saying why, on a server without the extension (Debian's
    PostgreSQL packages do not ship it); the service itself runs lexical-only there."""
    if request.node.get_closest_marker("pgvector") and not request.getfixturevalue("pgvector_on_server"):
        pytest.skip("pgvector is not installed on this PostgreSQL server: dense retrieval is off")


# Set by `make test-pgbouncer` (tests/pgservers.py): PgBouncer in transaction mode in front of
# the $DATABASE_URL server. The tests' databases are then reached through it, the app configured
# as in production (database.pooler, direct_url for LISTEN), `conn` without a statement cache.
PGBOUNCER_URL = os.environ.get("PGBOUNCER_URL", "")
# asyncpg.connect options for `database_url` (statement cache off behind a transaction pooler).
CONNECT = {"statement_cache_size": 0} if PGBOUNCER_URL else {}


# This worker's databases that finished tests left as fresh as a copy of the template.
_SPARES: list[str] = []


@pytest.fixture
async def direct_database_url(
    server_url: str, template_db: str, template_state: spare_databases.Template,
) -> AsyncIterator[str]:
    """A migrated database as fresh as a new one, on the server itself (never through a pooler)."""
    if _SPARES:
        name = _SPARES.pop()
    else:
        name = f"rfp_test_{secrets.token_hex(6)}"
        await _admin(server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    url = db.with_database(server_url, name)
    yield url
    if await _reset(url, template_state):
        _SPARES.append(name)
    else:
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _reset(url: str, template: spare_databases.Template) -> bool:
    try:
        conn = await asyncpg.connect(url)
    except (OSError, asyncpg.PostgresError):  # e.g. a test that dropped or renamed it
        return False
    try:
        return await spare_databases.reset(conn, template)
    except asyncpg.PostgresError:  # a lock not given up in time: a fresh one is the safe choice
        return False
    finally:
        await conn.close()


@pytest.fixture
def database_url(direct_database_url: str) -> str:
    """The test's database as the service reaches it: through PgBouncer in the PgBouncer pass."""
    if PGBOUNCER_URL:
        from yarl import URL

        return db.with_database(PGBOUNCER_URL, URL(direct_database_url).path.lstrip("/"))
    return direct_database_url


@pytest.fixture
def config(database_url: str, direct_database_url: str) -> Config:
    pooler = {"pooler": "pgbouncer-transaction", "direct_url": direct_database_url} if PGBOUNCER_URL else {}
    return config_module.structure(
        {
            "database": {"url": database_url, "pool_min_size": 1, "pool_max_size": 5, **pooler},
            "server": {"web_base_url": "https://app.example.test"},
            # Lexical only, for speed: the onnx default has tests of its own
            # (tests/answering/test_embeddings_onnx.py).
            "embeddings": {"backend": "none"},
            # No sweep at a random moment of a test (tests/domain/test_housekeeping.py runs it).
            "housekeeping": {"every_seconds": 0},
        }
    )


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url, **CONNECT)
    yield connection
    await connection.close()


@pytest.fixture
def aiohttp_client(database_url: str, aiohttp_client: Any) -> Any:
    """pytest-aiohttp's fixture, set up after (so torn down before) the test's database: an
    app's background work, e.g. the question pipeline, must not see its database dropped."""
    return aiohttp_client


@pytest.fixture
async def client(aiohttp_client: Any, config: Config) -> TestClient:
    return await aiohttp_client(create_app(config))


@attrs.frozen
class Actor:
    """A member with a token, as tests use them."""

    account_id: str
    member_id: str
    user_id: int
    email: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def make_account(conn: asyncpg.Connection) -> Any:
    """`await make_account(credits=…)` → the admin Actor of a new account."""

    async def make(name: str = "Acme", credits: int = 10, email: str | None = None) -> Actor:
        email = email or f"admin-{secrets.token_hex(4)}@example.test"
        made = await accounts.create_account(conn, name, email, credits)
        return Actor(
            account_id=made["account"]["id"],
            member_id=made["member"]["id"],
            user_id=made["member"]["user_id"],
            email=email,
            token=made["token"],
        )

    return make


@pytest.fixture
def make_member(conn: asyncpg.Connection) -> Any:
    """`await make_member(account_id, role, scopes)` → an Actor with that role and token scopes."""

    async def make(account_id: str, role: str = "member", scopes: str = "read,write") -> Actor:
        email = f"{role}-{secrets.token_hex(4)}@example.test"
        member = await accounts.add_member(conn, account_id, email, role)
        token = await accounts.create_token(conn, account_id, email, scopes.split(","))
        return Actor(
            account_id=account_id,
            member_id=member["id"],
            user_id=member["user_id"],
            email=email,
            token=token,
        )

    return make


@pytest.fixture
async def admin(make_account: Any) -> Actor:
    return await make_account()


def with_config(config: Config, **sections: dict[str, Any]) -> Config:
    """A copy of `config` with some settings changed, e.g. with_config(c, server={...})."""
    raw = config_module._converter.unstructure(config)
    for section, values in sections.items():
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
    return config_module.structure(raw)


# -- mail: a real SMTP server on loopback (members' tests) ---------------------------------


class SmtpSink:
    """An aiosmtpd server on 127.0.0.1 that keeps every message it accepts."""

    def __init__(self, port: int | None = None, delay_seconds: float = 0.0) -> None:
        self.port = port or free_port()
        self.messages: list[Any] = []
        self._controller: Any = None
        # A slow server: each message is accepted this long after it arrived. `peak` is the most
        # messages it was receiving at once.
        self.delay_seconds = delay_seconds
        self.receiving = self.peak = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        import email
        import email.policy

        self.receiving += 1
        self.peak = max(self.peak, self.receiving)
        try:
            await asyncio.sleep(self.delay_seconds)
        finally:
            self.receiving -= 1
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"

    def start(self) -> None:
        from aiosmtpd.controller import Controller

        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    async def wait_for(self, count: int, within_seconds: float = 10.0) -> list[Any]:
        """The first `count` messages, once that many have arrived."""
        async with asyncio.timeout(within_seconds):
            # Polling: the server runs in its own thread and event loop.
            while len(self.messages) < count:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        return self.messages[:count]


async def lock_waiters(conn: asyncpg.Connection, count: int) -> None:
    """Until `count` backends of this database wait on a lock (a test that makes two
    transactions cross holds one and lets the others queue behind it); at most 10 s."""
    async with asyncio.timeout(10):
        while await conn.fetchval(  # noqa: ASYNC110
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()") < count:
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def item_updates_failing(conn: asyncpg.Connection, sqlstate: str, message: str) -> AsyncIterator[None]:
    """While inside, PostgreSQL fails every update of an RFP item of this test's database with
    this SQLSTATE, as it does the transaction it picks to break a deadlock (40P01) or one that
    cannot be serialized (40001). A real deadlock's victim depends on which waiter's
    deadlock_timeout fires first, which a loaded machine decides (seen in CI)."""
    await conn.execute(f"""
        CREATE FUNCTION fail_item_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{sqlstate}'; END $$;
        CREATE TRIGGER fail_item_update BEFORE UPDATE ON rfp_items
            FOR EACH ROW EXECUTE FUNCTION fail_item_update();""")
    try:
        yield
    finally:
        await conn.execute("DROP TRIGGER fail_item_update ON rfp_items; DROP FUNCTION fail_item_update();")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mail_settings(port: int) -> dict[str, Any]:
    """Settings for delivering to an SmtpSink quickly: no TLS, fast polling and retries."""
    return {
        "smtp_host": "127.0.0.1", "smtp_port": port, "security": "none",
        "poll_interval_seconds": 0.05, "retry_base_seconds": 0.1, "timeout_seconds": 2.0,
    }


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    sink.start()
    yield sink
    sink.stop()


@pytest.fixture
async def mail_client(aiohttp_client: Any, config: Config, smtp: SmtpSink) -> TestClient:
    """A client whose app delivers mail to the `smtp` sink."""
    return await aiohttp_client(create_app(with_config(config, mail=mail_settings(smtp.port))))


@pytest.fixture
async def empty_database_url(server_url: str) -> AsyncIterator[str]:
    """A new database with nothing in it, not even the migrations."""
    name = f"rfp_empty_{secrets.token_hex(6)}"
    await _admin(server_url, f'CREATE DATABASE "{name}"')
    yield db.with_database(server_url, name)
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def make_rfp(conn: asyncpg.Connection) -> Any:
    """`await make_rfp(actor, title, description=…, created_at=…)` → the id of an RFP stored directly."""

    async def make(
        owner: Actor, title: str = "An RFP", description: str | None = None, created_at: Any = None
    ) -> str:
        rfp_id = new_id("rfp")
        await conn.execute(
            "INSERT INTO rfps (id, account_id, owner_id, title, description, created_at)"
            " VALUES ($1, $2, $3, $4, $5, coalesce($6, now()))",
            rfp_id, owner.account_id, owner.user_id, title, description, created_at,
        )
        return rfp_id

    return make


@pytest.fixture
def aiohttp_client_cls() -> type[TestClient]:
    """Every test client checks each response against the OpenAPI description."""
    from openapi_check import ValidatingClient

    return ValidatingClient


@pytest.fixture
async def receiver() -> AsyncIterator[Any]:
    """A Standard Webhooks receiver on a free loopback port (tests/webhook_receiver.py)."""
    from webhook_receiver import Receiver

    server = Receiver(free_port())
    await server.start()
    yield server
    await server.stop()

