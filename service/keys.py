"""The app's shared objects, reached through typed `web.AppKey`s (no module-level state)."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from .config import Config

CONFIG = web.AppKey("config", Config)
POOL = web.AppKey("pool", asyncpg.Pool)
