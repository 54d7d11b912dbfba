"""Webhooks: an account's endpoints, the events written to an outbox in the transaction of the
change they report (`emit`), and the deliverer that sends them following Standard Webhooks.

Delivery is at least once: a delivery is claimed with `FOR UPDATE SKIP LOCKED` and a lease
(`next_attempt_at` moves past the attempt's timeout), so several processes never send it at
once and one whose process died is sent again when the lease runs out. Of one endpoint's
deliveries about one record, only the oldest pending one is ever claimed, so each receiver sees
a record's events in order. A failing delivery is retried with exponential backoff for
`webhooks.retry_for_seconds` (a day); then it fails and its endpoint is disabled, with the reason
on the endpoint. Signing is the `standardwebhooks` reference implementation (docs/webhooks.md
shows how a receiver verifies).

Safety (a tenant must not reach the service's own network): only http(s); unless
`webhooks.allow_private_addresses`, a URL whose host is, or resolves to, a loopback, link-local,
private or otherwise non-global address is refused. The check sits in the resolver the HTTP
client connects through, so the address checked is the address connected to (no window for DNS
rebinding between a check and the connection). A name that does not resolve is refused the same
way, in the same words and with the same next attempt (`AddressRefused`), so that the delivery log
does not tell an admin which internal names exist. Redirects are not followed, and at most
`max_response_bytes` of a response are read.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import attrs
import orjson
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from standardwebhooks.webhooks import Webhook

from .. import db
from ..config import WebhooksConfig
from .convert import HttpUrl, at_most, timestamp
from .errors import NotFound, ValidationFailed
from .ids import new_id
from .outbox import OutboxSender

log = logging.getLogger(__name__)

# A failing endpoint's failed attempts are logged at most once in this many seconds each (the
# line counts those left out since): a probe's endpoint with thousands of deliveries pending logged
# ~850 lines a minute. Every attempt stays in the delivery log (the API's).
FAILURE_LOG_SECONDS = 60.0

EVENT_TYPES = (
    "question.completed",
    "rfp.items_imported",
    "rfp.answered",
    "rfp_item.approved",
    "rfp_item.assigned",
    "rfp.approved",
    "knowledge_base_item.created",
    "knowledge_base_item.updated",
    "knowledge_base_item.deleted",
    "member.created",
)
MAX_URL = 2048
SECRET_PREFIX = "whsec_"
USER_AGENT = "rfp-service-webhooks/1"


# -- addresses ---------------------------------------------------------------------------


# IPv6 prefixes that carry an IPv4 address in their last 32 bits (a NAT64 gateway connects to it),
# and NAT64's local-use prefix, whose translation the network decides (RFC 8215): refused.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
# IPv4-translated addresses (::ffff:0:a.b.c.d, RFC 2765): a stateless translator (SIIT) connects
# to the IPv4 address. Not IPv4-mapped: Python's ipv4_mapped and is_global miss them.
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: IPv4-compatible (::a.b.c.d), NAT64
    (64:ff9b::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), 6to4 (2002:aabb:ccdd::) and Teredo
    (its server and client)."""
    found = []
    if ip.packed[:12] == bytes(12) or ip in _NAT64 or ip in _IPV4_TRANSLATED:
        found.append(ipaddress.IPv4Address(ip.packed[12:]))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def address_is_public(address: str) -> bool:
    """Whether an IP address is one a tenant's webhook may reach: globally routable, not
    loopback, link-local, private, shared (CGNAT), reserved or multicast; an IPv6 address that
    carries an IPv4 one (mapped, compatible, NAT64, translated, 6to4, Teredo) only if that one is public
    too, since a gateway may connect to it."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id is not part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return False
        if not all(v4.is_global and not v4.is_multicast for v4 in _embedded_ipv4(ip)):
            return False
    return ip.is_global and not ip.is_multicast


def _ip_literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _connected_host(url: str) -> str:
    """The host aiohttp connects to for `url`: yarl's, normalised as IDNA normalises it, so that
    127.0.0.1 written with ideographic full stops (U+3002), fullwidth digits (U+FF11 …) or
    circled ones (U+2460 …) is the IP literal 127.0.0.1 it is connected to without a look-up.
    urlsplit's keeps the text as written, which is no IP literal, and so let them past the check.
    Raises ValueError for a URL yarl cannot read."""
    return yarl.URL(url).raw_host or ""


def url_problems(url: str, allow_private: bool) -> list[str]:
    """Why `url` cannot be an endpoint (empty: it can). Host names are checked again, resolved,
    on every delivery."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (raises on a port that is not a number)
        connected = _connected_host(url)
    except ValueError:
        return [f"webhook_endpoint.url: is not a valid URL; got {url!r}"]
    if parts.scheme not in ("http", "https") or not host:
        return [f"webhook_endpoint.url: must be an absolute http(s) URL; got {url!r}"]
    if parts.username is not None or parts.password is not None:
        return ["webhook_endpoint.url: must not carry a user name or password"]
    if allow_private:
        return []
    name = connected.rstrip(".").lower()  # `localhost.` is localhost
    literal = _ip_literal(name)
    if (literal is not None and not address_is_public(literal)) or name == "localhost" or \
            name.endswith(".localhost"):
        return [f"webhook_endpoint.url: {host} is a loopback, link-local or private address; "
                "webhooks go to public addresses only"]
    return []


