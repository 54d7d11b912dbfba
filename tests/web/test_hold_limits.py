"""What one client can hold over time (probe "hold"): pooled connections of one member's parallel
requests. Each test counts what is held (locks waited on, connections) rather than timing it."""

from __future__ import annotations

import asyncio
import os
import socket
from collections import Counter
from types import SimpleNamespace

import pytest
from conftest import with_config

from service.domain.errors import RateLimited
from service.web.app import create_app
from service.web.keys import BODIES, EVENTS, OPEN_STREAMS, SHARES, UPLOADS
from service.web.protocol import _SendWatch
from service.web.ratelimit import held_at_most

# Backends of the service waiting for the table lock the test holds: each holds a pooled connection.
# Of this database only: the test databases are copies of one template, so 'rfps' has the same oid
# in every other test's database.
WAITING_ON_RFPS = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'rfps'::regclass"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


async def until(conn, query: str, at_least: int) -> int:
    async with asyncio.timeout(20):
        while (count := await conn.fetchval(query)) < at_least:  # noqa: ASYNC110 (polls the DB)
            await asyncio.sleep(0.02)
    return count


async def test_held_at_most__counts_what_each_member_holds_and_refuses_past_the_limit():
    """The one count behind max_streams_per_member, max_bodies_per_member and
    max_uploads_per_member: a member's holds up to the limit, 429 past it saying how many they
    hold, and every hold given back however its block ends (an error, a cancelled task)."""
    held: Counter[str] = Counter()
    refusal = "{held} things of this member are held already (a.setting); wait"

    def hold(member: str):
        return held_at_most(held, member, 2, refusal, retry_after=3)

    with hold("m"), hold("m"), hold("other"):
        assert held == {"m": 2, "other": 1}
        with pytest.raises(RateLimited) as refused, hold("m"):
            pass
        assert refused.value.message == "2 things of this member are held already (a.setting); wait"
        assert refused.value.headers == {"Retry-After": "3"}
        assert held == {"m": 2, "other": 1}
    assert held == {}
    with pytest.raises(ValueError), hold("m"):
        raise ValueError
    entered = asyncio.Event()

    async def holding() -> None:
        with hold("m"):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(holding())
    await entered.wait()
    assert held == {"m": 1}
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert held == {}


async def test_pool__one_members_parallel_requests_leave_connections_for_other_accounts(
    config, conn, admin, make_account, make_member, make_rfp, aiohttp_client
):
    """A viewer's parallel slow reads (here: stuck behind a lock; in life, searches running to
    their 250 ms timeout) took every pooled connection, and another account's request waited for
    the pool until 503. Now a member holds at most max_connections_per_member; the rest wait for
    one of theirs, holding none."""
    app = create_app(with_config(config, database={
        "pool_min_size": 1, "pool_max_size": 4, "acquire_timeout_seconds": 3.0,
        "max_connections_per_member": 2,
    }))
    client = await aiohttp_client(app)
    viewer = await make_member(admin.account_id, "viewer", "read")
    other = await make_account("Other")
    rfp_id = await make_rfp(admin, "Held")
    async with conn.transaction():
        await conn.execute("LOCK TABLE rfps IN ACCESS EXCLUSIVE MODE")
        flood = [asyncio.create_task(client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=viewer.headers))
                 for _ in range(8)]
        await until(conn, WAITING_ON_RFPS, 2)
        await asyncio.sleep(0)  # every request of the flood has asked for its connection by now
        response = await client.get("/api/v1/members", headers=other.headers)
        assert response.status == 200
        assert await conn.fetchval(WAITING_ON_RFPS) == 2  # the viewer's share, no more
        assert app[SHARES].held == {viewer.member_id: 2}
    statuses = [response.status for response in await asyncio.gather(*flood)]
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(200) >= 2
    assert app[SHARES].held == {}



