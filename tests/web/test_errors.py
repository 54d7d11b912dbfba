from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest
from aiohttp import web
from conftest import item_updates_failing

from service.web.app import create_app
from service.web.auth import public, requires
from service.web.frontdoor import guard, no_route


async def test_unknown_route__404_not_found_error_object(client, admin):
    response = await client.get("/api/v1/nothing-here", headers=admin.headers)
    assert response.status == 404
    assert response.headers["Content-Type"].startswith("application/json")
    body = await response.json()
    assert body["error"]["code"] == "not_found"
    assert set(body["error"]) == {"code", "message"}


async def test_unknown_route__404_also_without_a_token(client):
    response = await client.get("/no/such/route")
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/api/v1/rfps/rfp_x", "GET, PATCH"),
        ("GET", "/api/v1/rfps", "POST"),
        ("POST", "/healthz", "GET"),
    ],
)
async def test_wrong_method__405_with_allow_header(client, admin, method, path, allowed):
    response = await client.request(method, path, headers=admin.headers)
    assert response.status == 405
    assert response.headers["Allow"] == allowed
    body = await response.json()
    assert body["error"]["code"] == "method_not_allowed"


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


async def test_wrong_method__allow_names_exactly_the_methods_of_that_path(client):
    """Every route's path, asked with each method it does not declare: 405, the error JSON, and
    Allow listing the methods declared for that very path. /api/v1/rfps/search is the search
    only: an {id} beside it never takes "search" (PATCH there is no update of an RFP "search")."""
    declared: dict[str, set[str]] = {}
    for route in client.app.router.routes():
        if route.handler.__wrapped__ is not no_route:
            declared.setdefault(route.resource.canonical, set()).add(route.method)
    for template, methods in declared.items():
        path = re.sub(r"\{\w+\}", "x1", template)  # an id no literal path segment spells
        allowed = ", ".join(sorted(methods))
        for method in sorted(set(_METHODS) - methods):
            if method == "HEAD":  # past the OpenAPI check, which reads every error's body as JSON
                response = await client.session.request(method, client.make_url(path))
            else:
                response = await client.request(method, path)
            where = f"{method} {path}"
            assert (response.status, response.headers.get("Allow")) == (405, allowed), where
            if method != "HEAD":
                body = await response.json()
                assert body["error"]["code"] == "method_not_allowed", where
                assert body["error"]["message"].endswith(f"allowed: {allowed}"), where


async def test_request_id__generated_when_absent(client):
    response = await client.get("/healthz")
    request_id = response.headers["X-Request-Id"]
    assert len(request_id) == 16
    other = await client.get("/healthz")
    assert other.headers["X-Request-Id"] != request_id


async def test_request_id__client_value_is_echoed_on_success_and_error(client):
    ok = await client.get("/healthz", headers={"X-Request-Id": "trace-123"})
    error = await client.get("/api/v1/rfps/search", headers={"X-Request-Id": "trace-456"})
    assert ok.headers["X-Request-Id"] == "trace-123"
    assert error.status == 401
    assert error.headers["X-Request-Id"] == "trace-456"


async def test_request_id__unsafe_client_value_is_replaced(client):
    response = await client.get("/healthz", headers={"X-Request-Id": "x" * 65})
    assert response.headers["X-Request-Id"] != "x" * 65
    assert len(response.headers["X-Request-Id"]) == 16


class Boom(Exception):
    pass


@public
async def explode(request: web.Request) -> web.Response:
    raise Boom("secret detail: password=hunter2")


@requires("read")
async def explode_authenticated(request: web.Request) -> web.Response:
    raise Boom("secret detail: password=hunter2")


@pytest.fixture
async def failing_client(aiohttp_client, config):
    app = create_app(config)
    # Routes added after the catch-all still match first: aiohttp tries the longest path first.
    app.router.add_get("/boom", guard(explode, None, config))
    app.router.add_get("/api/v1/boom", guard(explode_authenticated, None, config))
    return await aiohttp_client(app)