class AddressRefused(OSError):
    """A host resolves to no address a webhook may reach, or to none at all. Its message is one
    for both: it goes to the delivery log, which the account's admins read, and telling the two
    apart would let them learn which names exist in the service's own network (one that resolves
    only to private addresses is an internal host). `detail` says which, for the service's log."""

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(f"refused: {host} resolves to no public address")
        self.detail = detail


class PublicAddressResolver(AbstractResolver):
    """Resolves as usual, then keeps only public addresses (unless private ones are allowed);
    aiohttp connects only to what its resolver returns."""

    def __init__(self, allow_private: bool) -> None:
        self._inner = DefaultResolver()
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            found = await self._inner.resolve(host, port, family)
        except OSError as exc:  # socket.gaierror: no such name, or no answer
            if self._allow_private:  # no internal name to hide: the resolver's own words
                raise
            raise AddressRefused(host, f"{host} does not resolve ({exc})") from None
        if self._allow_private:
            return found
        public = [r for r in found if address_is_public(r["host"])]
        if not public:
            # The message goes to the delivery log, which the account's admins read: the
            # addresses stay out of it (they map the service's own network: a tenant naming
            # db.internal learnt its address), and go only to the service's debug log.
            log.debug("webhook host %s resolves to %s, no public address", host,
                      ", ".join(sorted({r["host"] for r in found})))
            raise AddressRefused(host, f"{host} resolves only to non-public addresses")
        return public

    async def close(self) -> None:
        await self._inner.close()


# -- endpoints ---------------------------------------------------------------------------


