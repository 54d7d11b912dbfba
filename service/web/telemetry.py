"""What the service tells its operators about requests: the request id, one access line per
request, and the per-route request counter and timer (Prometheus, service/metrics.py)."""

from __future__ import annotations

import logging
import os
import random
import re
import time
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from ..logs import DeferredHandler, JsonLineFormatter, redact_url
from .auth import Handler
from .keys import METRICS

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID = web.RequestKey("request_id", str)
# A client-supplied id is kept when it is short and harmless, so logs can be joined across systems.
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


# New request ids need to be unique, not secret: a PRNG costs no system call, where
# secrets.token_hex made one per request. Its own, so nobody else's seed() can repeat ids, and
# reseeded in a forked child.
_request_ids = random.Random()
os.register_at_fork(after_in_child=_request_ids.seed)


def assign_request_id(request: web.Request) -> str:
    """The request's id: the client's X-Request-Id when short and harmless, else a new one."""
    incoming = request.headers.get(REQUEST_ID_HEADER)
    if incoming and _SAFE_REQUEST_ID.match(incoming):
        request_id = incoming
    else:
        request_id = f"{_request_ids.getrandbits(64):016x}"
    request[REQUEST_ID] = request_id
    return request_id


_ACCESS_LINE = "%s %s %s %.1fms request_id=%s member=%s"
_second_formatted: tuple[int, str] = (0, "")


def _timestamp(ns: int | None = None) -> str:
    """Now (or `ns`, nanoseconds since the epoch), as logging.Formatter.formatTime writes it
    (local time, milliseconds after a comma); the part up to the second is formatted once per
    second."""
    global _second_formatted
    second, milli = divmod((time.time_ns() if ns is None else ns) // 1_000_000, 1000)
    cached_second, prefix = _second_formatted  # one read: another thread may replace it
    if cached_second != second:
        prefix = time.strftime("%Y-%m-%d %H:%M:%S,", time.localtime(second))
        _second_formatted = (second, prefix)
    return f"{prefix}{milli:03d}"


def _access_fields(
    method: str, path_qs: str, status: int, duration: float, request_id: str | None,
    member_id: str | None, route: str | None, remote: str | None, pid: int,
) -> tuple[tuple[object, ...], dict[str, object]]:
    """The access line's message arguments and its fields (JSON keys, or LogRecord attributes)."""
    args = (method, path_qs, status, duration * 1000, request_id, member_id or "-")
    return args, {
        "request_id": request_id,
        "method": method,
        "path": path_qs.partition("?")[0],
        "route": route,
        "status": status,
        "duration_ms": round(duration * 1000, 2),
        "member_id": member_id,
        "remote": remote,
        "pid": pid,  # which worker answered, with `serve --workers N`
    }


def _json_access_line(ns: int, logger: str, *fields: Any) -> str:
    """The JSON access line, in the writer thread, at `ns` (when the request was logged)."""
    args, extra = _access_fields(*fields)
    return JsonLineFormatter.dumps(
        JsonLineFormatter.line(_timestamp(ns), "INFO", logger, _ACCESS_LINE % args, extra)
    )


class AccessLogger(AbstractAccessLogger):
    """One line per request: method, path, status, duration, request id, member."""

    def __init__(self, logger: logging.Logger, log_format: str) -> None:
        super().__init__(logger, log_format)
        self.pid = os.getpid()  # one instance per connection, made in the worker that serves it
        # With the service's own set-up (`setup`: one DeferredHandler on the root logger, none on
        # this logger) the line goes straight to that handler. Logger.info's dispatch (filters,
        # the handler lock, the walk up the logger tree) measured ~40 µs a request under load,
        # a quarter of a bare aiohttp handler's whole request (BENCHMARKS.md, HTTP).
        root = logging.getLogger()
        self.direct = (
            root.handlers[0]
            if not logger.handlers and logger.propagate and len(root.handlers) == 1
            and isinstance(root.handlers[0], DeferredHandler)
            else None
        )
        self.json = self.direct is not None and isinstance(self.direct.formatter, JsonLineFormatter)
        from .auth import PRINCIPAL  # auth's errors import this module: a cycle at import time

        self.principal_key = PRINCIPAL

    def log(
        self, request: web.BaseRequest, response: web.StreamResponse, duration: float
    ) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        try:
            route = request.match_info.route
        except AssertionError:  # the HTTP parser refused the request: it was never routed
            route = None
        who = request.get(self.principal_key)
        # raw_path: no URL object is built just for the log.
        path_qs = redact_url(request.raw_path)
        request_id = request.get(REQUEST_ID)
        member_id = getattr(who, "member_id", None)
        if self.json:
            # Only the fields are gathered here; the writer thread formats the line, the one
            # JsonLineFormatter would write for Logger.info's record (measured: ~8 µs of CPU a
            # request less than formatting it here, BENCHMARKS.md, HTTP).
            self.direct.write_later(
                _json_access_line, time.time_ns(), self.logger.name, request.method, path_qs,
                response.status, duration, request_id, member_id, getattr(route, "name", None),
                request.remote, self.pid,
            )
            return
        args, extra = _access_fields(
            request.method, path_qs, response.status, duration, request_id, member_id,
            getattr(route, "name", None), request.remote, self.pid,
        )
        if self.direct is None:
            self.logger.info(_ACCESS_LINE, *args, extra=extra)
        else:
            # The record Logger.info would make (makeRecord: extra becomes attributes).
            record = logging.LogRecord(
                self.logger.name, logging.INFO, "", 0, _ACCESS_LINE, args, None
            )
            record.__dict__.update(extra)
            self.direct.write_later(self.direct.format, record)  # formatted by the writer too




@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count and time every request by route name; sits outside the error middleware."""
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        metrics = request.app[METRICS]
        route = request.match_info.route.name or "unmatched"
        metrics.http_requests.labels(route, request.method, str(status)).inc()
        metrics.http_request_duration.labels(route, request.method).observe(
            time.perf_counter() - started
        )
