"""Request bodies: JSON (refused with a clear 400/415 when it is not), objects under a key, and
uploaded files (a raw body or a multipart field `file`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import tempfile
from collections.abc import Awaitable
from typing import IO, Any, TypeVar

import attrs
from aiohttp import BodyPartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from ..domain.errors import (
    InvalidJson,
    InvalidMultipart,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
    ValidationFailed,
)
from .auth import PRINCIPAL, principal
from .keys import BODIES, CONFIG, UPLOADS
from .ratelimit import held_at_most

T = TypeVar("T")


def _timed_out(request: web.Request, what: str, seconds: float, setting: str) -> RequestTimeout:
    # The rest of the body is not waited for: the response closes the connection (after
    # aiohttp's lingering read of at most 10 s).
    return RequestTimeout(f"{what} did not arrive within {seconds:g} s ({setting})",
                          headers={"Connection": "close"})


async def arriving(request: web.Request, receiving: Awaitable[T], what: str, *, upload: bool = False) -> T:
    """`receiving` (a body being read) within server.body_timeout_seconds, or for an upload
    server.upload_timeout_seconds: a client sending a byte at a time must not keep a connection
    and a handler for minutes. Past it, 408 and the connection closes. A member's requests
    receive at most server.max_bodies_per_member bodies at once (429 past it, before reading):
    each is held in memory as it arrives, and a viewer's 2,000 bodies stalled a byte short of
    max_body_bytes held 2.5 GB."""
    server = request.app[CONFIG].server
    seconds = server.upload_timeout_seconds if upload else server.body_timeout_seconds
    setting = "server.upload_timeout_seconds" if upload else "server.body_timeout_seconds"
    who = request.get(PRINCIPAL)
    try:
        if upload or who is None:  # (uploads: one_of_members_uploads; nobody: max_public_body_bytes)
            return await _within(request, receiving, what, seconds, setting)
        with held_at_most(
            request.app[BODIES], who.member_id, server.max_bodies_per_member,
            "{held} request bodies of this member are arriving already "
            "(server.max_bodies_per_member); send the next once one has arrived",
            retry_after=1,
        ):
            return await _within(request, receiving, what, seconds, setting)
    finally:
        if asyncio.iscoroutine(receiving):
            receiving.close()  # not awaited when refused (once it has run, closing does nothing)


async def _within(
    request: web.Request, receiving: Awaitable[T], what: str, seconds: float, setting: str,
) -> T:
    try:
        async with asyncio.timeout(seconds):
            return await receiving
    except TimeoutError:
        raise _timed_out(request, what, seconds, setting) from None


async def read_body(request: web.Request) -> bytes:
    """The whole body (at most client_max_size), within server.body_timeout_seconds."""
    return await arriving(request, request.read(), "the request body")


async def read_json(request: web.Request) -> Any:
    """The request body as JSON, or a 400/415 saying why it is not."""
    if request.content_type not in ("application/json", "") and not request.content_type.endswith(
        "+json"
    ):
        raise UnsupportedMediaType(
            f"send the body as application/json, not {request.content_type}"
        )
    raw = await read_body(request)
    if not raw.strip():
        raise InvalidJson("the request body is empty; a JSON object is expected")
    try:
        body = json.loads(raw, parse_int=_json_int)
    except _HugeInteger:
        raise InvalidJson(
            f"the request body holds an integer of more than {MAX_INT_DIGITS} digits; no field "
            "takes one"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidJson(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidJson("the request body is nested too deeply") from None
    problem = _unstorable(body)
    if problem:
        raise InvalidJson(problem)
    return body


# Longer JSON integers are refused by name: int() refuses over 4,300 digits with a hint about
# sys.set_int_max_str_digits() that meant nothing to a client (and reading them costs time).
MAX_INT_DIGITS = 100


class _HugeInteger(ValueError):
    pass


def _json_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + 1:  # + 1: the sign
        raise _HugeInteger
    return int(text)


# Deeper JSON is refused: no request of this API nests more than a few levels, and walking
# (and later structuring) a value 900 levels deep ran out of Python's recursion limit.
MAX_JSON_DEPTH = 64


def _unstorable(body: Any) -> str | None:
    """Why a JSON value cannot be taken, or None: nested deeper than MAX_JSON_DEPTH, or a string
    (keys included) PostgreSQL text cannot hold. Walked without recursion."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _UNSTORABLE.search(value) is not None:
                # PostgreSQL text cannot hold NUL, and UTF-8 cannot encode a lone surrogate (\ud800).
                return ("the request body holds a string with a NUL character (\\u0000) or an "
                        "unpaired surrogate (\\ud800-\\udfff); neither can be stored")
        elif isinstance(value, list | dict):
            if depth > MAX_JSON_DEPTH:
                return f"the request body is nested more than {MAX_JSON_DEPTH} levels deep"
            if isinstance(value, dict):
                stack.extend((key, depth) for key in value)
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
    return None


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
# Parts a multipart upload may have before its `file` (the API uses none of them; the web app's
# forms a few): each costs the event loop a parse, and 200,000 tiny ones took 21 s.
MAX_PARTS_BEFORE_FILE = 32
_CHUNK = 64 * 1024