def _event_types(instance: object, attribute: attrs.Attribute, value: list[str]) -> None:
    unknown = [t for t in value if t not in EVENT_TYPES]
    if unknown:
        # The first few, each cut short: the reply repeated every value given, as long as given.
        named = ", ".join(repr(t if len(t) <= 60 else t[:60] + "…") for t in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise ValueError(f"unknown event types {named}{more}; known: {', '.join(EVENT_TYPES)}")
    if not value:
        raise ValueError("must name at least one event type")


@attrs.frozen(kw_only=True)
class EndpointInput:
    """An endpoint's editable fields; also a PATCH merged over the stored ones."""

    url: HttpUrl = attrs.field(validator=at_most(MAX_URL))
    event_types: list[str] = attrs.field(validator=_event_types)
    description: str | None = attrs.field(default=None, validator=at_most(500))
    enabled: bool = True


def endpoint_json(row: Mapping[str, Any], secret: str | None = None) -> dict[str, Any]:
    """An endpoint as the API shows it; the secret only when it was just made."""
    out = {
        "id": row["id"],
        "url": row["url"],
        "event_types": list(row["event_types"]),
        "description": row["description"],
        "enabled": row["enabled"],
        "disabled_reason": row["disabled_reason"],
        "created_at": timestamp(row["created_at"]),
        "updated_at": timestamp(row["updated_at"]),
    }
    if secret is not None:
        out["secret"] = secret
    return out


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _check(data: EndpointInput, config: WebhooksConfig) -> None:
    problems = url_problems(data.url, config.allow_private_addresses)
    if problems:
        raise ValidationFailed(problems)


async def create_endpoint(
    conn: asyncpg.Connection, account_id: str, data: EndpointInput, config: WebhooksConfig
) -> tuple[asyncpg.Record, str]:
    """Store a new endpoint: (its row, its secret, which is never shown again). Call it in a
    transaction: the account's endpoints are counted under a lock held until it ends."""
    _check(data, config)
    await conn.execute(db.query("lock_account_webhook_endpoints"), account_id)
    if await conn.fetchval(db.query("count_webhook_endpoints"), account_id) >= \
            config.max_endpoints_per_account:
        raise ValidationFailed([
            f"webhook_endpoint: an account has at most {config.max_endpoints_per_account} "
            "endpoints (webhooks.max_endpoints_per_account); delete one, or let one endpoint "
            "take more event types"
        ])
    secret = new_secret()
    row = await conn.fetchrow(
        db.query("insert_webhook_endpoint"), new_id("whep"), account_id, data.url,
        sorted(set(data.event_types)), data.description, secret, data.enabled,
    )
    return row, secret


async def fetch_endpoint(
    conn: asyncpg.Connection, endpoint_id: str, account_id: str, *, lock: bool = False
) -> asyncpg.Record:
    row = await conn.fetchrow(
        db.query("lock_webhook_endpoint" if lock else "get_webhook_endpoint"), endpoint_id,
        account_id,
    )
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id} in this account")
    return row


async def update_endpoint(
    conn: asyncpg.Connection, account_id: str, endpoint_id: str, fields: dict[str, Any],
    config: WebhooksConfig,
) -> tuple[asyncpg.Record, asyncpg.Record]:
    """Apply a PATCH in the caller's transaction: (the row before, the row after)."""
    from .convert import structure

    current = await fetch_endpoint(conn, endpoint_id, account_id, lock=True)
    stored = {"url": current["url"], "event_types": list(current["event_types"]),
              "description": current["description"], "enabled": current["enabled"]}
    data = structure(stored | fields, EndpointInput, root="webhook_endpoint")
    _check(data, config)
    row = await conn.fetchrow(
        db.query("update_webhook_endpoint"), endpoint_id, data.url, sorted(set(data.event_types)),
        data.description, data.enabled,
    )
    return current, row


def delivery_json(row: Mapping[str, Any]) -> dict[str, Any]:
    def ts(value: datetime | None) -> str | None:
        return None if value is None else timestamp(value)

    return {
        "id": row["id"],
        "event_id": row["event_id"],
        "event_type": row["event_type"],
        "record_id": row["record_id"],
        "state": row["state"],
        "attempts": row["attempts"],
        "next_attempt_at": ts(row["next_attempt_at"]) if row["state"] == "pending" else None,
        "retry_until": ts(row["retry_until"]),
        "last_attempt_at": ts(row["last_attempt_at"]),
        "last_status": row["last_status"],
        "last_error": row["last_error"],
        "last_response": row["last_response"],
        "delivered_at": ts(row["delivered_at"]),
        "created_at": ts(row["created_at"]),
    }


# -- the outbox --------------------------------------------------------------------------


def event_body(event_type: str, data: Any, at: datetime | None = None) -> str:
    """The JSON a receiver gets: type, timestamp and the record as the API returns it."""
    payload = {"type": event_type, "timestamp": timestamp(at or datetime.now(UTC)), "data": data}
    return orjson.dumps(payload, option=orjson.OPT_UTC_Z).decode()


async def emit(
    conn: asyncpg.Connection, account_id: str, event_type: str, record_id: str, data: Any
) -> int:
    """Queue an event for every enabled endpoint of the account that wants its type, in the
    caller's transaction (the outbox); returns how many deliveries were queued."""
    return await emit_many(conn, account_id, event_type, [(record_id, data)])


