"""Running the app: one process, or N processes sharing the port (SO_REUSEPORT).

Kept out of `__main__` because spawned workers must import their target by module name, and
multiprocessing never re-imports a package's `__main__`.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import re
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.connection import wait
from typing import NoReturn

import asyncpg
from aiohttp import web

from . import db, logs
from .config import Config
from .metrics import MULTIPROC_ENV
from .web.app import check_rate_limits as check_rate_limits  # for cmd_serve (cli may not import web)
from .web.app import create_app
from .web.telemetry import AccessLogger

log = logging.getLogger("service")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit; (before, after).

    Every client connection holds a file descriptor until it closes (aiohttp closes one that
    sends no whole request within server.keepalive_timeout_seconds), and so do pooled
    connections, spooled uploads and exports. At the soft limit most systems start services
    with (1024), one client's 1,100 idle connections left the process unable to accept any
    other (asyncio: "socket.accept() out of system resource") or to open a file or a database
    connection, until they closed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # a hard limit the kernel will not give (over fs.nr_open)
        return soft, soft
    return soft, hard


# Below this many open files a process serves few clients at once; start-up says so.
LOW_OPEN_FILES = 4096


def _stop_with(supervisor: int) -> None:
    """SIGTERM to this worker once `supervisor`, its parent, is gone: killed (kill -9, the OOM
    killer), it can no longer stop its workers, which served on as orphans, unsupervised, and
    kept the port from a restart. A thread, so that a busy event loop cannot hold it up."""

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(1.0)
        log.error("the parent process %d is gone; stopping this worker", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve_worker(config: Config, supervisor: int | None = None) -> None:
    """One service process: the app on the shared port until SIGINT or SIGTERM, or until
    `supervisor` (the pid of `serve --workers N`'s parent) is gone."""
    logs.setup(config.logging)
    if supervisor is not None:
        _stop_with(supervisor)
    before, after = raise_open_files_limit()
    if after < LOW_OPEN_FILES:
        log.warning("this process may open only %d files (RLIMIT_NOFILE, soft and hard): each client "
                    "connection takes one; raise the hard limit (systemd LimitNOFILE, ulimit -Hn)", after)
    elif after != before:
        log.debug("open files limit raised from %d to %d", before, after)
    try:
        web.run_app(
            create_app(config),
            host=config.server.host,
            port=config.server.port,
            reuse_port=config.server.workers > 1,
            access_log_class=AccessLogger,
            shutdown_timeout=config.server.shutdown_timeout,
            keepalive_timeout=config.server.keepalive_timeout_seconds,
            # Called once the port is bound: the line an operator waits for.
            print=lambda _banner: log.info("listening on http://%s:%s (pid %d)", config.server.host,
                                           config.server.port, os.getpid()),
            handler_cancellation=True,
        )
    except Exception as exc:
        # The app has started and stopped by now (aiohttp binds after start-up), leases handed back.
        _cannot_listen(config, exc)
        if db.database_unavailable(exc):
            _cannot_connect(config, exc)
        raise


def check_can_listen(config: Config) -> None:
    """Exit as serve_worker would if the host and port cannot be listened on, before any database
    work: a first start's demo account was made, and its token printed, by a start that then
    failed on a taken port. (Bound and let go at once: a port taken in between still fails later,
    the same way.)"""
    server = config.server
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            server.host or None, server.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE,
        ):
            try:
                probe = socket.socket(family, kind, proto)
            except OSError:  # a family the kernel lacks (IPv6): asyncio skips it, and so do we
                continue
            with probe:
                # As asyncio's create_server binds: SO_REUSEADDR, and IPv6 alone on an IPv6
                # address (`::` shares its port with a socket on 0.0.0.0). Never SO_REUSEPORT,
                # which the workers bind with: with it, a second `serve --workers N` on the port of
                # a running one started too, and the kernel spread connections over both services.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:
        _cannot_listen(config, exc)
        raise


