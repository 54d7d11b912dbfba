"""The one error shape, `{"error": {code, message, details?}}`: domain errors mapped to HTTP
statuses and rendered, and anything unexpected turned into a logged 500 or, when the database is
unreachable or rolled a transaction back for a concurrent one, a 503."""

from __future__ import annotations

import logging

from aiohttp import web

from .. import db
from ..domain.errors import (
    InternalError,
    MethodNotAllowed,
    NotFound,
    ParameterInvalid,
    PayloadTooLarge,
    ServiceError,
    ServiceUnavailable,
)
from ..logs import redact_url
from .keys import CONFIG
from .protocol import undecodable_body
from .responses import json_response
from .telemetry import REQUEST_ID

log = logging.getLogger(__name__)


# The HTTP status of each error code (service/domain/errors.py); anything else is a 400.
STATUS = {
    "bad_request": 400,  # the HTTP parser refused the request (service/web/protocol.py)
    "invalid_json": 400,
    "parameter_missing": 400,
    "parameter_invalid": 400,
    "invalid_multipart": 400,
    "unauthorized": 401,
    "insufficient_scope": 403,
    "forbidden": 403,
    "usage_blocked": 403,
    "email_unconfirmed": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "conflict": 409,
    "precondition_failed": 412,  # If-Match named another version (domain/preconditions.py)
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "validation_failed": 422,
    "rate_limited": 429,
    "internal_error": 500,
    "service_unavailable": 503,
}


def status_of(error: ServiceError) -> int:
    return getattr(error, "status", None) or STATUS.get(error.code, 400)


def render(error: ServiceError) -> web.Response:
    response = json_response(error.body(), status=status_of(error), headers=error.headers)
    if error.headers.get("Connection") == "close":
        response.force_close()
    return response


def _body_limit(request: web.Request) -> str:
    """The body limit that applied, with its setting (SECURITY.md: a limit's message names it)."""
    server = request.app[CONFIG].server
    limit = getattr(request, "_client_max_size", None) or server.max_body_bytes
    if limit < server.max_body_bytes and limit == server.max_public_body_bytes:
        return f"at most {limit} bytes without a token or session (server.max_public_body_bytes)"
    return f"at most {limit} bytes (server.max_body_bytes)"


def _from_http_exception(exc: web.HTTPException, request: web.Request) -> ServiceError:
    if isinstance(exc, web.HTTPNotFound):
        return NotFound("no such route")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return MethodNotAllowed(
            f"{exc.method} is not allowed here; allowed: {allowed}", headers={"Allow": allowed}
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge(f"the request body is larger than the service accepts: {_body_limit(request)}")
    error = ServiceError(exc.reason or "request failed")
    error.status = exc.status
    error.code = exc.reason.lower().replace(" ", "_") if exc.reason else "error"
    return error


def refuse_nul(request: web.Request) -> None:
    if "%00" in request.raw_path:
        # PostgreSQL text cannot hold NUL: refuse it here rather than fail in a query.
        raise ParameterInvalid("the path and query must not contain NUL characters (%00)")


def error_response(request: web.Request, exc: Exception) -> web.StreamResponse:
    """The response in the one error shape for anything a handler raised; a redirect and the
    like (an HTTPException below 400) is raised again, untouched."""
    if isinstance(exc, ServiceError):
        return render(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        return render(_from_http_exception(exc, request))
    if (refused := undecodable_body(request, exc)) is not None:
        return render(refused)
    if db.database_unavailable(exc):
        # Lost or refused connections (a restart, a terminated backend, no free slot) are
        # not the request's fault and may pass on retry: 503 with Retry-After, not 500.
        log.warning(
            "database unavailable in %s %s (request id %s): %r",
            request.method, redact_url(request.path), request.get(REQUEST_ID), exc,
        )
        return render(ServiceUnavailable(
            "the database is unavailable; retry shortly", headers={"Retry-After": "1"}
        ))
    conflict = db.transaction_conflict(exc)
    if conflict is not None:
        log.warning(
            "transaction rolled back in %s %s (request id %s): %s %s",
            request.method, redact_url(request.path), request.get(REQUEST_ID), conflict,
            getattr(conflict, "detail", None) or "",
        )
        return render(ServiceUnavailable(
            "the request conflicted with a concurrent one and its transaction was rolled back; retry it",
            headers={"Retry-After": "1"},
        ))
    log.exception(
        "unhandled error in %s %s (request id %s)",
        request.method,
        redact_url(request.path),  # link secrets (invitation tokens) stay out, as in the access log
        request.get(REQUEST_ID),
        exc_info=exc,
    )
    return render(InternalError("an unexpected error occurred; it has been logged"))