async def emit_many(
    conn: asyncpg.Connection, account_id: str, event_type: str,
    records: Sequence[tuple[str, Any]],
) -> int:
    """`emit` for many events of one type, `records` being (record id, data) pairs: one
    statement, however many there are. Returns how many deliveries were queued."""
    assert event_type in EVENT_TYPES, event_type
    if not records:
        return 0
    at = datetime.now(UTC)
    return await conn.fetchval(
        db.query("enqueue_webhook_events"), [new_id("msg") for _ in records], account_id,
        event_type, [record_id for record_id, _ in records],
        [event_body(event_type, data, at) for _, data in records],
    )


async def wanted(conn: asyncpg.Connection, account_id: str, event_type: str) -> bool:
    """Whether some endpoint wants the type: ask before building an event that costs queries."""
    return await conn.fetchval(db.query("webhook_type_wanted"), account_id, event_type)


# -- delivery ----------------------------------------------------------------------------


def sign(secret: str, msg_id: str, at: datetime, body: str) -> str:
    """The `webhook-signature` header: `v1,` and base64 HMAC-SHA256 of `id.timestamp.body`."""
    return Webhook(secret).sign(msg_id, at, body)


def backoff_seconds(config: WebhooksConfig, attempts: int) -> float:
    """The delay after `attempts` failed attempts: base, 2 * base, 4 * base … at most the max."""
    return min(config.retry_max_interval_seconds,
               config.retry_base_seconds * 2 ** min(max(0, attempts - 1), 40))


def _storable(text: str | None) -> str | None:
    """`text` as PostgreSQL text can hold it: a NUL (a receiver may answer anything) becomes
    U+FFFD, as undecodable bytes do. Storing one failed, so the attempt was never recorded and
    the delivery was sent again at every lease, for ever."""
    return None if text is None else text.replace("\x00", "\ufffd")


@attrs.frozen
class Outcome:
    """One attempt's result; the receiver's answer and the error as they can be stored (the
    delivery log, read by the account's admins). `detail`, for the service's log only, says more
    where the error keeps something from them; `refused`: nothing was sent (no address or URL
    webhooks may reach), and the attempt's duration is not shown (`Deliverer._attempt`)."""

    delivered: bool
    status: int | None
    response: str | None = attrs.field(converter=_storable)
    error: str | None = attrs.field(converter=_storable)
    detail: str | None = None
    refused: bool = False

    @property
    def logged(self) -> str | None:
        return self.detail or self.error


