"""One POST to an OpenAI-compatible server, retried: shared by the chat engine
(engines/openai.py) and the embeddings backend (embeddings.py).

Timeouts, connection errors, 429 and 5xx replies, replies that are not JSON and replies that
`parse` rejects (by raising `Retryable`) are retried with exponential backoff; any other 4xx is
final. When the attempts are used up, or on a final error, the caller's `failure` exception is
raised with a message saying why.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import aiohttp

log = logging.getLogger(__name__)

T = TypeVar("T")


class Retryable(Exception):
    """This attempt failed in a way another attempt may not."""


class RetrySettings(Protocol):
    """The fields OpenAIConfig and EmbeddingsConfig share."""

    api_key_env: str
    timeout_seconds: float
    max_attempts: int
    backoff_seconds: float


def headers(settings: RetrySettings) -> dict[str, str]:
    """The bearer token from the configured environment variable (never from the file)."""
    key = os.environ.get(settings.api_key_env, "")
    return {"Authorization": f"Bearer {key}"} if key else {}


# The replies that refuse what a request carries (a text past the model's input limit: 400 from
# OpenAI, 413 or 422 from other servers), where another request may be taken; not 401, 403 or 404,
# which refuse every request alike (a wrong key, model or URL).
_REFUSING_THE_BODY = frozenset({400, 413, 422})


def refused(exc: BaseException) -> bool:
    """Whether `exc`, a caller's `failure`, is the server's final refusal of that request's body
    (_REFUSING_THE_BODY), not an outage, attempts used up or a refusal of every request."""
    return getattr(exc, "status", None) in _REFUSING_THE_BODY


async def _attempt(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], settings: RetrySettings,
    parse: Callable[[Any], T], failure: type[Exception], server: str,
) -> T:
    timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)
    try:
        async with session.post(url, json=body, headers=headers(settings), timeout=timeout) as response:
            if response.status == 429 or response.status >= 500:
                raise Retryable(f"HTTP {response.status} from the {server}")
            if response.status >= 400:
                # The body may echo the prompt, the key's name or the provider's internals: it
                # goes to the operator's log, never into what a user sees (attention points).
                log.warning("%s answered HTTP %s: %s", server, response.status,
                            (await response.text())[:2000])
                error = failure(f"HTTP {response.status} from the {server} (details in the service log)")
                error.status = response.status  # type: ignore[attr-defined]  # (refused())
                raise error
            try:
                payload = await response.json(content_type=None)
            except ValueError:
                raise Retryable("malformed reply: not JSON") from None
    except TimeoutError:
        raise Retryable(f"no reply within {settings.timeout_seconds:g} s") from None
    except aiohttp.ClientError as exc:
        raise Retryable(f"connection failed: {type(exc).__name__}") from None
    return parse(payload)


async def post_with_retries(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    settings: RetrySettings,
    parse: Callable[[Any], T],
    failure: type[Exception],
    what: str,
    server: str,
) -> T:
    """`parse(reply JSON)` of the first attempt that succeeds; `what` names the call in the log
    ("model", "embeddings"), `server` the server in messages ("model server")."""
    delay = settings.backoff_seconds
    last = "no attempt made"
    for attempt in range(1, settings.max_attempts + 1):
        try:
            return await _attempt(session, url, body, settings, parse, failure, server)
        except Retryable as exc:
            last = str(exc)
            log.warning("%s attempt %d/%d failed: %s", what, attempt, settings.max_attempts, last)
        if attempt < settings.max_attempts:
            await asyncio.sleep(delay)
            delay *= 2
    raise failure(f"{settings.max_attempts} attempts failed; last: {last}")
