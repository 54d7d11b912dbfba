"""Request bodies: JSON (refused with a clear 400/415 when it is not), objects under a key, and
uploaded files (a raw body or a multipart field `file`)."""

from __future__ import annotations

import json
import re
import tempfile
from typing import IO, Any

import attrs
from aiohttp import BodyPartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from ..domain.errors import (
    InvalidJson,
    InvalidMultipart,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
)


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


# An upload stays in memory up to this size and spills to a temporary file past it.
_SPOOL_IN_MEMORY = 4 * 1024 * 1024
_CHUNK = 64 * 1024


@attrs.frozen
class Upload:
    file: IO[bytes]
    media_type: str | None
    filename: str | None



async def receive_upload(request: web.Request, limit: int) -> Upload:
    """The uploaded file, raw body or multipart field `file`, spooled; 413 past `limit` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the file is larger than the {limit} bytes an import accepts")
    spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
    size = 0

    def keep(chunk: bytes) -> None:
        nonlocal size
        size += len(chunk)
        if size > limit:
            spool.close()
            raise PayloadTooLarge(f"the file is larger than the {limit} bytes an import accepts")
        spool.write(chunk)

    if request.content_type.startswith("multipart/"):
        try:
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                if isinstance(part, BodyPartReader) and part.name == "file":
                    while chunk := await part.read_chunk(_CHUNK):
                        keep(chunk)
                    media = part.headers.get(hdrs.CONTENT_TYPE)
                    spool.seek(0)
                    return Upload(spool, media.split(";")[0].strip() if media else None, part.filename)
                await part.release()  # other fields are not used; options are query parameters
        except (ValueError, HttpProcessingError) as exc:  # no boundary, broken part headers
            spool.close()
            raise InvalidMultipart(f"the multipart body is malformed: {exc}") from None
        spool.close()
        raise ValidationFailed(["file: is required (a multipart field named file)"])
    async for chunk in request.content.iter_chunked(_CHUNK):
        keep(chunk)
    spool.seek(0)
    return Upload(spool, request.content_type, None)


