"""The errors a caller is meant to see, raised anywhere below the web layer.

Each has a stable `code` (the API's `error.code`), a message and, for validation, `details`;
service/web/errors.py maps codes to HTTP statuses and renders them, and the CLI prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class ServiceError(Exception):
    """An error a client is meant to see. `headers` are response headers that belong with it
    (a challenge, `Allow`, `Retry-After`)."""

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

    def describe(self) -> str:
        """One line for an operator: the message and every detail."""
        return "; ".join([self.message, *(self.details or [])])


def _error(code: str) -> type[ServiceError]:
    name = "".join(part.title() for part in code.split("_"))
    return type(name, (ServiceError,), {"code": code})


InvalidJson = _error("invalid_json")
ParameterMissing = _error("parameter_missing")
ParameterInvalid = _error("parameter_invalid")
InvalidMultipart = _error("invalid_multipart")
Unauthorized = _error("unauthorized")
InsufficientScope = _error("insufficient_scope")
Forbidden = _error("forbidden")
UsageBlocked = _error("usage_blocked")
EmailUnconfirmed = _error("email_unconfirmed")
NotFound = _error("not_found")
MethodNotAllowed = _error("method_not_allowed")
Conflict = _error("conflict")
PreconditionFailed = _error("precondition_failed")
PayloadTooLarge = _error("payload_too_large")
RequestTimeout = _error("request_timeout")
UnsupportedMediaType = _error("unsupported_media_type")
RateLimited = _error("rate_limited")
InternalError = _error("internal_error")
ServiceUnavailable = _error("service_unavailable")


# A validation's message when it has none of its own (the API's; the web pages say another).
NOT_SAVED = "the record could not be saved"


class ValidationFailed(ServiceError):
    code = "validation_failed"

    def __init__(self, details: Sequence[str], message: str = NOT_SAVED):
        super().__init__(message, details=details)
