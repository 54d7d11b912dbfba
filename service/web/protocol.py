"""Requests aiohttp's HTTP parser refuses before any handler runs (a request line or header over
8,190 bytes, a bad chunk size, both Content-Length and Transfer-Encoding, a malformed request
line): 400 `bad_request` in the service's error shape, naming what was wrong without quoting the
request, and one WARNING line in the log instead of aiohttp's ERROR with a traceback.

aiohttp has no hook for these (no middleware or signal sees them; aio-libs/aiohttp#3287): its
connection protocol, `RequestHandler.handle_error`, answers them in text/plain quoting the bytes
it refused. `serve_parser_errors_as_json` makes an application's server use `_RequestHandler`,
which overrides that method for the parser's errors only."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import http_exceptions, web, web_protocol, web_server

from ..domain.errors import ServiceError
from .responses import json_response

log = logging.getLogger(__name__)


class BadRequest(ServiceError):
    code = "bad_request"


# What each parser error says, most specific first; never the parser's own message, which quotes
# the request.
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (http_exceptions.LineTooLong, "its request line or a header is too long"),
    (http_exceptions.BadHttpMethod, "its method is not a valid HTTP method"),
    (http_exceptions.BadStatusLine, "its request line is malformed"),
    (http_exceptions.InvalidURLError, "its target (path and query) is malformed"),
    (http_exceptions.InvalidHeader, "a header is malformed"),
    (http_exceptions.TransferEncodingError, "its chunked body is malformed"),
    (http_exceptions.ContentLengthError, "its body does not match its Content-Length"),
    (http_exceptions.ContentEncodingError, "its body does not match its Content-Encoding"),
)


def parser_error_message(exc: BaseException | None) -> str:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return f"the request is not valid HTTP: {reason}"
    # BadHttpMessage itself; the C parser's message opens with llhttp's reason ("Invalid
    # character in chunk size:", then the bytes): only known words of that first line are used.
    reason = str(getattr(exc, "message", "")).partition("\n")[0].lower()
    if "chunk" in reason:
        return "the request is not valid HTTP: its chunked body is malformed"
    if "content-length" in reason and "transfer-encoding" in reason:
        return "the request is not valid HTTP: it has both Content-Length and Transfer-Encoding"
    return "the request is not valid HTTP: its headers or framing are malformed"


class _RequestHandler(web_protocol.RequestHandler):
    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, http_exceptions.HttpProcessingError) or status >= 500:
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:  # as aiohttp: a response is on its way already
            raise ConnectionError("a response was sent already; cannot send an error")
        text = parser_error_message(exc)
        # One line, no traceback: anyone can send these, and each used to log 15 lines.
        log.warning("refused a malformed request from %s: %s (%s)",
                    request.remote, text, type(exc).__name__)
        error = BadRequest(text)
        response = json_response(error.body(), status=status if 400 <= status < 500 else 400)
        response.force_close()
        return response


class _Server(web_server.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return _RequestHandler(self, loop=self._loop, **self._kwargs)


def serve_parser_errors_as_json(app: web.Application) -> None:
    """Make the servers made for `app` (web.run_app, AppRunner, the test client's) answer the
    HTTP parser's errors through `_RequestHandler`."""
    make_handler = app._make_handler

    def _make_handler(**kwargs: Any) -> web_server.Server:
        server = make_handler(**kwargs)
        server.__class__ = _Server  # the same server; only its connections' protocol differs
        return server

    app._make_handler = _make_handler  # type: ignore[method-assign]
