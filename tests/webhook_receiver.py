"""A real webhook receiver on loopback for the tests: an aiohttp server that records each request
(verified the documented way, docs/webhooks.md) and can be told to fail or be stopped."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from typing import Any

import attrs
from aiohttp import web


def verify(secret: str, headers: Any, body: bytes) -> bool:
    """The procedure docs/webhooks.md gives a receiver, step by step, without any library."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, stamp = headers["webhook-id"], headers["webhook-timestamp"]
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(signature, expected)
        for version, _, signature in (s.partition(",") for s in headers["webhook-signature"].split())
    )


@attrs.define
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)


class Receiver:
    """`await start()`, then `url`; `fail_with` answers every request with that status;
    `delay` makes each answer wait (a slow receiver); `extra` changes the answer (`pad`: that
    many more bytes, `redirect`: a 302 there, `body`/`status`: exactly those bytes, `cookie`: a
    Set-Cookie of that name and value)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: list[Received] = []
        self.fail_with: int | None = None
        self.delay = 0.0
        self.extra: dict[str, Any] = {}
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_with is not None:
            return web.Response(status=self.fail_with, text="not now")
        self.received.append(Received(dict(request.headers), body))
        if "redirect" in self.extra:
            raise web.HTTPFound(self.extra["redirect"])
        if "body" in self.extra:  # raw bytes, as a receiver may answer anything
            return web.Response(status=self.extra.get("status", 200), body=self.extra["body"])
        response = web.Response(text="ok " + "x" * self.extra.get("pad", 0))
        if "cookie" in self.extra:  # (name, value): as a receiver behind a load balancer may
            response.set_cookie(*self.extra["cookie"])
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hooks", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_for(self, count: int, within_seconds: float = 15.0) -> list[Received]:
        async with asyncio.timeout(within_seconds):
            while len(self.received) < count:  # noqa: ASYNC110  (the server runs in this loop)
                await asyncio.sleep(0.02)
        return self.received[:count]


def fast_webhooks(**extra: Any) -> dict[str, Any]:
    """Settings for a receiver on loopback with quick retries."""
    return {"allow_private_addresses": True, "retry_base_seconds": 0.1,
            "retry_max_interval_seconds": 0.5, "timeout_seconds": 2.0,
            "poll_interval_seconds": 0.05, **extra}
