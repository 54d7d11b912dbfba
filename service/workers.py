"""Serving: one process, or N worker processes sharing one port (SO_REUSEPORT).

Kept out of `__main__`: `multiprocessing`'s spawn start method pickles the worker function by
module and name, and `python -m service` runs the CLI as `__main__`, where a child cannot find it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import tempfile

from . import logs
from .config import Config
from .metrics import MULTIPROC_ENV

log = logging.getLogger("service")


def serve_worker(config: Config) -> None:
    """One service process: the app on the shared port until SIGINT or SIGTERM.

    SIGTERM stops accepting, lets in-flight requests finish for up to `shutdown_timeout` seconds,
    then runs the app's cleanup (pool closed, scheduler drained).
    """
    from aiohttp import web

    from .app import create_app

    logs.setup(config.logging)
    web.run_app(
        create_app(config),
        host=config.server.host,
        port=config.server.port,
        reuse_port=config.server.workers > 1,
        access_log_class=logs.AccessLogger,
        shutdown_timeout=config.server.shutdown_timeout,
        print=None,
        handler_cancellation=True,
    )


def run_workers(config: Config) -> None:
    """N processes on one port; signals are passed on, then we wait for all of them."""
    metrics_dir = None
    if config.metrics.enabled and not os.environ.get(MULTIPROC_ENV):
        # Multiprocess mode: every worker writes its samples here; /metrics on any worker sums them.
        # Set before the workers start, because prometheus-client reads it at import.
        metrics_dir = tempfile.mkdtemp(prefix="rfp-metrics-")
        os.environ[MULTIPROC_ENV] = metrics_dir
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=serve_worker, args=(config,)) for _ in range(config.server.workers)]
    for worker in workers:
        worker.start()

    def forward(signum: int, _frame: object) -> None:
        for worker in workers:
            if worker.pid and worker.is_alive():
                os.kill(worker.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        for worker in workers:
            worker.join()
    finally:
        if metrics_dir:
            os.environ.pop(MULTIPROC_ENV, None)
            shutil.rmtree(metrics_dir, ignore_errors=True)
    failed = [w.exitcode for w in workers if w.exitcode]
    if failed:
        log.warning("worker exit codes: %s", failed)
