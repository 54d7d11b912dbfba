"""The operator's audit export goes on from where the last one ended, missing nothing: an event
is stamped with its write's time, and an export takes only the events stamped before every
write still in flight began (writes_settled_before), saying where it ended."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from service.domain import audit
from tests.conftest import CONNECT

EVENT = "INSERT INTO audit_events (account_id, actor_type, action) VALUES ($1, 'operator', $2)"


@pytest.fixture
async def other(database_url):
    """Another session of the service's role: a request or a CLI command writing meanwhile."""
    conn = await asyncpg.connect(database_url, **CONNECT)
    yield conn
    await conn.close()


async def _export(conn, account_id: str, since: datetime) -> tuple[list[str], datetime]:
    events, settled = await audit.export_events(conn, account_id, since)
    return [e["action"] for e in events], settled


async def test_export__an_event_written_after_it_by_a_transaction_begun_before_it_is_the_next_ones(
    conn, other, admin
):
    """Stamped with its transaction's start (now()), such an event fell before the export's end
    yet committed after it: every later export, going on from that end, missed it."""
    await conn.execute(EVENT, admin.account_id, "test.before")
    start = datetime(2000, 1, 1, tzinfo=UTC)
    async with other.transaction():
        await other.execute("SELECT 1")  # begun, nothing written yet: nothing to hold back
        first, settled = await _export(conn, admin.account_id, start)
        await other.execute(EVENT, admin.account_id, "test.late")
    assert first == ["test.before"]
    second, _ = await _export(conn, admin.account_id, settled)
    assert second == ["test.late"]


async def test_export__ends_before_a_transaction_still_writing_and_the_next_takes_its_events(
    conn, other, admin
):
    start = datetime(2000, 1, 1, tzinfo=UTC)
    async with other.transaction():
        await other.execute(EVENT, admin.account_id, "test.in_flight")
        await conn.execute(EVENT, admin.account_id, "test.committed_meanwhile")
        first, settled = await _export(conn, admin.account_id, start)
        in_flight_since = await other.fetchval("SELECT now()")
    assert settled < in_flight_since
    # committed but stamped after the end: the next export's, not this one's and lost
    assert first == []
    second, settled_again = await _export(conn, admin.account_id, settled)
    assert second == ["test.in_flight", "test.committed_meanwhile"]
    third, _ = await _export(conn, admin.account_id, settled_again)
    assert third == []  # nothing twice
