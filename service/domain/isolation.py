"""Work on untrusted input (uploaded questionnaires, and the answers written back into them) in
a child process with a time and memory limit, so a hostile file costs at most that, and can be
stopped.

A thread cannot be stopped: a parse that runs for hours keeps its thread (and, in the default
executor, a slot other work needs, such as password hashing) until it ends. A process can be
killed. Each job gets a fresh child from a fork server whose modules are already imported (a
few milliseconds to start); at most `workers` run at once, a job waits at most `timeout` for
its turn (then 503), and a child still running after `timeout` is killed (then 413).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import multiprocessing.connection
import resource
import traceback
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar

import attrs

from .errors import PayloadTooLarge, ServiceError, ServiceUnavailable, ValidationFailed
from .uploads import UNFORESEEN, Unforeseen

log = logging.getLogger(__name__)

T = TypeVar("T")

# Imported once in the fork server, so each child starts with them.
PRELOAD = ["service.domain.questionnaires", "service.domain.knowledge", "service.domain.writeback",
           "openpyxl", "openpyxl.worksheet._reader"]


@attrs.frozen
class Unread:
    """An upload's spooled file as an argument of `IsolatedWorkers.run`: read only once a worker is
    free, so uploads waiting for one wait on disk, not in this process's memory (ten 50 MB
    uploads queued behind slow ones held 500 MB)."""

    file: IO[bytes]


class Turns:
    """At most `workers` holders at once, one owner (an account) at most all but one of them, so
    that another account is never kept waiting by a run of slow work from one; a wait longer
    than `timeout` is 503 `busy` (with Retry-After). Upload parsers take their turns here, and
    exports (service/web/views/rfp_items.py) in a Turns of their own."""

    def __init__(self, *, workers: int, timeout: float, busy: str) -> None:
        self.workers = workers
        self.timeout = timeout
        self.busy = busy
        self._slots = asyncio.Semaphore(workers)
        self.per_owner = max(1, workers - 1)
        self.owners: dict[str, int] = {}
        self._owners_changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def taken(self, owner: str | None) -> AsyncIterator[None]:
        owned = False
        try:
            async with asyncio.timeout(self.timeout):
                if owner is not None:
                    async with self._owners_changed:
                        await self._owners_changed.wait_for(
                            lambda: self.owners.get(owner, 0) < self.per_owner)
                        self.owners[owner] = self.owners.get(owner, 0) + 1
                        owned = True
                await self._slots.acquire()
        except BaseException as exc:  # no slot: the owner's share is given back whatever ended the wait
            if owned:
                await self._release_owner(owner)
            if isinstance(exc, TimeoutError):
                raise ServiceUnavailable(
                    f"{self.busy} stayed busy for {self.timeout:g} s; retry shortly",
                    headers={"Retry-After": str(max(1, round(self.timeout)))},
                ) from None
            raise
        try:
            yield
        finally:
            self._slots.release()
            if owned:
                await self._release_owner(owner)

    async def _release_owner(self, owner: str | None) -> None:
        async with self._owners_changed:
            left = self.owners.pop(owner or "", 0) - 1
            if left > 0:
                self.owners[owner or ""] = left
            self._owners_changed.notify_all()


class IsolatedWorkers:
    """Run picklable functions in killable child processes, a bounded number at a time."""

    def __init__(self, *, workers: int, timeout: float, memory_bytes: int) -> None:
        self.workers = workers
        self.timeout = timeout
        self.memory_bytes = memory_bytes
        self.turns = Turns(workers=workers, timeout=timeout, busy=f"all {workers} upload parsers")
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        # Threads that wait on the children (a pipe read blocks); one per slot, never shared.
        self._waiters = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="isolated")
        self.running: set[multiprocessing.process.BaseProcess] = set()

    async def run(self, function: Callable[..., T], *args: Any, owner: str | None = None) -> T:
        """`function(*args)` in a child; its ServiceError is raised here as it was raised there.
        `owner` (an account's id) holds at most `turns.per_owner` of the slots at once."""
        async with self.turns.taken(owner):
            args = tuple(arg.file.read() if isinstance(arg, Unread) else arg for arg in args)
            return await self._run(function, args, owner)

    async def _run(self, function: Callable[..., T], args: tuple, owner: str | None) -> T:
        loop = asyncio.get_running_loop()
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child, args=(sender, self.memory_bytes, self.timeout, function, args), daemon=True
        )
        await loop.run_in_executor(self._waiters, process.start)  # a round trip to the server
        sender.close()
        self.running.add(process)
        try:
            outcome = await loop.run_in_executor(self._waiters, _wait, receiver, self.timeout)
        finally:
            if process.is_alive():
                process.kill()
            await loop.run_in_executor(self._waiters, process.join, 5)
            self.running.discard(process)
            receiver.close()
        kind, value = outcome
        if kind == "ok":
            return value
        if kind == "error":
            cls, message, details = value
            error = cls.__new__(cls)
            ServiceError.__init__(error, message, details=details)
            raise error
        if kind == "unforeseen":
            # The child has no logging set up (the fork server is a process of its own): its
            # traceback comes back as text and is logged here, never put in the response.
            detail, trace = value
            log.error("an upload parser (%s, account %s) raised an exception no check foresaw; "
                      "the client was told %r\n%s", getattr(function, "__qualname__", function),
                      owner or "-", detail, trace)
            raise ValidationFailed([detail], message="the file could not be read")
        if kind == "timeout":
            raise PayloadTooLarge(
                f"the file took longer than uploads.parse_timeout_seconds = {self.timeout:g} s to read",
                details=[f"file: not read within {self.timeout:g} s (uploads.parse_timeout_seconds)"],
            )
        # The child died without a word: killed by the memory limit, or crashed.
        log.warning("an upload parser exited with code %s", process.exitcode)
        raise PayloadTooLarge(
            f"the file could not be read within uploads.parse_memory_bytes = {self.memory_bytes}",
            details=["file: reading it needed more memory than uploads.parse_memory_bytes allows"],
        )

    def close(self) -> None:
        for process in list(self.running):
            process.kill()
        self._waiters.shutdown(wait=False, cancel_futures=True)