class Deliverer(OutboxSender):
    """Delivers due webhook deliveries until cancelled; `wake()` makes it look right away."""

    what = "webhooks"

    def __init__(self, pool: asyncpg.Pool, config: WebhooksConfig) -> None:
        super().__init__(config.poll_interval_seconds)
        self._pool = pool
        self._config = config
        # Longer than an attempt may take, so no other process claims a delivery in flight.
        self.lease_seconds = config.timeout_seconds * 2 + 5
        self._session: aiohttp.ClientSession | None = None
        # The account this deliverer last claimed a delivery for: the next claim starts with the
        # account after it (claim_webhook_delivery takes turns between accounts).
        self._last_account = ""
        # Per endpoint: when its last failed attempt was logged, and how many failed since.
        self._failures_logged: dict[str, tuple[float, int]] = {}

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=PublicAddressResolver(self._config.allow_private_addresses),
                limit=max(10, self._config.concurrency * 2),
            )
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False,  # no proxy: it would connect for us
                # No cookie jar: the session is every account's, and a cookie one receiver set
                # went with other accounts' deliveries to its host.
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=self._config.timeout_seconds),
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def run(self) -> None:
        try:
            await asyncio.gather(*(self._loop() for _ in range(self._config.concurrency)))
        finally:
            await self.close()

    async def _claim(self) -> asyncpg.Record | None:
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(
                db.query("claim_webhook_delivery"), self.lease_seconds,
                self._config.retry_for_seconds, self._config.concurrency, self._last_account,
            )
        if row is not None:
            self._last_account = row["account_id"]
        return row

    async def send(self, url: str, secret: str, msg_id: str, body: str) -> Outcome:
        """One attempt: POST the signed body; never raises for the receiver's failures."""
        config = self._config
        try:
            host = _connected_host(url)
        except ValueError:
            return Outcome(False, None, None, "refused: the endpoint's URL is not valid",
                           refused=True)
        literal = _ip_literal(host)
        # An IP literal never reaches the resolver, so it is checked here: the one aiohttp
        # connects to (an endpoint saved before its host was normalised for the check may hold
        # one written in other digits).
        if literal is not None and not config.allow_private_addresses and \
                not address_is_public(literal):
            return Outcome(False, None, None, f"refused: {literal} is not a public address",
                           refused=True)
        now = datetime.now(UTC)
        headers = {
            "Content-Type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": sign(secret, msg_id, now, body),
        }
        try:
            async with self.session().post(
                url, data=body.encode(), headers=headers, allow_redirects=False,
            ) as response:
                start = await response.content.read(config.max_response_bytes)
                text = start.decode("utf-8", "replace")
                if 200 <= response.status < 300:
                    return Outcome(True, response.status, text, None)
                if 300 <= response.status < 400:
                    where = response.headers.get("Location", "")
                    error = f"HTTP {response.status}: redirect to {where!r} not followed"
                else:
                    error = f"HTTP {response.status}"
                return Outcome(False, response.status, text, error)
        except TimeoutError:
            return Outcome(False, None, None, f"timed out after {config.timeout_seconds:g} s")
        except aiohttp.ClientConnectorError as exc:
            cause = exc.os_error if isinstance(exc.os_error, AddressRefused) else exc.__cause__
            if isinstance(cause, AddressRefused):  # aiohttp's own message drops the reason
                return Outcome(False, None, None, str(cause), cause.detail, refused=True)
            return Outcome(False, None, None, f"{type(exc).__name__}: {exc}"[:1000])
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Outcome(False, None, None, f"{type(exc).__name__}: {exc}"[:1000])

    async def _attempt(self, row: asyncpg.Record) -> None:
        outcome = await self.send(row["url"], row["secret"], row["event_id"], row["body"])
        async with self._pool.acquire() as conn:
            if outcome.delivered:
                await conn.execute(
                    db.query("mark_webhook_delivered"), row["id"], row["attempts"], outcome.status,
                    outcome.response,
                )
                return
            delay = backoff_seconds(self._config, row["attempts"])
            async with conn.transaction():
                # A refused attempt's next one is due `delay` after it was claimed, not after
                # it ended: next_attempt_at - last_attempt_at in the delivery log would otherwise
                # show how long the look-up took (an internal name, found at once, from an
                # unknown one).
                state = await conn.fetchval(
                    db.query("mark_webhook_failed"), row["id"], row["attempts"], outcome.status,
                    outcome.response, outcome.error, delay, outcome.refused,
                )
                if state == "failed":
                    reason = (
                        f"delivery {row['id']} ({row['type']}, {row['event_id']}) failed for "
                        f"{self._config.retry_for_seconds:g} s over {row['attempts']} attempts; "
                        f"last error: {outcome.error}"
                    )
                    await conn.execute(
                        db.query("disable_webhook_endpoint"), row["endpoint_id"], reason
                    )
        if state == "failed":
            log.error("webhook endpoint %s disabled: delivery %s failed: %s",
                      row["endpoint_id"], row["id"], outcome.logged)
        else:
            self._log_failure(row, outcome.logged, delay)

    def _log_failure(self, row: asyncpg.Record, error: str | None, delay: float) -> None:
        """A WARNING for a failed attempt, at most one per endpoint every FAILURE_LOG_SECONDS."""
        now = time.monotonic()
        endpoint = row["endpoint_id"]
        last, unlogged = self._failures_logged.get(endpoint, (None, 0))
        if last is not None and now - last < FAILURE_LOG_SECONDS:
            self._failures_logged[endpoint] = (last, unlogged + 1)
            return
        if len(self._failures_logged) >= 1_000:  # forget endpoints quiet for a while
            self._failures_logged = {
                key: value for key, value in self._failures_logged.items()
                if value[1] or now - value[0] < FAILURE_LOG_SECONDS
            }
        self._failures_logged[endpoint] = (now, 0)
        log.warning("webhook delivery %s to %s: attempt %d failed (%s); retrying in %.0f s%s",
                    row["id"], endpoint, row["attempts"], error, delay,
                    f"; {unlogged} more failed attempts to this endpoint not logged since its "
                    f"last such line" if unlogged else "")
