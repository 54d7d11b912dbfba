"""The app's shared objects, reached through typed `web.AppKey`s (no module-level state).

This module imports nothing of the service at run time (only types, for checkers), so any module
may import it without closing an import cycle; each object's lifetime (`cleanup_ctx`) sits beside
its factory in service/web/app.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from collections import Counter

    import asyncpg

    from ..answering.embeddings import Indexer
    from ..answering.events import QuestionEvents
    from ..answering.pipeline import Pipeline
    from ..config import Config
    from ..domain.isolation import IsolatedWorkers, Turns
    from ..domain.mail import MailSender
    from ..domain.passwords import Passwords
    from ..domain.webhooks import Deliverer
    from ..metrics import Metrics
    from .auth import MemberShares

CONFIG: web.AppKey[Config] = web.AppKey("config")
POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool")
PASSWORDS: web.AppKey[Passwords] = web.AppKey("passwords")
MAIL_SENDER: web.AppKey[MailSender] = web.AppKey("mail_sender")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
# Child processes that parse uploaded questionnaires (config [uploads]).
PARSERS: web.AppKey[IsolatedWorkers] = web.AppKey("parsers")
# Turns of the exports being read and built (server.export_workers).
EXPORTS: web.AppKey[Turns] = web.AppKey("exports")
PIPELINE: web.AppKey[Pipeline] = web.AppKey("pipeline")
EVENTS: web.AppKey[QuestionEvents] = web.AppKey("question_events")
# Pooled connections held per member id, in this process (database.max_connections_per_member).
SHARES: web.AppKey[MemberShares] = web.AppKey("member_shares")
# What each member holds at once in this process, per member id (counted by ratelimit.held_at_most):
# request bodies (JSON, forms) being received (server.max_bodies_per_member),
BODIES: web.AppKey[Counter[str]] = web.AppKey("bodies")
# uploads being received or parsed (uploads.max_uploads_per_member),
UPLOADS: web.AppKey[Counter[str]] = web.AppKey("uploads")
# open question event streams (server.max_streams_per_member).
OPEN_STREAMS: web.AppKey[Counter[str]] = web.AppKey("open_streams")
# The embeddings indexer when a backend is configured (absent otherwise).
INDEXER: web.AppKey[Indexer] = web.AppKey("embeddings_indexer")
# Library care (issue 20): the background duplicate runs in progress, by account id.
LIBRARY_JOBS: web.AppKey[dict] = web.AppKey("library_jobs", dict)
# This process's webhook deliverer (service/domain/webhooks.py).
DELIVERER: web.AppKey[Deliverer] = web.AppKey("webhook_deliverer")
