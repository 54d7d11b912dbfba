"""Prometheus metrics: every metric object of the service, in one per-app registry.

Each `create_app` gets its own `Metrics` (own `CollectorRegistry`), so several apps in one process
(the tests) never share or collide. Code that counts something reaches it with
`request.app[METRICS]` (service/web/keys.py), or is handed it (the pipeline); it is always
present, and counting costs next to nothing when `[metrics] enabled = false` (then only the
`/metrics` route and the timing middleware are absent).

Names (all prefixed `rfp_`):

| metric | type | labels | what |
|---|---|---|---|
| rfp_http_requests_total | counter | route, method, status | requests answered, by route name |
| rfp_http_request_duration_seconds | histogram | route, method | time to answer |
| rfp_pipeline_queue_depth | gauge | | questions scheduled or running in this process |
| rfp_pipeline_step_duration_seconds | histogram | step, outcome | one step (ok, retry, failed) |
| rfp_credits_debited_total | counter | reason | credits taken from accounts (refunds not subtracted) |
| rfp_credits_refunded_total | counter | reason | credits given back |
| rfp_rate_limit_rejections_total | counter | route | requests refused with 429 |

Debit reasons: `question` (POST /api/v1/questions), `rfp_item` (POST /api/v1/rfps/{id}/answer,
one question per item). `route` is the aiohttp route name from service/app.py (`unmatched` for
unknown paths), never the raw path, so the label set stays small.

Several worker processes (`serve --workers N`): prometheus-client's multiprocess mode. `serve`
points PROMETHEUS_MULTIPROC_DIR at a fresh directory before it starts the workers, each worker
writes its samples there, and `/metrics` on any worker reports the sum over all of them (gauges:
`livesum`). One scrape of the shared port therefore sees the whole service.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Request latencies of this service sit between ~1 ms and a few seconds.
_HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Pipeline steps include engine calls that may take tens of seconds.
_STEP_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    """The service's metric objects, registered in `self.registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "rfp_http_requests", "HTTP requests answered, by route name, method and status.",
            ["route", "method", "status"], registry=r,
        )
        self.http_request_duration = Histogram(
            "rfp_http_request_duration_seconds", "Time to answer an HTTP request, by route name.",
            ["route", "method"], buckets=_HTTP_BUCKETS, registry=r,
        )
        self.pipeline_queue_depth = Gauge(
            "rfp_pipeline_queue_depth", "Questions scheduled or running in the pipeline.",
            registry=r, multiprocess_mode="livesum",
        )
        self.pipeline_step_duration = Histogram(
            "rfp_pipeline_step_duration_seconds", "Duration of one question pipeline step.",
            ["step", "outcome"], buckets=_STEP_BUCKETS, registry=r,
        )
        self.credits_debited = Counter(
            "rfp_credits_debited", "Credits debited from accounts.", ["reason"], registry=r,
        )
        self.credits_refunded = Counter(
            "rfp_credits_refunded", "Credits refunded to accounts.", ["reason"], registry=r,
        )
        self.rate_limit_rejections = Counter(
            "rfp_rate_limit_rejections", "Requests refused by a rate limit (429).", ["route"],
            registry=r,
        )

    def exposition(self) -> bytes:
        """The text format of every sample; across all worker processes in multiprocess mode."""
        directory = os.environ.get(MULTIPROC_ENV)
        if directory:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=directory)
            return generate_latest(registry)
        return generate_latest(self.registry)
