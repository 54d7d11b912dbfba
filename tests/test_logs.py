from __future__ import annotations

import asyncio
import io
import json
import logging

from aiohttp.test_utils import TestServer

from service.app import create_app
from service.config import LoggingConfig
from service.logs import AccessLogger, formatter


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
        "/api/v1/rfps/search?query=x", headers={**admin.headers, "X-Request-Id": "req-42"}
    )
    assert response.status == 200
    await client.get("/api/v1/rfps/search?query=x")  # no token: 401, no member

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
