from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from yarl import URL

from service import logs
from service.config import LoggingConfig
from service.logs import formatter
from service.web.app import create_app
from service.web.telemetry import AccessLogger


async def test_access_log__json_line_has_request_member_route_status_duration(
    config, admin, aiohttp_client
):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(LoggingConfig(json=True)))
    access = logging.getLogger("test.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False
    server = TestServer(create_app(config))  # TestServer drops its own kwargs; start_server keeps them
    await server.start_server(access_log_class=AccessLogger, access_log=access)
    client = await aiohttp_client(server)
    response = await client.get(
        "/api/v1/rfps/search?query=xyz", headers={**admin.headers, "X-Request-Id": "req-42"}
    )
    assert response.status == 200
    await client.get("/api/v1/rfps/search?query=xyz")  # no token: 401, no member

    for _ in range(100):  # the access line is written just after the response is sent
        if len(stream.getvalue().splitlines()) >= 2:
            break
        await asyncio.sleep(0.01)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["request_id"] == "req-42"
    assert first["member_id"] == admin.member_id
    assert first["route"] == "search_rfps"
    assert first["status"] == 200
    assert isinstance(first["duration_ms"], float) and first["duration_ms"] > 0
    assert first["method"] == "GET" and first["path"] == "/api/v1/rfps/search"
    assert first["level"] == "INFO" and "time" in first and "pid" in first
    assert second["status"] == 401 and second["member_id"] is None
    assert second["request_id"] and second["request_id"] != "req-42"


def set_up_logging(
    monkeypatch, json: bool = True
) -> tuple[io.StringIO, logs.DeferredHandler]:
    """`logs.setup` with JSON (or plain) lines into a string instead of stderr; root's handlers
    and level are restored after the test."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    logs.setup(LoggingConfig(json=json))
    (deferred,) = root.handlers
    return stream, deferred


def test_setup__lines_are_written_by_the_writer_thread_with_extra_fields_and_traceback(monkeypatch):
    """Lines wait for a writer thread; the JSON line still carries the extra fields and the
    traceback, and closing (at exit) writes whatever is still pending."""
    stream, deferred = set_up_logging(monkeypatch)
    assert isinstance(deferred, logs.DeferredHandler)
    log = logging.getLogger("test.queued")
    args = ["mutable"]
    log.info("first %s", args, extra={"request_id": "r-1"})
    args.append("changed after the call")  # the line shows the arguments as they were
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    deferred.close()

    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "first ['mutable']" and first["request_id"] == "r-1"
    assert second["message"] == "failed" and "ValueError: boom" in second["exc_info"]


async def test_access_log__with_setup_goes_straight_to_the_writer_as_the_same_json_line(
    config, admin, aiohttp_client, monkeypatch
):
    """After `setup`, the access line skips Logger.info for the root's DeferredHandler; the line
    is the one the logging path writes (same keys, same message)."""
    stream, deferred = set_up_logging(monkeypatch)
    server = TestServer(create_app(config))
    await server.start_server(access_log_class=AccessLogger)  # aiohttp.access, as in serve
    client = await aiohttp_client(server)
    response = await client.get(
        "/api/v1/rfps/search?query=xyz", headers={**admin.headers, "X-Request-Id": "req-7"}
    )
    assert response.status == 200
    assert [p.access_logger.direct for p in server.runner.server._connections] == [deferred]
    await client.close()
    deferred.close()

    # (The app's own lines, its stop, are left out.)
    (line,) = (json.loads(text) for text in stream.getvalue().splitlines() if "aiohttp.access" in text)
    assert line["logger"] == "aiohttp.access" and line["level"] == "INFO"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", line["time"])  # as formatTime
    assert set(line) == {
        "time", "level", "logger", "message", "request_id", "method", "path", "route", "status",
        "duration_ms", "member_id", "remote", "pid",
    }
    assert line["path"] == "/api/v1/rfps/search" and line["method"] == "GET"
    assert line["request_id"] == "req-7" and line["member_id"] == admin.member_id
    assert line["route"] == "search_rfps" and line["status"] == 200
    assert line["message"].startswith("GET /api/v1/rfps/search?query=xyz 200 ")
    assert line["message"].endswith(f"request_id=req-7 member={admin.member_id}")


@pytest.mark.parametrize("direct", [False, True], ids=["logging", "direct"])
async def test_access_log__percent_encoded_secrets_are_redacted_too(
    config, aiohttp_client, monkeypatch, direct
):
    """Routing decodes escapes, so the redaction must see the decoded path (found in review)."""
    if direct:
        stream, deferred = set_up_logging(monkeypatch)
        access = logging.getLogger("aiohttp.access")
    else:
        stream, deferred = io.StringIO(), None
        access = logging.getLogger("test.access.redact")
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter(LoggingConfig(json=True)))
        monkeypatch.setattr(access, "handlers", [handler])
        monkeypatch.setattr(access, "propagate", False)
        access.setLevel(logging.INFO)
    server = TestServer(create_app(config))
    await server.start_server(access_log_class=AccessLogger, access_log=access)
    client = await aiohttp_client(server)
    for url in (
        "/api/v1/invitation%73/SECRETINVITE",  # routed to get_invitation
        "/api/v1/users/confirmation?%74oken=SECRETCONFIRM",
        "/api/v1/invitations/SECRETPLAIN",
    ):
        await client.get(URL(url, encoded=True))
    # The web app's invitation and reset pages (HTML: past the client's OpenAPI check).
    async with aiohttp.ClientSession() as browser:
        for url in ("/invitations/SECRETPAGE", "/password/reset?token=SECRETRESET"):
            async with browser.get(server.make_url(url)) as page:
                assert page.status == 404
    await client.close()
    if deferred is not None:
        deferred.close()
    for _ in range(100):
        if len(stream.getvalue().splitlines()) >= 5:
            break
        await asyncio.sleep(0.01)
    lines = [line for line in map(json.loads, stream.getvalue().splitlines()) if "route" in line]
    assert len(lines) == 5 and "SECRET" not in stream.getvalue()
    assert [line["route"] for line in lines] == [
        "get_invitation", "confirm_email_link", "get_invitation", "page_invitation", "page_password_reset"]


def test_deferred_handler__writes_within_its_interval_without_closing():
    from service.logs import DeferredHandler

    stream = io.StringIO()
    deferred = DeferredHandler(stream, interval=0.05)
    deferred.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    deferred.start()
    log = logging.getLogger("test.deferred")
    log.addHandler(deferred)
    log.propagate = False
    log.setLevel(logging.INFO)
    try:
        log.warning("now")
        log.info("soon")
        import time

        deadline = time.monotonic() + 5
        while stream.getvalue().count("\n") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.getvalue().splitlines() == ["WARNING now", "INFO soon"]
    finally:
        log.removeHandler(deferred)
        deferred.close()


def test_deferred_handler__bounded_while_stderr_stalls_and_says_how_many_were_dropped():
    """Found in review: a stalled stderr grew the pending lines without limit."""
    stream = io.StringIO()
    deferred = logs.DeferredHandler(stream, max_pending=3)  # not started: the writer is stalled
    deferred.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    for n in range(10):
        deferred.write(f"line {n}")
    assert len(deferred._pending) == 3
    deferred.close()  # writes what waits
    assert stream.getvalue().splitlines() == [
        "line 0", "line 1", "line 2", "WARNING 7 log lines dropped: stderr did not keep up",
    ]


def test_json_line_formatter__standard_keys_extras_and_no_record_internals():
    record = logging.getLogger("x.y").makeRecord(
        "x.y", logging.INFO, "f.py", 1, "hello %s", ("you",), None, extra={"route": "get_rfp",
                                                                          "status": 200})
    line = json.loads(formatter(LoggingConfig(json=True)).format(record))
    assert set(line) == {"time", "level", "logger", "message", "route", "status"}
    assert (line["level"], line["logger"], line["message"]) == ("INFO", "x.y", "hello you")
    assert (line["route"], line["status"]) == ("get_rfp", 200)


def test_deferred_handler__lines_formatted_by_the_writer_in_order_a_failing_one_reported(
    capsys,
):
    stream = io.StringIO()
    deferred = logs.DeferredHandler(stream)  # not started: close() writes what waits
    deferred.write("first")
    deferred.write_later(lambda a, b: f"{a}-{b}", "second", 2)
    deferred.write_later(lambda: 1 / 0)  # a line that cannot be formatted is lost alone...
    deferred.write("third")
    deferred.close()
    assert stream.getvalue().splitlines() == ["first", "second-2", "third"]
    assert "ZeroDivisionError" in capsys.readouterr().err  # ...and said so, as Handler.emit does


async def test_access_log__plain_text_setup_writes_the_line_by_the_writer(
    config, admin, aiohttp_client, monkeypatch
):
    """The default (not JSON) set-up: the access line is a LogRecord formatted by the writer."""
    stream, deferred = set_up_logging(monkeypatch, json=False)
    server = TestServer(create_app(config))
    await server.start_server(access_log_class=AccessLogger)
    client = await aiohttp_client(server)
    response = await client.get(
        "/api/v1/rfps/search?query=xyz", headers={**admin.headers, "X-Request-Id": "req-8"}
    )
    assert response.status == 200
    await client.close()
    deferred.close()
    (line,) = (text for text in stream.getvalue().splitlines() if "aiohttp.access" in text)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO aiohttp\.access: GET /api/v1/rfps/search\?query=xyz "
        rf"200 \d+\.\dms request_id=req-8 member={admin.member_id}",
        line,
    ), line