async def _stalled_body(host: str, port: int, path: str, sent: bytes, declared: int,
                        headers: str = "") -> bytes:
    """A POST declaring `declared` bytes of JSON that sends `sent` and then nothing: what the
    service answers (an empty string if it waited past the test's own timeout)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {declared}\r\n{headers}\r\n".encode() + sent)
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


async def test_body__an_anonymous_one_is_held_to_max_public_body_bytes(
    config, admin, aiohttp_client
):
    """A body is held in memory as it arrives, for up to body_timeout_seconds. An anonymous
    client stalling bodies a byte short of max_body_bytes (1 MiB) held 1.2 MB of the service per
    connection (3,000: 3.1 GB). Now a body from nobody known is refused (413) once it passes
    max_public_body_bytes, without waiting for the rest; a token holder's may still be larger."""
    client = await aiohttp_client(create_app(with_config(config, server={
        "max_public_body_bytes": 16_384, "body_timeout_seconds": 60.0,
    })))
    host, port = client.server.host, client.server.port
    sent = b'{"email": "' + b"a" * 20_000
    async with asyncio.timeout(20):  # before: 408 only after the 60 s body timeout
        status = await _stalled_body(host, port, "/api/v1/tokens", sent, 1_048_000)
    assert status == b"HTTP/1.1 413 Request Entity Too Large\r\n"
    # Whole ones: a public route's body past the limit is 413; a token holder's is not.
    big = {"email": "a@example.test", "password": "x" * 20_000}
    assert (await client.post("/api/v1/tokens", json=big)).status == 413
    assert (await client.post("/api/v1/tokens", json={**big, "password": "x" * 100})).status == 401
    created = await client.post("/api/v1/rfps", headers=admin.headers, json={
        "rfp": {"title": "Large", "context": "c" * 40_000}})
    assert created.status == 201


async def _stalled_upload(host: str, port: int, path: str, token: str) -> asyncio.StreamWriter:
    """An upload declaring 40 MB that sends its first rows and then nothing."""
    _, writer = await asyncio.open_connection(host, port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                 "Content-Type: text/csv\r\nContent-Length: 40000000\r\n\r\n".encode()
                 + b"question\n" + b"Is data encrypted at rest?\n" * 1000)
    await writer.drain()
    return writer


async def test_uploads__a_member_sends_at_most_max_uploads_per_member_at_once(
    config, admin, make_member, make_rfp, aiohttp_client
):
    """Each upload holds its spooled file (memory up to 4 MiB, then disk) while it arrives, for
    up to upload_timeout_seconds: one member's 300 uploads stalled after 4 MB held 1.4 GB of the
    service. Now a member's uploads past max_uploads_per_member are 429 before any byte is read;
    another member's are not, and a stalled one counts no more once its client has gone."""
    app = create_app(with_config(config, uploads={"max_uploads_per_member": 2}))
    client = await aiohttp_client(app)
    rfp_id = await make_rfp(admin, "Uploads")
    colleague = await make_member(admin.account_id, "member")
    host, port = client.server.host, client.server.port
    path = f"/api/v1/rfps/{rfp_id}/rfp_items/import"
    csv = {"data": b"question\nIs data encrypted?\n"}
    stalled = [await _stalled_upload(host, port, path, admin.token) for _ in range(2)]
    try:
        async with asyncio.timeout(20):
            while app[UPLOADS][admin.member_id] < 2:  # noqa: ASYNC110 (polls the service)
                await asyncio.sleep(0.02)
        headers = {**admin.headers, "Content-Type": "text/csv"}
        refused = await client.post(path, headers=headers, **csv)
        assert refused.status == 429
        assert refused.headers["Retry-After"] == "5"
        kb = await client.post("/api/v1/knowledge_base_items/import", headers=headers, **csv)
        assert kb.status == 429
        other = await client.post(path, headers={**colleague.headers, "Content-Type": "text/csv"}, **csv)
        assert other.status == 201
    finally:
        for writer in stalled:
            writer.close()
    async with asyncio.timeout(20):
        while app[UPLOADS]:  # noqa: ASYNC110 (polls the service)
            await asyncio.sleep(0.02)
    assert (await client.post(path, headers=headers, **csv)).status == 201


