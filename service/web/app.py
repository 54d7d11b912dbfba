"""`create_app(config)`: the one factory. Shared objects, middlewares and every route."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import difflib
import logging
import time
from collections.abc import AsyncIterator

import aiohttp
import aiojobs
from aiohttp import web

from .. import db
from ..answering import embeddings
from ..answering.engines import AnswerEngine
from ..config import Config, ConfigError
from ..domain import housekeeping
from ..metrics import Metrics
from ..web import openapi
from .auth import MemberShares
from .frontdoor import guarded_routes, refuse_unguarded
from .keys import (
    BODIES,
    CONFIG,
    DELIVERER,
    EVENTS,
    EXPORTS,
    INDEXER,
    METRICS,
    OPEN_STREAMS,
    PIPELINE,
    POOL,
    SHARES,
    UPLOADS,
)
from .pages import common as pages_common
from .pages.routes import routes as page_routes
from .protocol import serve_parser_errors_as_json
from .telemetry import metrics_middleware
from .views import audit as audit_views
from .views import health, knowledge, members, question_events, questions, review, rfp_items, rfps
from .views import webhooks as webhook_views
from .views.health import get_metrics

log = logging.getLogger(__name__)


def routes() -> list[web.RouteDef]:
    """Every route of the service. The name keys rate limits (config `rate_limits.<name>`)."""
    return [
        web.get("/healthz", health.healthz, name="healthz", allow_head=False),
        web.get("/readyz", health.readyz, name="readyz", allow_head=False),
        web.post("/api/v1/rfps", rfps.post_rfp, name="create_rfp"),
        web.get("/api/v1/rfps/search", rfps.search_rfps, name="search_rfps", allow_head=False),
        web.get("/api/v1/rfps/{id}", rfps.get_rfp, name="get_rfp", allow_head=False),
        web.patch("/api/v1/rfps/{id}", rfps.patch_rfp, name="update_rfp"),
        web.get(
            "/api/v1/rfps/{id}/rfp_items", rfps.list_rfp_items, name="list_rfp_items",
            allow_head=False,
        ),
        web.post("/api/v1/rfps/{id}/rfp_items", rfp_items.post_rfp_items, name="create_rfp_items"),
        web.post(
            "/api/v1/rfps/{id}/rfp_items/import", rfp_items.import_rfp_items, name="import_rfp_items"
        ),
        web.get(
            "/api/v1/rfps/{id}/rfp_items/{item_id}", rfp_items.get_rfp_item, name="get_rfp_item",
            allow_head=False,
        ),
        web.patch(
            "/api/v1/rfps/{id}/rfp_items/{item_id}", rfp_items.patch_rfp_item, name="review_rfp_item"
        ),
        web.get(
            "/api/v1/rfp_items", rfp_items.list_assigned_items, name="list_assigned_rfp_items",
            allow_head=False,
        ),
        web.post("/api/v1/rfps/{id}/answer", rfp_items.answer_rfp, name="answer_rfp"),
        web.get("/api/v1/rfps/{id}/export", rfp_items.export_rfp, name="export_rfp", allow_head=False),
        web.post("/api/v1/users", members.post_user, name="create_user"),
        web.post(
            "/api/v1/users/confirmation", members.post_confirmation, name="confirm_email"
        ),
        web.get(
            "/api/v1/users/confirmation", members.get_confirmation, name="confirm_email_link",
            allow_head=False,
        ),
        web.post("/api/v1/tokens", members.post_token, name="create_token"),
        web.post("/api/v1/invitations", members.post_invitation, name="create_invitation"),
        web.get(
            "/api/v1/invitations", members.list_invitations, name="list_invitations",
            allow_head=False,
        ),
        web.post(
            "/api/v1/invitations/{id}/revoke", members.revoke_invitation, name="revoke_invitation"
        ),
        web.get(
            "/api/v1/invitations/{token}", members.get_invitation, name="get_invitation",
            allow_head=False,
        ),
        web.post(
            "/api/v1/invitations/{token}/accept", members.accept_invitation,
            name="accept_invitation",
        ),
        web.get("/api/v1/members", members.list_members, name="list_members", allow_head=False),
        # -- accounts hardening (issue 17): members, tokens, passwords --
        web.patch("/api/v1/members/{id}", members.patch_member, name="change_member_role"),
        web.delete("/api/v1/members/{id}", members.delete_member, name="remove_member"),
        web.get(
            "/api/v1/members/{id}/tokens", members.list_member_tokens, name="list_member_tokens",
            allow_head=False,
        ),
        web.delete("/api/v1/tokens/{id}", members.delete_token, name="revoke_token"),
        web.post("/api/v1/users/password", members.post_password, name="change_password"),
        web.post(
            "/api/v1/users/password/reset", members.post_password_reset,
            name="request_password_reset",
        ),
        web.post(
            "/api/v1/users/password/reset/complete", members.post_password_reset_complete,
            name="reset_password",
        ),
        web.post("/api/v1/questions", questions.post_question, name="ask_question"),
        web.get(
            "/api/v1/questions/{id}", questions.get_question, name="get_question", allow_head=False
        ),
        web.post("/api/v1/questions/{id}/review", review.post_review, name="review_question"),
        web.get(
            "/api/v1/questions/{id}/events", question_events.question_events, name="question_events",
            allow_head=False,
        ),
        web.post(
            "/api/v1/knowledge_base_items", knowledge.post_item, name="create_knowledge_base_item"
        ),
        web.get(
            "/api/v1/knowledge_base_items", knowledge.list_items, name="list_knowledge_base_items",
            allow_head=False,
        ),
        web.post(
            "/api/v1/knowledge_base_items/import", knowledge.import_items,
            name="import_knowledge_base_items",
        ),
        # Library care (issue 20); before /{id}, which would match "duplicates".
        web.get(
            "/api/v1/knowledge_base_items/duplicates", knowledge.get_duplicates,
            name="knowledge_base_duplicates", allow_head=False,
        ),
        web.patch(
            "/api/v1/knowledge_base_items/{id}", knowledge.patch_item,
            name="update_knowledge_base_item",
        ),
        web.post(
            "/api/v1/knowledge_base_items/{id}/reviewed", knowledge.post_reviewed,
            name="review_knowledge_base_item",
        ),
        web.get(
            "/api/v1/knowledge_base_items/{id}/versions", knowledge.get_versions,
            name="knowledge_base_item_versions", allow_head=False,
        ),
        web.post(
            "/api/v1/knowledge_base_items/{id}/merge", knowledge.post_merge,
            name="merge_knowledge_base_items",
        ),
        web.get(
            "/api/v1/knowledge_base_items/{id}", knowledge.get_item, name="get_knowledge_base_item",
            allow_head=False,
        ),
        web.delete(
            "/api/v1/knowledge_base_items/{id}", knowledge.delete_item,
            name="delete_knowledge_base_item",
        ),
        # -- webhooks and the audit log (issue 21) --
        web.post(
            "/api/v1/webhook_endpoints", webhook_views.post_endpoint, name="create_webhook_endpoint"
        ),
        web.get(
            "/api/v1/webhook_endpoints", webhook_views.list_endpoints,
            name="list_webhook_endpoints", allow_head=False,
        ),
        web.get(
            "/api/v1/webhook_endpoints/{id}", webhook_views.get_endpoint,
            name="get_webhook_endpoint", allow_head=False,
        ),
        web.patch(
            "/api/v1/webhook_endpoints/{id}", webhook_views.patch_endpoint,
            name="update_webhook_endpoint",
        ),
        web.delete(
            "/api/v1/webhook_endpoints/{id}", webhook_views.delete_endpoint,
            name="delete_webhook_endpoint",
        ),
        web.get(
            "/api/v1/webhook_endpoints/{id}/deliveries", webhook_views.list_deliveries,
            name="list_webhook_deliveries", allow_head=False,
        ),
        web.post(
            "/api/v1/webhook_endpoints/{id}/deliveries/{delivery_id}/retry",
            webhook_views.retry_delivery, name="retry_webhook_delivery",
        ),
        web.get(
            "/api/v1/audit_events", audit_views.list_audit_events, name="list_audit_events",
            allow_head=False,
        ),
        web.get("/api/v1/openapi.json", openapi.get_openapi, name="openapi", allow_head=False),
        web.get("/docs", openapi.get_docs, name="docs", allow_head=False),
        web.get("/docs/init.js", openapi.get_docs_init, name="docs_init", allow_head=False),
        web.get("/docs/assets/{name}", openapi.get_docs_asset, name="docs_asset", allow_head=False),
        # The web app behind web_link (service/web/pages): pages, not API; not in the OpenAPI.
        *page_routes(),
    ]


def check_rate_limits(config: Config) -> None:
    """Refuse a `[rate_limits.<name>]` that names no route: a misspelt name would limit nothing,
    and, replacing the default section, leave asking unlimited."""
    names = {route.kwargs.get("name") for route in routes()}
    unknown = sorted(set(config.rate_limits) - names)
    if unknown:
        raise ConfigError("invalid configuration: " + "; ".join(
            f"rate_limits.{name}: no route has this name ("
            + "".join(f"did you mean {m}? " for m in difflib.get_close_matches(name, names, n=1))
            + "the names are in service/web/app.py routes())"
            for name in unknown
        ))


def create_app(config: Config) -> web.Application:
    """The service's application; `config.database.url` must name a reachable database."""
    if not config.database.url:
        raise ValueError("create_app needs config.database.url (start the embedded server first)")
    check_rate_limits(config)
    # The request id, errors, auth and rate limits wrap each handler (service/middleware.py); an
    # aiohttp middleware only when metrics are on: it sees the rendered status.
    middlewares = [metrics_middleware] if config.metrics.enabled else []
    app = web.Application(client_max_size=config.server.max_body_bytes, middlewares=middlewares)
    app[CONFIG] = config
    # Always present, so code may count unconditionally; exposed only when enabled.
    app[METRICS] = Metrics()
    app[OPEN_STREAMS] = collections.Counter()
    app[EXPORTS] = rfp_items.export_turns(config.server)
    app[UPLOADS] = collections.Counter()
    app[BODIES] = collections.Counter()
    app[SHARES] = MemberShares(config.database.max_connections_per_member)
    pages_common.setup(app)  # the web app's templates
    app.cleanup_ctx.append(_pool)
    app.cleanup_ctx.append(members.passwords_context)
    app.cleanup_ctx.append(rfp_items.parsers_context)
    app.cleanup_ctx.append(members.mail_sender_context)  # after _pool: it uses the pool
    app.cleanup_ctx.append(webhook_views.deliverer_context)  # after _pool: it uses the pool
    app.cleanup_ctx.append(_pipeline)
    app.cleanup_ctx.append(knowledge.library_context)  # after _pool: it uses the pool
    app.cleanup_ctx.append(_housekeeping)  # after _pool: it uses the pool
    extra = [web.get("/metrics", get_metrics, name="metrics", allow_head=False)]
    app.add_routes(guarded_routes(routes() + (extra if config.metrics.enabled else []), config))
    app.on_startup.append(refuse_unguarded)
    serve_parser_errors_as_json(app)  # the HTTP parser's 400s in the error shape, logged briefly
    return app


