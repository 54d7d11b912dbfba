"""The app's shared objects, reached through typed `web.AppKey`s (no module-level state)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg
from aiohttp import web

from .config import Config
from .mail import MailSender
from .passwords import Passwords

if TYPE_CHECKING:  # the pipeline imports auth, which imports these keys
    from .embeddings import Indexer
    from .events import QuestionEvents
    from .pipeline import Pipeline

CONFIG = web.AppKey("config", Config)
POOL = web.AppKey("pool", asyncpg.Pool)
PASSWORDS = web.AppKey("passwords", Passwords)
MAIL_SENDER = web.AppKey("mail_sender", MailSender)
PIPELINE: web.AppKey[Pipeline] = web.AppKey("pipeline")
EVENTS: web.AppKey[QuestionEvents] = web.AppKey("question_events")
# The embeddings indexer when a backend is configured (absent otherwise).
INDEXER: web.AppKey[Indexer] = web.AppKey("embeddings_indexer")