@pytest.mark.parametrize("path", ["/boom", "/api/v1/boom"])
async def test_unexpected_failure__500_internal_error_without_stack_trace(
    failing_client, admin, caplog, path
):
    with caplog.at_level(logging.ERROR, logger="service.web.errors"):
        response = await failing_client.get(
            path, headers={**admin.headers, "X-Request-Id": "req-500"}
        )
    text = await response.text()
    assert response.status == 500
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["X-Request-Id"] == "req-500"
    assert (await response.json())["error"]["code"] == "internal_error"
    for leak in ("Traceback", "Boom", "hunter2", "explode"):
        assert leak not in text
    # ...but it is logged once, with the request id and the traceback, for the operator.
    (record,) = [r for r in caplog.records if r.name == "service.web.errors"]
    assert "req-500" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is Boom


def test_route_without_access_policy__refuses_to_start(config):
    async def unpoliced(request: web.Request) -> web.Response:
        return web.json_response({"leaked": True})

    with pytest.raises(RuntimeError, match="no access policy"):
        guard(unpoliced, "unpoliced", config)


async def test_route_added_without_the_front_door__refuses_to_start(aiohttp_client, config):
    @public
    async def unguarded(request: web.Request) -> web.Response:
        return web.json_response({"leaked": True})

    app = create_app(config)
    app.router.add_get("/unguarded", unguarded)
    with pytest.raises(RuntimeError, match=r"without service\.web\.frontdoor\.guard"):
        await aiohttp_client(app)


# -- found by fuzzing (tests/fuzz.py): each of these was a 500 -------------------------------


async def test_nul_in_path_or_query__400_parameter_invalid(client, admin):
    for path in ("/api/v1/rfps/search?query=a%00b", "/api/v1/rfps/rfp_%00", "/api/v1/questions/%00"):
        response = await client.get(path, headers=admin.headers)
        assert response.status == 400, path
        assert (await response.json())["error"]["code"] == "parameter_invalid"


@pytest.mark.parametrize("raw", [
    '{"knowledge_base_item": {"answer": "a", "tags": ["x\\u0000y"]}}',
    '{"knowledge_base_item": {"answer": "\\ud800"}}',
    '{"\\udc00": 1, "knowledge_base_item": {"answer": "a"}}',
])
async def test_unstorable_strings_in_json__400_invalid_json(client, admin, raw):
    response = await client.post(
        "/api/v1/knowledge_base_items", data=raw,
        headers={**admin.headers, "Content-Type": "application/json"},
    )
    assert response.status == 400
    assert (await response.json())["error"]["code"] == "invalid_json"


async def test_deeply_nested_json__400_invalid_json(client, admin):
    response = await client.post(
        "/api/v1/rfps", data="[" * 100_000, headers={**admin.headers, "Content-Type": "application/json"}
    )
    assert response.status == 400


@pytest.mark.parametrize("body", ["[null, null]", "true", "1"])
async def test_body_not_an_object__422_not_500(client, body):
    response = await client.post(
        "/api/v1/users/confirmation", data=body, headers={"Content-Type": "application/json"}
    )
    assert response.status == 422


async def test_malformed_multipart__400_invalid_multipart(client, admin):
    for content_type, body in [
        ("multipart/form-data", b""),
        ("multipart/form-data; boundary=b",
         b'--b\r\nContent-Disposition: form-data; name="\xf2\x87\x1a"\r\n\r\nx\r\n--b--\r\n'),
    ]:
        response = await client.post(
            "/api/v1/knowledge_base_items/import", data=body,
            headers={**admin.headers, "Content-Type": content_type},
        )
        assert response.status == 400, content_type
        assert (await response.json())["error"]["code"] == "invalid_multipart"