async def _pool(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    pool = await db.create_pool(config.database.url, config,
                                acquire_timeout=config.database.acquire_timeout_seconds)
    app[POOL] = pool
    yield
    await pool.close()


async def _housekeeping(app: web.Application) -> AsyncIterator[None]:
    """This process's hourly sweep of rows nothing reads any more (domain/housekeeping.py)."""
    task = asyncio.create_task(housekeeping.run(app[POOL], app[CONFIG]), name="housekeeping")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def make_engine(app: web.Application, session: aiohttp.ClientSession) -> AnswerEngine:
    config = app[CONFIG]
    if config.questions.engine == "openai":
        from ..answering.engines.openai import OpenAIEngine

        return OpenAIEngine(config.openai, session)
    from ..answering.engines.local import LocalEngine

    return LocalEngine()


async def _pipeline(app: web.Application) -> AsyncIterator[None]:
    """The question pipeline, its event listener and the model client, started and stopped together."""
    config = app[CONFIG]
    from ..answering.events import QuestionEvents
    from ..answering.pipeline import Pipeline

    # The pipeline's own pool: under a flood of requests, answering must not queue behind asking.
    pool = await db.create_pool(
        config.database.url, config, min_size=1, max_size=config.questions.pool_size
    )
    session = aiohttp.ClientSession()
    scheduler = aiojobs.Scheduler(limit=None, close_timeout=1.0)
    try:
        embedder = embeddings.make_embedder(config.embeddings, session)
        if embedder is not None:
            async with pool.acquire() as conn:
                embedder = await embeddings.usable_embedder(conn, embedder)
    except BaseException:
        await session.close()
        await pool.close()
        raise
    pipeline = Pipeline(
        pool, make_engine(app, session), config.questions, scheduler, embedder, app[METRICS]
    )
    pipeline.web_base_url = config.server.web_base_url
    listen_url = db.session_url(config)
    if listen_url is None:
        log.warning(
            "database.pooler is %s and database.direct_url is empty: question events are polled "
            "every %g s instead of listened for (set direct_url to PostgreSQL itself for LISTEN)",
            config.database.pooler, config.questions.poll_seconds,
        )
    events = QuestionEvents(listen_url, pipeline.wake)
    pipeline.on_commit = events.deliver  # this process's streams get its commits without a read
    deliverer = app.get(DELIVERER)
    if deliverer is not None:
        pipeline.on_webhooks = deliverer.wake
    await events.connect()
    app[PIPELINE] = pipeline
    app[EVENTS] = events

    async def stop_pipeline(_app: web.Application) -> None:
        # on_shutdown runs before aiohttp waits for in-flight requests: both drain together.
        pipeline.stop()
        stopping_since[0] = time.monotonic()
        log.info("stopping: in-flight requests and the steps of %d question(s) get up to %g s to finish; "
                 "each question is then handed back to be resumed by any process",
                 len(pipeline.active), config.server.shutdown_timeout)

    stopping_since = [0.0]
    app.on_shutdown.append(stop_pipeline)
    background = [
        asyncio.create_task(pipeline.run(), name="pipeline"),
        asyncio.create_task(events.keep_connected(config.questions.poll_seconds), name="listen"),
    ]
    if embedder is not None:
        indexer = embeddings.Indexer(pool, embedder, config.embeddings)
        app[INDEXER] = indexer
        background.append(asyncio.create_task(indexer.run(), name="embeddings"))
    try:
        yield
    finally:
        for task in background:
            task.cancel()
        # A task cancelled inside a query may end in a driver error instead of CancelledError;
        # either way it is over, and shutdown must go on.
        await asyncio.gather(*background, return_exceptions=True)
        pipeline.stop()  # (already, unless the app stops without a shutdown)
        # Let the steps in flight finish and be stored, within the shutdown timeout; each
        # question then hands back its lease. Whatever is still running after that is cancelled
        # and released below.
        waited = time.monotonic() - stopping_since[0] if stopping_since[0] else 0.0
        await pipeline.drain(max(0.0, config.server.shutdown_timeout - waited))
        unfinished = set(pipeline.active)
        try:
            await scheduler.close()
            with contextlib.suppress(Exception):
                await pipeline.release(unfinished)
            log.info("stopped: %d question step(s) cut off at the shutdown timeout", len(unfinished))
        finally:
            await events.close()
            await session.close()
            await pool.close()
