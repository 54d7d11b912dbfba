"""JSON responses. orjson serializes a body in a fifth of the time json.dumps takes, and a read's
whole request is only a few times that (BENCHMARKS.md, HTTP)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # what orjson refuses outright (an int beyond 64 bits), json takes
        return json.dumps(value).encode()


def json_response(
    data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """web.json_response's response (same Content-Type), serialized by orjson."""
    return web.Response(
        body=dumps(data), status=status, headers=headers,
        content_type="application/json", charset="utf-8",
    )
