"""JSON responses. orjson serializes a body in a fifth of the time json.dumps takes, and a read's
whole request is only a few times that (BENCHMARKS.md, HTTP)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

import orjson
from aiohttp import web


def timestamp(value: datetime) -> str:
    """A point in time as the API writes it: ISO 8601 in UTC, with `Z`."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """`value` as JSON. Datetimes as `timestamp` writes them: PostgreSQL's timestamptz arrives
    in UTC, which orjson writes with OPT_UTC_Z exactly so (tests/test_responses.py)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_UTC_Z)
    except TypeError:
        pass
    try:  # not a string key (three times slower, so not the first try)
        return orjson.dumps(value, option=orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS)
    except TypeError:  # what orjson refuses outright (an int beyond 64 bits), json takes
        return json.dumps(value, default=_default).encode()


# For a response that carries a secret shown once (an API token, a webhook endpoint's signing
# secret): no cache, the browser's own included, keeps a copy (OWASP's advice for such responses).
NO_STORE = {"Cache-Control": "no-store"}


def json_response(
    data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """web.json_response's response (same Content-Type), serialized by orjson."""
    return web.Response(
        body=dumps(data), status=status, headers=headers,
        content_type="application/json", charset="utf-8",
    )


def attachment(filename: str) -> str:
    """A Content-Disposition that downloads as `filename`: its letters and digits (any script),
    dots, dashes, underscores and spaces, the rest as "_", at most 150 characters. A name
    beyond ASCII goes as RFC 6266's `filename*` (UTF-8, percent-encoded), with an ASCII
    `filename` beside it for clients that know only that: raw UTF-8 in the header came out as
    "Ã¼" where the customer's file said "ü"."""
    name = "".join(ch if ch.isalnum() or ch in "._- " else "_" for ch in filename)[:150]
    plain = "".join(ch if ch.isascii() else "_" for ch in name)
    if plain == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"