def _storable_filename(name: str | None) -> str | None:
    """A file's name as sent, less what PostgreSQL text cannot hold (a multipart part's
    `filename*=UTF-8''q%00.csv` decodes to a NUL): it is stored with the kept questionnaire and
    in the import's audit event, and failed there as a 500."""
    return None if name is None else _UNSTORABLE.sub("", name)


@attrs.frozen
class Upload:
    file: IO[bytes]
    media_type: str | None
    filename: str | None = attrs.field(converter=_storable_filename)



def one_of_members_uploads(request: web.Request) -> contextlib.AbstractContextManager[None]:
    """Around an upload from its first byte until it is parsed and stored: at most
    uploads.max_uploads_per_member of one member's at once in this process, else 429 before any
    of it is read. Each holds its spooled file while it arrives (a client may send it slowly,
    for up to upload_timeout_seconds) and while it waits for a parser."""
    return held_at_most(
        request.app[UPLOADS], principal(request).member_id,
        request.app[CONFIG].uploads.max_uploads_per_member,
        "{held} uploads of this member are being received or parsed already "
        "(uploads.max_uploads_per_member); send the next once one has finished",
        retry_after=5,
    )


async def receive_upload(request: web.Request, limit: int) -> Upload:
    """The uploaded file, raw body or multipart field `file`, spooled; 413 past `limit` bytes,
    408 when it has not arrived whole within server.upload_timeout_seconds."""
    return await arriving(request, _receive_upload(request, limit), "the upload", upload=True)


async def _receive_upload(request: web.Request, limit: int) -> Upload:
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
            parts = 0
            while (part := await reader.next()) is not None:
                if isinstance(part, BodyPartReader) and part.name == "file":
                    while chunk := await part.read_chunk(_CHUNK):
                        keep(chunk)
                    media = part.headers.get(hdrs.CONTENT_TYPE)
                    spool.seek(0)
                    return Upload(spool, media.split(";")[0].strip() if media else None, part.filename)
                await part.release()  # other fields are not used; options are query parameters
                parts += 1
                if parts > MAX_PARTS_BEFORE_FILE:
                    raise InvalidMultipart(f"the multipart body has more than {MAX_PARTS_BEFORE_FILE} "
                                           "parts before its field file")
        except (ValueError, HttpProcessingError) as exc:  # no boundary, broken part headers
            spool.close()
            raise InvalidMultipart(f"the multipart body is malformed: {str(exc)[:200]}") from None
        except InvalidMultipart:
            spool.close()
            raise
        spool.close()
        raise ValidationFailed(["file: is required (a multipart field named file)"])
    async for chunk in request.content.iter_chunked(_CHUNK):
        keep(chunk)
    spool.seek(0)
    return Upload(spool, request.content_type, None)


