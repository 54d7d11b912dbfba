"""Validates every response the test suite receives against the service's OpenAPI description."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator, FormatChecker

from service.web.openapi import document


@cache
def _paths() -> list[tuple[re.Pattern, str]]:
    templates = sorted(document()["paths"], key=lambda p: (p.count("{"), -len(p)))
    return [(re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", t) + "$"), t) for t in templates]


def _validate(schema: dict, body: Any, where: str) -> None:
    root = {**schema, "components": document()["components"]}
    errors = sorted(
        Draft202012Validator(root, format_checker=FormatChecker()).iter_errors(body), key=str
    )
    assert not errors, f"{where}: response does not match the description: {errors[0].message}"


def check_response(
    method: str, path: str, status: int, content_type: str, raw: bytes,
    headers: Mapping[str, str] | None = None,
) -> None:
    where = f"{method} {path} → {status}"
    template = next((t for pattern, t in _paths() if pattern.match(path)), None)
    operation = document()["paths"].get(template, {}).get(method.lower()) if template else None
    if operation is None:
        # Unknown routes and methods; 500 only from routes a test adds to its own app (every
        # registered route is described: test_openapi__describes_every_registered_route).
        assert status in (404, 405, 500), f"{where}: not described in the OpenAPI document"
        _validate({"$ref": "#/components/schemas/Error"}, json.loads(raw), where)
        return
    described = operation["responses"].get(str(status)) or operation["responses"].get("default")
    if described is None and status in (404, 405, 500):
        described = {"content": {"application/json": {"schema": {
            "$ref": "#/components/schemas/Error"}}}}
    assert described is not None, f"{where}: status not described in the OpenAPI document"
    for name, header in described.get("headers", {}).items():
        if headers is not None and header.get("required"):
            assert name in headers, f"{where}: required header {name} missing"
    media = described.get("content", {})
    if content_type == "application/json":
        assert "application/json" in media, f"{where}: JSON not described"
        _validate(media["application/json"]["schema"], json.loads(raw), where)
    elif media:
        assert content_type in media, f"{where}: {content_type} not described"


class ValidatingClient(TestClient):
    async def _request(self, method: str, path: Any, **kwargs: Any) -> ClientResponse:
        response = await super()._request(method, path, **kwargs)
        if response.content_type == "text/event-stream":
            # A stream's body is read by the test as it arrives; reading it here would wait
            # for its end. Its status is still checked.
            check_response(
                method, response.url.path, response.status, response.content_type, b"",
                response.headers,
            )
            return response
        raw = await response.read()  # cached: the test can still read it
        check_response(
            method, response.url.path, response.status, response.content_type, raw, response.headers
        )
        return response
