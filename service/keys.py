"""The app's shared objects, reached through typed `web.AppKey`s (no module-level state)."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from .config import Config
from .mail import MailSender
from .passwords import Passwords

CONFIG = web.AppKey("config", Config)
POOL = web.AppKey("pool", asyncpg.Pool)
PASSWORDS = web.AppKey("passwords", Passwords)
MAIL_SENDER = web.AppKey("mail_sender", MailSender)
