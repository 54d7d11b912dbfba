"""The audit log: who did what to which record, when and from where, written by `record` in the
transaction of the change itself, so the log holds exactly the changes that happened.

An `Actor` is a member (through a token), an operator (the CLI) or anonymous (a sign-in attempt,
an e-mail confirmation). For a change, `before`/`after` hold the changed fields only; fields
named in SECRET_FIELDS never reach the log, whatever the caller passes.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any, Literal

import asyncpg
import attrs

from .. import db
from .convert import timestamp
from .tokens import Principal

# Never written to the log: credentials and one-time links.
SECRET_FIELDS = frozenset({
    "password", "password_hash", "token", "token_hash", "secret", "api_key", "link", "body",
})


# Why a time cannot be searched by: asyncpg sends it in UTC, where it must fall in years 1 to 9999.
OUT_OF_RANGE = "must fall within the years 1 to 9999 in UTC"


def in_utc(moment: datetime) -> datetime | None:
    """`moment` (with its time zone) in UTC, as asyncpg sends it; None where that is outside
    years 1 to 9999 (0001-01-01T00:00:00+14:00 is before year 1), which asyncpg cannot send."""
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        return None


@attrs.frozen(kw_only=True)
class Actor:
    """Who acts, and from where (the client address and request id; None outside HTTP)."""

    type: Literal["member", "operator", "anonymous"]
    id: str | None = None
    label: str | None = None
    account_id: str | None = None
    client_address: str | None = None
    request_id: str | None = None

    @classmethod
    def member(
        cls, who: Principal, client_address: str | None = None, request_id: str | None = None
    ) -> Actor:
        return cls(type="member", id=who.member_id, label=who.email, account_id=who.account_id,
                   client_address=client_address, request_id=request_id)

    @property
    def member_id(self) -> str | None:
        """The member acting, for the knowledge base's versions (who wrote them)."""
        return self.id if self.type == "member" else None

    @classmethod
    def operator(cls, name: str | None = None) -> Actor:
        """The person at the CLI: the OS user running it."""
        try:
            user = name or getpass.getuser()
        except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
            user = "unknown"
        return cls(type="operator", id=user, label="cli")

    @classmethod
    def anonymous(
        cls, label: str | None = None, client_address: str | None = None,
        request_id: str | None = None,
    ) -> Actor:
        return cls(type="anonymous", label=label, client_address=client_address,
                   request_id=request_id)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _public(fields: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if fields is None:
        return None
    return {k: _plain(v) for k, v in fields.items() if k not in SECRET_FIELDS}


def changes(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of `after` whose values differ from `before`'s: (their old values, new ones)."""
    old, new = _public(before) or {}, _public(after) or {}
    changed = [k for k in new if old.get(k) != new[k]]
    return {k: old.get(k) for k in changed}, {k: new[k] for k in changed}


async def record(conn: asyncpg.Connection, actor: Actor, action: str, **fields: Any) -> None:
    """Write one audit event in the caller's transaction; `fields` as `values` takes them."""
    await conn.execute(db.query("insert_audit_event"), *values(actor, action, **fields))


def values(
    actor: Actor,
    action: str,
    *,
    record_id: str | None = None,
    account_id: str | None = None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> tuple[Any, ...]:
    """An event's columns in insert_audit_event's order (also for a statement that writes its
    event itself, such as the ask's). `account_id` defaults to the actor's; with both `before`
    and `after` only the changed fields are kept (see `changes`)."""
    if before is not None and after is not None:
        before, after = changes(before, after)
    else:
        before, after = _public(before), _public(after)
    return (
        account_id or actor.account_id, actor.type, actor.id, actor.label, action, record_id,
        actor.client_address, actor.request_id,
        None if before is None else json.dumps(before),
        None if after is None else json.dumps(after),
    )


# `values` for no event: a statement that writes its event only with an actor (the ask's) gets
# these NULLs in the event's places.
NO_EVENT: tuple[None, ...] = (None,) * 10


@attrs.frozen(kw_only=True)
class AuditFilter:
    actor: str | None = None
    record: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def args(self) -> tuple[Any, ...]:
        return (self.actor, self.record, self.action, self.since, self.until)


def event_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """An audit event as the API and the export write it."""
    return {
        "id": row["id"],
        "occurred_at": timestamp(row["occurred_at"]),
        "actor": {"type": row["actor_type"], "id": row["actor_id"], "label": row["actor_label"]},
        "action": row["action"],
        "record_id": row["record_id"],
        "client_address": row["client_address"],
        "request_id": row["request_id"],
        "before": None if row["before"] is None else json.loads(row["before"]),
        "after": None if row["after"] is None else json.loads(row["after"]),
    }


async def list_events(
    conn: asyncpg.Connection, account_id: str, where: AuditFilter, limit: int, offset: int
) -> tuple[list[dict[str, Any]], int]:
    total = await conn.fetchval(db.query("count_audit_events"), account_id, *where.args())
    rows = await conn.fetch(
        db.query("list_audit_events"), account_id, *where.args(), limit, offset
    )
    return [event_json(row) for row in rows], total


async def export_events(
    conn: asyncpg.Connection, account_id: str, since: datetime
) -> tuple[list[dict[str, Any]], datetime]:
    """An account's events from `since`, oldest first, and the time they are complete up to (its
    events from then on are the next export's): the events of transactions still writing are
    left for it rather than missed, as taking everything up to now could (one committed after the
    export, stamped before its end)."""
    settled = await conn.fetchval(db.query("audit_export_settled"))
    rows = await conn.fetch(db.query("export_audit_events"), account_id, since, settled)
    return [event_json(r) for r in rows], settled
