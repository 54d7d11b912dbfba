"""Request bodies: JSON (refused with a clear 400/415 when it is not), objects under a key, and
multipart uploads."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from ..domain.errors import InvalidJson, UnsupportedMediaType, ValidationFailed


async def read_json(request: web.Request) -> Any:
    """The request body as JSON, or a 400/415 saying why it is not."""
    if request.content_type not in ("application/json", "") and not request.content_type.endswith(
        "+json"
    ):
        raise UnsupportedMediaType(
            f"send the body as application/json, not {request.content_type}"
        )
    raw = await request.read()
    if not raw.strip():
        raise InvalidJson("the request body is empty; a JSON object is expected")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidJson(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidJson("the request body is nested too deeply") from None
    if not _storable(body):
        # PostgreSQL text cannot hold NUL, and UTF-8 cannot encode a lone surrogate (\ud800).
        raise InvalidJson(
            "the request body holds a string with a NUL character (\\u0000) or an unpaired "
            "surrogate (\\ud800-\\udfff); neither can be stored"
        )
    return body


def _storable(value: Any) -> bool:
    """Whether every string in a JSON value (keys included) is storable as PostgreSQL text."""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is None
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    if isinstance(value, dict):
        return all(_storable(key) and _storable(item) for key, item in value.items())
    return True


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


async def read_object(request: web.Request, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body's `{key: {...}}` object, and the whole body; 422 when it is not an object."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ValidationFailed([f"the body must be a JSON object with a {key!r} object"])
    inner = body.get(key)
    if not isinstance(inner, dict):
        raise ValidationFailed([f"{key}: is required and must be an object"])
    return inner, body