async def test_body__a_member_receives_at_most_max_bodies_per_member_at_once(
    config, admin, make_member, aiohttp_client
):
    """A JSON body is held in memory as it arrives, until body_timeout_seconds: a viewer's 2,000
    bodies stalled a byte short of max_body_bytes held 2.5 GB of the service. Now a member's
    requests past max_bodies_per_member bodies arriving at once are 429 before reading."""
    app = create_app(with_config(config, server={"max_bodies_per_member": 2}))
    client = await aiohttp_client(app)
    viewer = await make_member(admin.account_id, "viewer", "read,write")
    host, port = client.server.host, client.server.port
    auth = f"Authorization: Bearer {viewer.token}\r\n"
    stalled = [asyncio.create_task(_stalled_body(host, port, "/api/v1/users/password",
                                                 b'{"current_password": "', 1_000_000, auth))
               for _ in range(2)]
    try:
        async with asyncio.timeout(20):
            while app[BODIES][viewer.member_id] < 2:  # noqa: ASYNC110 (polls the service)
                await asyncio.sleep(0.02)
        refused = await client.post("/api/v1/users/password", headers=viewer.headers,
                                    json={"current_password": "x", "new_password": "y"})
        assert refused.status == 429
        created = await client.post("/api/v1/rfps", headers=admin.headers, json={"rfp": {"title": "t"}})
        assert created.status == 201
    finally:
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
    async with asyncio.timeout(20):
        while app[BODIES]:  # noqa: ASYNC110 (polls the service)
            await asyncio.sleep(0.02)


async def _large_rfp(conn, make_rfp, admin) -> str:
    """An RFP of 20 items of ~570 KB answers: its item list and its export are ~11 MB, more than
    loopback's socket buffers take."""
    rfp_id = await make_rfp(admin, "Large")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, answer, position)"
        " SELECT 'item_' || n, $1, 'Is data encrypted at rest?', repeat('Yes, with AES-256. ', 30000), n"
        "   FROM generate_series(1, 20) AS n", rfp_id,
    )
    return rfp_id


async def test_response__a_client_that_takes_none_of_it_is_dropped(
    config, conn, admin, make_member, make_rfp, aiohttp_client
):
    """aiohttp waits on a client that reads nothing for as long as it stays connected, holding
    the response: a viewer's 300 unread item lists of 6 MB grew the service by 1.9 GB (and
    1.2 GB in its sockets' send queues) for as long as the client kept them. Now such a
    connection is dropped after send_timeout_seconds without progress. (The list here is
    ~11 MB, more than loopback's socket buffers take.)"""
    app = create_app(with_config(config, server={"send_timeout_seconds": 0.5}))
    client = await aiohttp_client(app)
    viewer = await make_member(admin.account_id, "viewer", "read")
    rfp_id = await _large_rfp(conn, make_rfp, admin)
    server = client.server.runner.server
    reader, writer = await _reading_nothing(client, f"/api/v1/rfps/{rfp_id}/rfp_items", viewer.token)
    try:
        assert await reader.readline() == b"HTTP/1.1 200 OK\r\n"  # then nothing more is read
        async with asyncio.timeout(20):  # before: the connection stayed, the response waiting
            while server.connections:  # noqa: ASYNC110 (polls the service)
                await asyncio.sleep(0.05)
    finally:
        writer.close()


class _Transport:
    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.waiting

    def abort(self) -> None:
        self.aborted = True


async def test_send_watch__counts_what_the_client_took_not_what_waits():
    """A handler writing its own response (an export, a stream) refills the transport as the
    client takes from it: for a slow reader the bytes waiting stay level from one look to the
    next, and the watch must not drop it for that. It drops one whose client took nothing
    since its last look."""
    transport = _Transport(waiting=65_536)
    writer = SimpleNamespace(output_size=100_000)
    handler = SimpleNamespace(_loop=asyncio.get_running_loop(), transport=transport, peername=None)
    watch = _SendWatch(handler, SimpleNamespace(writer=writer), 1000.0)  # looked at by hand here
    try:
        for _ in range(3):
            writer.output_size += 65_536  # the client took 64 KiB and the handler wrote 64 KiB more
            watch._look()
            assert not transport.aborted
        watch._look()  # nothing taken since
        assert transport.aborted
    finally:
        watch.handle.cancel()


async def test_send_watch__a_response_s_watch_ends_when_the_next_request_s_begins():
    """A response whose last bytes still waited when aiohttp was done with it is looked after
    until they go; its client read them and asked for the next on the connection, whose bytes
    then waited in the same transport: the first watch counted those as its own, none of them
    gone, and dropped a connection whose client was reading."""
    transport = _Transport(waiting=10_000)
    handler = SimpleNamespace(_loop=asyncio.get_running_loop(), transport=transport, peername=None)
    first = SimpleNamespace(output_size=0)
    watch = _SendWatch(handler, SimpleNamespace(writer=first), 1000.0)  # looked at by hand here
    first.output_size = 200_000  # the whole response written, its last 10,000 bytes waiting
    watch.sent()
    second = SimpleNamespace(output_size=0)
    transport.waiting = 0  # the client took them, then asked for the next response
    following = _SendWatch(handler, SimpleNamespace(writer=second), 1000.0)
    try:
        for _ in range(3):  # a slow reader of the next response: some taken at every look
            second.output_size += 100_000
            transport.waiting = 65_536
            watch._look()
            following._look()
            assert not transport.aborted
    finally:
        watch.handle.cancel()
        following.handle.cancel()


