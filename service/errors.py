"""The one error shape, `{"error": {code, message, details?}}`, and the middleware that renders it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import asyncpg
from aiohttp import web

from .logs import REQUEST_ID
from .responses import json_response

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error a client is meant to see. Raise it anywhere; the middleware renders it."""

    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        details: Sequence[str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details) if details is not None else None
        self.headers = dict(headers or {})

    def body(self) -> dict:
        error: dict = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


def _error(status: int, code: str) -> type[ApiError]:
    name = "".join(part.title() for part in code.split("_"))
    return type(name, (ApiError,), {"status": status, "code": code})


InvalidJson = _error(400, "invalid_json")
ParameterMissing = _error(400, "parameter_missing")
ParameterInvalid = _error(400, "parameter_invalid")
Unauthorized = _error(401, "unauthorized")
InsufficientScope = _error(403, "insufficient_scope")
Forbidden = _error(403, "forbidden")
UsageBlocked = _error(403, "usage_blocked")
EmailUnconfirmed = _error(403, "email_unconfirmed")
NotFound = _error(404, "not_found")
MethodNotAllowed = _error(405, "method_not_allowed")
Conflict = _error(409, "conflict")
PayloadTooLarge = _error(413, "payload_too_large")
UnsupportedMediaType = _error(415, "unsupported_media_type")
InvalidMultipart = _error(400, "invalid_multipart")
RateLimited = _error(429, "rate_limited")
InternalError = _error(500, "internal_error")
ServiceUnavailable = _error(503, "service_unavailable")


class ValidationFailed(ApiError):
    status = 422
    code = "validation_failed"

    def __init__(self, details: Sequence[str], message: str = "the record could not be saved"):
        super().__init__(message, details=details)


# Failures of the database connection rather than of the request; see error_response.
DATABASE_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # 08xxx: the connection was lost or could not be made
    asyncpg.TooManyConnectionsError,  # 53300: no free connection slot
    asyncpg.CannotConnectNowError,  # 57P03: the server is starting up or shutting down
    asyncpg.AdminShutdownError,  # 57P01: the backend was terminated
    asyncpg.CrashShutdownError,  # 57P02
    ConnectionError,  # refused or reset while the pool (re)connects
)


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` is, or was raised while handling, a lost or refused database connection
    (a transaction's exit on a dead connection raises InterfaceError over the real cause)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, DATABASE_UNAVAILABLE):
            return True
        current, seen = current.__cause__ or current.__context__, seen + 1
    return False


def render(error: ApiError) -> web.Response:
    return json_response(error.body(), status=error.status, headers=error.headers)


def _from_http_exception(exc: web.HTTPException) -> ApiError:
    if isinstance(exc, web.HTTPNotFound):
        return NotFound("no such route")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return MethodNotAllowed(
            f"{exc.method} is not allowed here; allowed: {allowed}", headers={"Allow": allowed}
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge("the request body is larger than the service accepts")
    error = ApiError(exc.reason or "request failed")
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
    if isinstance(exc, ApiError):
        return render(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        return render(_from_http_exception(exc))
    if database_unavailable(exc):
        # Lost or refused connections (a restart, a terminated backend, no free slot) are
        # not the request's fault and may pass on retry: 503 with Retry-After, not 500.
        log.warning(
            "database unavailable in %s %s (request id %s): %r",
            request.method, request.path, request.get(REQUEST_ID), exc,
        )
        return render(ServiceUnavailable(
            "the database is unavailable; retry shortly", headers={"Retry-After": "1"}
        ))
    log.exception(
        "unhandled error in %s %s (request id %s)",
        request.method,
        request.path,
        request.get(REQUEST_ID),
        exc_info=exc,
    )
    return render(InternalError("an unexpected error occurred; it has been logged"))