async def test_malformed_multipart_rfp_items_import__400_invalid_multipart(client, admin):
    created = await client.post("/api/v1/rfps", json={"rfp": {"title": "x"}}, headers=admin.headers)
    rfp_id = (await created.json())["id"]
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import",
        data=b'--b\r\nContent-Disposition: form-data; name="\xf2\x87\x1a"\r\n\r\nx\r\n--b--\r\n',
        headers={**admin.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert response.status == 400
    assert (await response.json())["error"]["code"] == "invalid_multipart"


async def test_multipart_with_many_parts_before_the_file__400_without_reading_them_all(client, admin):
    # A probe: 200,000 tiny parts before the file took 21 s of the event loop, and were accepted.
    from service.web.body import MAX_PARTS_BEFORE_FILE

    def body(fields: int) -> bytes:
        parts = [b'--b\r\nContent-Disposition: form-data; name="x%d"\r\n\r\nv\r\n' % i for i in range(fields)]
        parts.append(b'--b\r\nContent-Disposition: form-data; name="file"; filename="kb.csv"\r\n'
                     b"Content-Type: text/csv\r\n\r\nquestion,answer\r\nQ?,A.\r\n--b--\r\n")
        return b"".join(parts)

    headers = {**admin.headers, "Content-Type": "multipart/form-data; boundary=b"}
    response = await client.post("/api/v1/knowledge_base_items/import", data=body(MAX_PARTS_BEFORE_FILE + 1),
                                 headers=headers)
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["code"] == "invalid_multipart" and "parts before its field file" in error["message"]
    fine = await client.post("/api/v1/knowledge_base_items/import", data=body(MAX_PARTS_BEFORE_FILE),
                             headers=headers)
    assert fine.status == 200, await fine.text()


async def test_lost_database_connection__503_with_retry_after_then_recovered(
    client, conn, admin, make_rfp
):
    """A backend terminated under a request (a database restart, an operator's kill) is 503
    service_unavailable with Retry-After, never 500; the pool then replaces the connection."""
    import asyncio

    rfp_id = await make_rfp(admin, "Acme")
    patch = {"rfp": {"title": "Renamed"}}
    async with conn.transaction():
        # Hold the RFP's row lock so the PATCH waits inside PostgreSQL, then kill its backend.
        await conn.execute("SELECT 1 FROM rfps WHERE id = $1 FOR UPDATE", rfp_id)
        request = asyncio.create_task(
            client.patch(f"/api/v1/rfps/{rfp_id}", json=patch, headers=admin.headers)
        )
        waiting = None
        for _ in range(500):
            waiting = await conn.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if waiting:
                break
            await asyncio.sleep(0.01)
        assert waiting, "the PATCH never waited for the lock"
        await conn.execute("SELECT pg_terminate_backend($1)", waiting)
        response = await request
    assert response.status == 503
    assert (await response.json())["error"]["code"] == "service_unavailable"
    assert response.headers["Retry-After"] == "1"

    again = await client.patch(f"/api/v1/rfps/{rfp_id}", json=patch, headers=admin.headers)
    assert again.status == 200 and (await again.json())["title"] == "Renamed"


def test_database_unavailable__a_connection_closed_under_asyncpg_counts():
    # What a PgBouncer restart looked like in make soak-restart: a 500 before this.
    import asyncpg

    from service.db import database_unavailable

    closed = asyncpg.InterfaceError(
        "cannot call Transaction.__aexit__(): the underlying connection is closed")
    try:
        try:
            raise asyncpg.InternalClientError(
                "cannot switch to state 11; another operation (2) is in progress")
        except asyncpg.InternalClientError:
            raise closed from None
    except asyncpg.InterfaceError as exc:
        assert database_unavailable(exc)
    assert not database_unavailable(
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"))
    # Alone, as a read got it when PgBouncer lost its server between Parse and Bind (soak-restart).
    assert database_unavailable(asyncpg.InternalClientError(
        "cannot switch to state 12; another operation (2) is in progress"))


@pytest.mark.parametrize("depth", [65, 900])
async def test_json_nested_deeper_than_64__400_not_recursion_error(client, admin, depth):
    """Issue 17, finding 10: 900 levels parsed, then walking the value raised RecursionError (500)."""
    raw = '{"rfp": {"title": "x", "context": ' + "[" * depth + "]" * depth + "}}"
    response = await client.post(
        "/api/v1/rfps", data=raw, headers={**admin.headers, "Content-Type": "application/json"}
    )
    assert response.status == 400
    body = await response.json()
    assert body["error"]["code"] == "invalid_json"
    assert "nested more than 64 levels" in body["error"]["message"]


async def test_sign_in_with_a_9_kb_email__422_not_500(client):
    """Issue 17, finding 10: the e-mail became a rate-limit bucket key too long for its index."""
    response = await client.post(
        "/api/v1/tokens", json={"email": "a" * 9000 + "@example.test", "password": "x" * 12}
    )
    assert response.status == 422
    assert "email" in " ".join((await response.json())["error"]["details"])


async def test_body_sent_a_byte_at_a_time__408_within_body_timeout(config, aiohttp_client):
    """Issue 17, finding 6: a body trickled to POST /api/v1/tokens (no token needed) kept the
    connection and its handler for as long as the client liked."""
    import asyncio
    import time

    from conftest import with_config

    client = await aiohttp_client(create_app(with_config(config, server={"body_timeout_seconds": 0.5})))
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(b"POST /api/v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{")
    await writer.drain()
    started = time.monotonic()
    try:
        async with asyncio.timeout(5):
            status_line = await reader.readline()
        assert b" 408 " in status_line, status_line
        assert time.monotonic() - started < 3
        rest = b""
        async with asyncio.timeout(15):  # closed, after aiohttp's lingering read (10 s at most)
            while chunk := await reader.read(65536):
                rest += chunk
        # SECURITY.md: a limit's message names its setting (it said only "within 0.5 s").
        assert b"(server.body_timeout_seconds)" in rest, rest
    finally:
        writer.close()


def test_aiohttp__a_version_whose_multipart_reader_honours_client_max_size():
    """Issue 17, finding 13: aiohttp before 3.14.4 read a base64 multipart part past any limit in
    one read_chunk() (PYSEC-2026-4394); pyproject.toml allowed 3.11."""
    import re
    import tomllib
    from importlib.metadata import version

    from conftest import ROOT

    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(re.match(r"aiohttp>=([\d.]+)", r) for r in requirements if r.startswith("aiohttp"))
    assert floor is not None
    assert tuple(map(int, floor[1].split("."))) >= (3, 14, 4)
    assert tuple(map(int, version("aiohttp").split(".")[:3])) >= (3, 14, 4)


@pytest.mark.parametrize("encoding", [b"", b"Content-Transfer-Encoding: base64\r\n"])
async def test_multipart_part_past_max_upload_bytes__413(config, aiohttp_client, admin, encoding):
    from conftest import with_config

    client = await aiohttp_client(create_app(with_config(config, server={"max_upload_bytes": 10_000})))
    created = await client.post("/api/v1/rfps", json={"rfp": {"title": "x"}}, headers=admin.headers)
    rfp_id = (await created.json())["id"]
    body = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="q.csv"\r\n' + encoding
            + b"\r\n" + b"QUFB" * 50_000 + b"\r\n--b--\r\n")
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=body,
        headers={**admin.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "payload_too_large"


async def exchange_raw(client, raw: bytes) -> bytes:
    """Send `raw` on a connection of its own and read the reply until the service closes it (as
    it does after each of these errors)."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(5):
            return await reader.read()
    finally:
        writer.close()


@pytest.mark.parametrize(("raw", "says"), [
    (b"GET /" + b"A" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "request line or a header is too long"),
    (b"POST /api/v1/rfps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZZ\r\nxx\r\n0\r\n\r\n",
     "chunked body is malformed"),
    (b"POST /api/v1/rfps HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n"
     b"X-Probe: PROBE\r\n\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"),
], ids=["long_request_line", "bad_chunk_size", "length_and_chunked"])
async def test_http_parser_errors__400_in_the_error_shape_logged_in_one_line(client, caplog, raw, says):
    """A probe: aiohttp's own 400s answered text/plain quoting the request, and each logged
    ERROR aiohttp.server with a 15-line traceback (anyone can send them: a log flood)."""
    caplog.set_level(logging.DEBUG)
    head, _, body = (await exchange_raw(client, raw)).partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.[01] 400 ", head), head
    assert b"\r\nContent-Type: application/json" in head
    error = json.loads(body)["error"]
    assert error["code"] == "bad_request"
    assert says in error["message"]
    assert not re.search(rb"AAAA|ZZZZ|PROBE|: chunked", body)  # nothing of the request quoted
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    refused = [r for r in caplog.records if r.name == "service.web.protocol"]
    assert [r.levelname for r in refused] == ["WARNING"]
    assert "\n" not in refused[0].getMessage()


@pytest.mark.parametrize(("sqlstate", "message"), [
    ("40P01", "deadlock detected"),
    ("40001", "could not serialize access due to concurrent update"),
])
async def test_transaction_conflict__the_request_rolled_back_is_503_with_retry_after_then_passes(
    client, conn, admin, make_rfp, caplog, sqlstate, message
):
    """A transaction PostgreSQL rolls back to break a deadlock, or because it cannot be
    serialized, is not the request's fault and passes when sent again: 503 with Retry-After,
    logged as a warning with PostgreSQL's words, not a 500."""
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position)"
                       " VALUES ('item_dl', $1, 'Is data encrypted?', 1)", rfp_id)
    path = f"/api/v1/rfps/{rfp_id}/rfp_items/item_dl"
    draft = {"rfp_item": {"answer": "A draft."}}
    with caplog.at_level(logging.WARNING, logger="service.web.errors"):
        async with item_updates_failing(conn, sqlstate, message):
            response = await client.patch(path, json=draft, headers=admin.headers)
    assert response.status == 503, await response.text()
    assert response.headers["Retry-After"] == "1"
    assert (await response.json())["error"]["code"] == "service_unavailable"
    assert any(message in record.getMessage() for record in caplog.records)
    assert await conn.fetchval("SELECT answer FROM rfp_items WHERE id = 'item_dl'") is None
    again = await client.patch(path, json=draft, headers=admin.headers)
    assert again.status == 200 and (await again.json())["answer"] == "A draft."