async def _reading_nothing(
    client, path: str, token: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw connection with a small receive window (4 KiB) asking for `path`: the test reads
    what it wants of the response and then nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    sock.connect((client.server.host, client.server.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    return reader, writer


def _deleted_files_held() -> int:
    """Files this process holds open that have no name any more: spooled exports past 4 MiB."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            held += os.readlink(f"/proc/self/fd/{fd}").endswith(" (deleted)")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return held


async def test_export__a_client_that_takes_none_of_it_is_dropped_and_its_file_closed(
    config, conn, admin, make_member, make_rfp, aiohttp_client
):
    """An export is spooled (memory up to 4 MiB, then a temporary file) and written by its own
    handler, which the send watch did not see (it began once a handler had returned): a client
    reading nothing kept the export's file and its connection for good (a viewer's 100 unread
    exports of 3.6 MB: 0.36 GB of the service). Now it is dropped after send_timeout_seconds
    without progress, and its handler ends (the file closed). (The export here is ~11 MB, more
    than loopback's socket buffers take, so it is a file.)"""
    app = create_app(with_config(config, server={"send_timeout_seconds": 0.5}))
    client = await aiohttp_client(app)  # handler_cancellation, as `serve` runs it
    viewer = await make_member(admin.account_id, "viewer", "read")
    rfp_id = await _large_rfp(conn, make_rfp, admin)
    connections = client.server.runner.server.connections
    files = _deleted_files_held()
    reader, writer = await _reading_nothing(client, f"/api/v1/rfps/{rfp_id}/export?format=csv", viewer.token)
    try:
        assert await reader.readline() == b"HTTP/1.1 200 OK\r\n"  # then nothing more is read
        assert _deleted_files_held() == files + 1  # the spooled export, sent from while it waits
        async with asyncio.timeout(20):  # before: the connection and the file stayed, for good
            while connections or _deleted_files_held() > files:  # noqa: ASYNC110 (polls the service)
                await asyncio.sleep(0.05)
    finally:
        writer.close()


async def test_event_stream__a_client_that_takes_none_of_it_is_dropped_and_gives_its_place_back(
    config, admin, aiohttp_client
):
    """An event stream is written by its own handler, which the send watch did not see: once
    its events outgrew what the sockets' buffers take (here one question of 6.75 MB; a question is
    at most max_question_chars, 10,000 by default), a client reading nothing held the stream's
    task, its place among the member's max_streams_per_member and its subscription to the
    question's changes for good, its lifetime passed unnoticed (the handler waited to send).
    Now it is dropped after send_timeout_seconds without progress, and gives them back."""
    app = create_app(with_config(
        config, server={"send_timeout_seconds": 0.5, "stream_lifetime_seconds": 1.0,
                        "max_body_bytes": 16_000_000, "shutdown_timeout": 0.5},
        questions={"max_question_chars": 8_000_000, "step_delay_seconds": 60.0},
    ))
    client = await aiohttp_client(app)  # handler_cancellation, as `serve` runs it
    asked = await client.post("/api/v1/questions", headers=admin.headers, json={
        "question": {"question": "Is data encrypted at rest? " * 250_000}})
    assert asked.status == 202
    question_id = (await asked.json())["id"]
    connections = client.server.runner.server.connections
    others = len(connections)  # the client's own, kept alive
    reader, writer = await _reading_nothing(client, f"/api/v1/questions/{question_id}/events", admin.token)
    try:
        assert await reader.readline() == b"HTTP/1.1 200 OK\r\n"  # then nothing more is read
        assert app[OPEN_STREAMS] == {admin.member_id: 1}
        assert question_id in app[EVENTS]._streams  # the stream's subscription
        async with asyncio.timeout(20):  # before: all three stayed, for good
            while len(connections) > others or app[OPEN_STREAMS] or app[EVENTS]._streams:  # noqa: ASYNC110 (polls the service)
                await asyncio.sleep(0.05)
    finally:
        writer.close()