def _wait(receiver: multiprocessing.connection.Connection, timeout: float) -> tuple[str, Any]:
    if not receiver.poll(timeout):
        return "timeout", None
    try:
        return receiver.recv()
    except (EOFError, OSError):
        return "died", None


_TRACEBACK_CHARS = 16_000


def _traceback(exc: BaseException) -> str:
    """The exception's traceback (with its cause) as text for the log, its middle left out past
    _TRACEBACK_CHARS (an exception's text can quote a whole cell of the file)."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > _TRACEBACK_CHARS:
        half = _TRACEBACK_CHARS // 2
        text = f"{text[:half]}\n… {len(text) - 2 * half} characters left out …\n{text[-half:]}"
    return text


def _child(sender: multiprocessing.connection.Connection, memory_bytes: int, timeout: float,
           function: Callable[..., Any], args: tuple) -> None:
    """In the child: limit the address space and the CPU time, run, and send back ("ok", result),
    ("error", …) for a ServiceError or a limit, or ("unforeseen", (what the client is told,
    traceback text)).

    The CPU limit, a little past `timeout`, stops the child by itself (SIGXCPU) when nobody is left
    to kill it at `timeout`: a service process killed with SIGKILL (OOM killer, a crash) left its
    parse running on, past the limit, for as long as the file took (a probe: 18 s after a limit
    of 3). The service kills it at `timeout` of wall time first, which CPU time never outruns."""
    cpu_seconds = math.ceil(timeout) + 1
    for limit, value in ((resource.RLIMIT_AS, (memory_bytes, memory_bytes)),
                         (resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))):
        try:
            resource.setrlimit(limit, value)
        except (ValueError, OSError):  # a lower hard limit already: that one holds
            pass
    try:
        outcome: tuple[str, Any] = ("ok", function(*args))
    except ServiceError as exc:
        outcome = ("error", (type(exc), exc.message, exc.details))
    except MemoryError:
        outcome = ("error", (PayloadTooLarge,
                             f"reading the file needs more memory than uploads.parse_memory_bytes = "
                             f"{memory_bytes} allows",
                             ["file: too large to read (uploads.parse_memory_bytes)"]))
    except RecursionError:
        outcome = ("error", (ValidationFailed, "the file could not be read",
                             ["file: nested too deeply to read"]))
    except Exception as exc:  # anything else a malformed file makes a parser raise
        detail = exc.detail if isinstance(exc, Unforeseen) else UNFORESEEN
        outcome = ("unforeseen", (detail, _traceback(exc)))
    try:
        sender.send(outcome)
    except MemoryError:
        sender.send(("error", (PayloadTooLarge, "the file's questions are too large to return",
                               ["file: too large (uploads.parse_memory_bytes)"])))
    finally:
        sender.close()