def _cannot_listen(config: Config, exc: BaseException) -> None:
    """One line and exit status 2, as a bad setting gets (cli.main), when `exc` says the host
    or port cannot be listened on: a traceback would say nothing more."""
    unresolved = isinstance(exc, socket.gaierror)  # a --host the resolver does not know
    if unresolved or (isinstance(exc, OSError) and exc.errno in _CANNOT_LISTEN):
        reason = exc.strerror if unresolved else os.strerror(exc.errno)  # type: ignore[union-attr,arg-type]
        host = config.server.host
        where = f"[{host}]:{config.server.port}" if ":" in host else f"{host}:{config.server.port}"
        print(f"error: server.{'host' if unresolved else 'port'}: cannot listen on {where}: "
              f"{reason.lower()}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _cannot_connect(config: Config, exc: BaseException) -> NoReturn:
    """One line for the pools that start-up could not open (the migrations' connection could, to
    direct_url past a pooler): a connection limit reached, the server gone meanwhile, or PgBouncer
    refusing the role or password (its auth_file), whose own words name neither."""
    hint = ""
    if isinstance(exc, asyncpg.TooManyConnectionsError):
        hint = " (each service process holds up to database.pool_max_size + questions.pool_size + 1)"
    elif isinstance(exc, asyncpg.InvalidPasswordError) or "SASL authentication failed" in str(exc):
        hint = (" (the user or password in database.url; behind PgBouncer, the user must be in its "
                "auth_file with that password's SCRAM secret)")
    shown = db.shown_url(config.database.url)
    where = f" to {shown}" if shown else ""
    print(f"error: database.url: cannot open the service's connections{where}: {exc}{hint}",
          file=sys.stderr, flush=True)
    raise SystemExit(2) from None


# Why binding the port fails: taken, an address this host does not have, a privileged port.
_CANNOT_LISTEN = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)


_METRICS_PREFIX = "rfp-metrics-"
_METRICS_DIR = re.compile(rf"{_METRICS_PREFIX}([0-9]{{1,10}})-.*", re.ASCII | re.DOTALL)


def remove_orphaned_metrics_dirs(directory: str) -> list[str]:
    """Remove the metrics directories of `serve --workers` parents that are gone: one killed
    with SIGKILL (or the OOM killer) never ran its clean-up. Each is named for its parent's pid;
    only this user's, and only when no process has that pid (a reused pid keeps it, harmlessly).
    Returns the paths removed."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        # `rfp-metrics-<pid>-…` only: ASCII digits that fit a pid (os.kill raised OverflowError
        # past a C long, int() ValueError on "²"), and the dash, which the older random names
        # (`rfp-metrics-` and 8 characters, all digits by chance) never have.
        named = _METRICS_DIR.fullmatch(entry.name)
        if named is None or (pid := int(named[1])) >= 2**31:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        except OSError:  # alive but another user's (EPERM), or the entry went meanwhile
            continue
    if removed:
        log.info("removed %d metrics folder(s) of service processes gone: %s", len(removed),
                 ", ".join(removed))
    return removed


def run_workers(config: Config) -> int:
    """N worker processes on one port; signals are passed on. Returns 0 after a clean stop.

    When a worker dies on its own (killed, or the port taken since check_can_listen) the others
    are stopped too, so the service never runs silently short of workers.
    """
    metrics_dir = None
    if config.metrics.enabled and not os.environ.get(MULTIPROC_ENV):
        # Multiprocess mode: every worker writes its samples here; /metrics on any worker sums them.
        # Set before the workers start, because prometheus-client reads it at import.
        remove_orphaned_metrics_dirs(tempfile.gettempdir())
        metrics_dir = tempfile.mkdtemp(prefix=f"{_METRICS_PREFIX}{os.getpid()}-")
        os.environ[MULTIPROC_ENV] = metrics_dir
    try:
        return _supervise(config)
    finally:
        if metrics_dir:
            os.environ.pop(MULTIPROC_ENV, None)
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _supervise(config: Config) -> int:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=serve_worker, args=(config, os.getpid()))
               for _ in range(config.server.workers)]
    stopping = False

    def stop_all(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:
            if worker.pid and worker.is_alive():
                os.kill(worker.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    for worker in workers:
        worker.start()
    running = list(workers)
    while running:
        for sentinel in wait([w.sentinel for w in running]):
            worker = next(w for w in running if w.sentinel == sentinel)
            worker.join()
            running.remove(worker)
            if not stopping:
                log.error("worker %s exited with code %s; stopping the others", worker.pid, worker.exitcode)
                stop_all()
    failed = [w for w in workers if w.exitcode not in (0, -signal.SIGTERM, -signal.SIGINT)]
    return 1 if failed or not stopping else 0
