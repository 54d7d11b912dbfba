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
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import http_exceptions, web, web_protocol, web_server

from ..domain.errors import ServiceError
from .keys import CONFIG
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


def undecodable_body(request: web.BaseRequest, exc: BaseException) -> BadRequest | None:
    """The 400 for a body aiohttp could not read as the handler read it (RequestPayloadError:
    one sent as `Content-Encoding: gzip` or `deflate` that is not), or None for another error.
    Anyone can send one: it was a 500, logged as an ERROR with a traceback twice (the handler's,
    then aiohttp's lingering read of the rest meeting it again). Now one WARNING line; the body is
    marked ended, so nothing reads on, and the 400 closes the connection (its parser is stuck)."""
    if not isinstance(exc, web.RequestPayloadError):
        return None
    request.content.feed_eof()
    text = parser_error_message(exc.__cause__)
    log.warning("refused a malformed request from %s: %s (%s)", request.remote, text,
                type(exc.__cause__).__name__)
    return BadRequest(text, headers={"Connection": "close"})


class _RequestHandler(web_protocol.RequestHandler):
    # server.send_timeout_seconds, set by serve_parser_errors_as_json (0: none).
    send_timeout = 0.0
    # The watch of the connection's latest request (_SendWatch).
    send_watch: _SendWatch | None = None

    async def _handle_request(
        self,
        request: web.BaseRequest,
        start_time: float | None,
        request_handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
    ) -> tuple[web.StreamResponse, bool]:
        """aiohttp's (the handler, then finish_response), watched from the handler's start: a
        response the client takes nothing of for send_timeout seconds is dropped with its
        connection, whoever writes it: aiohttp (finish_response) or the handler itself (event
        streams, exports). aiohttp waits on a client that never reads for as long as it stays
        connected, holding the response (a viewer's 300 unread item lists of 6 MB: the service
        grew by 1.9 GB, 1.2 GB more in its sockets' send queues, until the clients closed; 100
        unread exports of 3.6 MB: 0.36 GB, for good), and no keep-alive timer runs while a
        request is in flight."""
        if not self.send_timeout:
            return await super()._handle_request(request, start_time, request_handler)
        watch = _SendWatch(self, request, self.send_timeout)
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            watch.sent()  # it goes on looking while bytes of the response still wait

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


class _SendWatch:
    """Every `seconds` from the start of a request's handler until its response is handed to the
    transport, and after that while bytes of it still wait in the transport (aiohttp stops
    waiting below its high-water mark, 64 KiB, and then closes the connection only once they
    are sent): when bytes wait to go to the client and none of the response has gone since the
    last look, the connection is aborted (a send in progress then fails as a disconnect, and
    the service's handler is cancelled), so a client that takes nothing is dropped after one to
    two times `seconds`. What has gone is what was written less what still waits: a stream the
    handler writes while the client reads slowly makes progress even when the bytes waiting do
    not go down. A timer per request, no task: most are answered before it first fires."""

    __slots__ = ("done", "gone", "handle", "handler", "seconds", "transport", "writer")

    def __init__(self, handler: _RequestHandler, request: web.BaseRequest, seconds: float) -> None:
        self.handler = handler
        # Kept: aiohttp forgets it once it asks the connection to close (which waits for the
        # bytes still waiting to be sent, for ever if the client reads nothing).
        self.transport = handler.transport
        self.writer = request.writer  # counts the bytes of the response written (output_size)
        self.seconds = seconds
        self.gone = self._gone()
        self.done = False
        self.handle = handler._loop.call_later(seconds, self._look)
        # The connection's latest: a response's watch ends once the next request's begins,
        # which counts from the bytes waiting then (the last of this response's among them).
        handler.send_watch = self

    def _gone(self) -> int:
        """Bytes of the response sent (less any of the last response still waiting)."""
        transport = self.transport
        return self.writer.output_size - (transport.get_write_buffer_size() if transport else 0)

    def _look(self) -> None:
        transport = self.transport
        if transport is None:
            return
        waiting = transport.get_write_buffer_size()
        if self.done and (not waiting or self.handler.send_watch is not self):
            self._forget()  # all sent, or what waits is the next response's: its watch looks
            return
        gone = self._gone()
        if waiting and gone <= self.gone:
            log.info("dropped a connection from %s: its client took none of the response for %g s "
                     "(server.send_timeout_seconds)", self.handler.peername, self.seconds)
            transport.abort()
            self._forget()
            return
        self.gone = gone
        self.handle = self.handler._loop.call_later(self.seconds, self._look)

    def sent(self) -> None:
        """aiohttp has handed the whole response to the transport (or the send failed, or the
        handler was cancelled)."""
        self.done = True
        transport = self.transport
        if transport is None or not transport.get_write_buffer_size():
            self.handle.cancel()
            self._forget()

    def _forget(self) -> None:
        """Done looking: the connection no longer holds this watch (nor it the connection)."""
        if self.handler.send_watch is self:
            self.handler.send_watch = None


class _Server(web_server.Server):
    send_timeout = 0.0

    def __call__(self) -> web_protocol.RequestHandler:
        handler = _RequestHandler(self, loop=self._loop, **self._kwargs)
        handler.send_timeout = self.send_timeout
        return handler


def serve_parser_errors_as_json(app: web.Application) -> None:
    """Make the servers made for `app` (web.run_app, AppRunner, the test client's) answer the
    HTTP parser's errors through `_RequestHandler`."""
    # Both are aiohttp's private methods: an aiohttp without them would answer the parser's
    # errors its own way and send every response unwatched, saying nothing. Refuse to start.
    for name in ("_handle_request", "handle_error"):
        if not callable(getattr(web_protocol.RequestHandler, name, None)):
            raise RuntimeError(f"aiohttp's RequestHandler has no {name}() (this aiohttp is newer than "
                               "the service knows): the send watch and parser errors need it")
    make_handler = app._make_handler

    def _make_handler(**kwargs: Any) -> web_server.Server:
        server = make_handler(**kwargs)
        server.__class__ = _Server  # the same server; only its connections' protocol differs
        server.send_timeout = app[CONFIG].server.send_timeout_seconds  # type: ignore[attr-defined]
        return server

    app._make_handler = _make_handler  # type: ignore[method-assign]