@pytest.mark.parametrize("name", ["_handle_request", "handle_error"])
def test_app__an_aiohttp_without_the_private_methods_it_overrides_is_refused_naming_them(
    config, monkeypatch, name
):
    # service/web/protocol.py overrides two private methods of aiohttp's RequestHandler; an
    # aiohttp that renamed them would send every response unwatched and its parser errors its own
    # way, silently.
    from aiohttp import web_protocol

    monkeypatch.delattr(web_protocol.RequestHandler, name)
    with pytest.raises(RuntimeError, match=f"has no {name}"):
        create_app(config)


@pytest.mark.parametrize(("path", "content_type", "signed_in"), [
    ("/api/v1/tokens", "application/json", False),
    ("/api/v1/rfps", "application/json", True),
    ("/api/v1/knowledge_base_items/import", "text/csv", True),
    ("/signin", "application/x-www-form-urlencoded", False),
], ids=["anonymous_json", "json", "upload", "page_form"])
async def test_body_that_is_not_its_content_encoding__400_closed_logged_in_one_line(
    client, admin, caplog, path, content_type, signed_in
):
    """A probe: a body sent as `Content-Encoding: gzip` (or deflate) that is not fails in aiohttp
    as the handler reads it (RequestPayloadError): a 500, logged as two ERRORs with tracebacks
    (the handler's, then aiohttp's lingering read meeting it again), by anyone."""
    caplog.set_level(logging.DEBUG)
    body = b"this is not gzip"
    auth = f"Authorization: Bearer {admin.token}\r\n".encode() if signed_in else b""
    raw = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
           f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n").encode() + auth + b"\r\n" + body
    head, _, text = (await exchange_raw(client, raw)).partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.[01] 400 ", head), head
    if path.startswith("/api/"):
        error = json.loads(text)["error"]
        assert error["code"] == "bad_request"
        assert "does not match its Content-Encoding" in error["message"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


async def test_body_past_its_limit__413_names_the_setting(config, aiohttp_client, admin):
    """A probe: SECURITY.md says each limit's message names its setting; a JSON body past
    server.max_body_bytes, or an anonymous one past server.max_public_body_bytes, was 413 "the
    request body is larger than the service accepts", naming neither."""
    from conftest import with_config

    client = await aiohttp_client(create_app(with_config(
        config, server={"max_body_bytes": 50_000, "max_public_body_bytes": 2_000})))
    signed_in = await client.post("/api/v1/rfps", json={"rfp": {"title": "x" * 60_000}},
                                  headers=admin.headers)
    assert signed_in.status == 413
    message = (await signed_in.json())["error"]["message"]
    assert "server.max_body_bytes" in message and "50000" in message
    anonymous = await client.post("/api/v1/tokens", json={"email": "a@example.com", "password": "x" * 3_000})
    assert anonymous.status == 413
    message = (await anonymous.json())["error"]["message"]
    assert "server.max_public_body_bytes" in message and "2000" in message
