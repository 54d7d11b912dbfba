"""HTTP's conditional writes for the records clients edit (knowledge-base entries, RFP items):
the ETag a response carries and the If-Match a PATCH may send (domain/preconditions.py checks
it under the record's lock)."""

from __future__ import annotations

from aiohttp import web

from ..domain.errors import ParameterInvalid


def if_match(request: web.Request) -> tuple[str, ...] | None:
    """The request's If-Match tags (None: no condition). A weak tag never matches (If-Match
    compares strongly, RFC 9110 13.1.1); a header that holds no tag at all is refused."""
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    tags = request.if_match or ()
    if not tags:
        raise ParameterInvalid(
            f'If-Match must be * or quoted ETags as a GET returned them (If-Match: "v3"); got {raw[:80]!r}'
        )
    return tuple(tag.value for tag in tags if not tag.is_weak)


def tagged(response: web.Response, tag: str) -> web.Response:
    response.etag = tag
    return response
