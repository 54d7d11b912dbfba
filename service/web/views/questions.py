"""Questions: ask (charged, idempotent), read, and follow a question's state as Server-Sent Events.

`create_question` is the one way to store a question; the RFP workflow uses it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NewType

import asyncpg
import attrs
from aiohttp import web

from ... import db
from ...answering.pipeline import STATES, Pipeline
from ...domain.convert import NonBlank, converter, structure, unstructure
from ...domain.errors import NotFound, UsageBlocked, ValidationFailed
from ...domain.ids import new_id
from ...domain.models import MemberRef
from ..auth import connection, principal, requires
from ..body import read_object
from ..frontdoor import stream_headers
from ..keys import CONFIG, EVENTS, METRICS, PIPELINE
from ..responses import json_response

DETAIL_LEVELS = ("low", "normal", "high")
MAX_IDEMPOTENCY_KEY = 255
# An event stream re-reads its question on every notification, and on every RECHECK_EVERY-th
# quiet poll interval (every one when the listening connection was replaced meanwhile).
RECHECK_EVERY = 5


# -- input -------------------------------------------------------------------------------------


DetailLevel = NewType("DetailLevel", int)


def _detail_level(value: Any, _: type) -> int:
    # A structure hook, not a validator, so it is reported together with the other fields' errors.
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2):
        raise ValueError(f"must be 0 (low), 1 (normal) or 2 (high); got {json.dumps(value)}")
    return value


converter.register_structure_hook(DetailLevel, _detail_level)


@attrs.frozen(kw_only=True)
class QuestionFields:
    """The `question` object of an ask; the options may also sit beside it (AskOptions)."""

    question: NonBlank
    custom_prompt: str | None = None
    answer_detail_level: DetailLevel | None = None


@attrs.frozen(kw_only=True)
class AskOptions:
    custom_prompt: str | None = None
    answer_detail_level: DetailLevel | None = None


@attrs.frozen(kw_only=True)
class Ask:
    """A validated ask, normalised: what is stored and what the idempotency hash covers."""

    question: str
    custom_prompt: str | None
    detail_level: int

    def fingerprint(self) -> bytes:
        return hashlib.sha256(json.dumps(attrs.asdict(self), sort_keys=True).encode()).digest()


def parse_ask(body: dict[str, Any], fields: dict[str, Any], max_chars: int, max_prompt: int) -> Ask:
    """The ask in `body`, or a 422 listing every failure (both places are checked)."""
    details: list[str] = []
    inner = outer = None
    try:
        inner = structure(fields, QuestionFields, root="question")
    except ValidationFailed as exc:
        details += exc.details or []
    try:
        outer = structure({k: v for k, v in body.items() if k != "question"}, AskOptions)
    except ValidationFailed as exc:
        details += exc.details or []
    if inner is not None and len(inner.question) > max_chars:
        details.append(f"question.question: must be at most {max_chars} characters")
    chosen: dict[str, Any] = {}
    for name in ("custom_prompt", "answer_detail_level"):
        a = getattr(inner, name, None) if inner is not None else None
        b = getattr(outer, name, None) if outer is not None else None
        if a is not None and b is not None and a != b:
            details.append(f"{name}: given inside and beside the question object with different values")
        chosen[name] = a if a is not None else b
    prompt = chosen["custom_prompt"]
    if prompt is not None and len(prompt) > max_prompt:
        details.append(f"custom_prompt: must be at most {max_prompt} characters")
    if details or inner is None:
        raise ValidationFailed(details)
    level = chosen["answer_detail_level"]
    return Ask(
        question=inner.question.strip(),
        custom_prompt=prompt if prompt and prompt.strip() else None,
        detail_level=1 if level is None else level,
    )


# -- output ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class QuestionReference:
    """A knowledge-base entry the answer drew on (an extension of SPEC 2.2)."""

    id: str
    external_id: str | None
    title: str | None
    score: float


@attrs.frozen(kw_only=True)
class Question:
    id: str
    question: str
    answer: str | None
    verbatim_answer: bool
    state: str
    confidence: float | None
    confidence_rationale: str | None
    answer_detail_level: str
    custom_prompt: str | None
    requires_attention: bool
    attention_points: list[str] | None
    sufficient_context: bool | None
    created_at: datetime
    updated_at: datetime
    user: MemberRef
    references: list[QuestionReference]
    rfp_id: str | None
    rfp_item_id: str | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Question:
        complete = row["state"] == "complete"
        stored = json.loads(row["references"]) if row["references"] else []
        return cls(
            id=row["id"],
            question=row["question"],
            answer=row["answer"] if complete else None,
            verbatim_answer=row["verbatim_answer"] if complete else False,
            state=row["state"],
            confidence=None if row["confidence"] is None else round(float(row["confidence"]), 4),
            confidence_rationale=row["confidence_rationale"],
            answer_detail_level=DETAIL_LEVELS[row["answer_detail_level"]],
            custom_prompt=row["custom_prompt"],
            requires_attention=row["requires_attention"],
            attention_points=list(row["attention_points"]) if row["attention_points"] is not None else None,
            sufficient_context=row["sufficient_context"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            user=MemberRef(id=row["user_id"], name=row["user_name"], email=row["user_email"]),
            references=[
                QuestionReference(
                    id=ref["kb_item_id"], external_id=ref["external_id"], title=ref["title"],
                    score=ref["score"],
                )
                for ref in stored
                if ref.get("used")
            ],
            rfp_id=row["rfp_id"],
            rfp_item_id=row["rfp_item_id"],
        )


async def fetch_question(conn: asyncpg.Connection, question_id: str, account_id: str) -> asyncpg.Record:
    row = await conn.fetchrow(db.query("get_question"), question_id, account_id)
    if row is None:
        raise NotFound(f"no question {question_id} in this account")
    return row


# -- asking ------------------------------------------------------------------------------------


async def create_question(
    conn: asyncpg.Connection,
    *,
    account_id: str,
    user_id: int,
    text: str,
    detail_level: int = 1,
    custom_prompt: str | None = None,
    rfp_id: str | None = None,
    rfp_item_id: str | None = None,
    member_id: str | None = None,
    charge: bool = True,
    credits: int = 1,
    idempotency_key: str | None = None,
    request_hash: bytes | None = None,
) -> str:
    """Store a question in state `new`, charging `credits` for it, in the caller's transaction.

    Raises UsageBlocked (and writes nothing) without an active subscription or enough credits.
    Call `app[PIPELINE].wake()` after the transaction commits so it is answered at once
    (otherwise the next poll, at most `questions.poll_seconds` later, picks it up).
    """
    row = await ask_question(
        conn, account_id=account_id, user_id=user_id, text=text, detail_level=detail_level,
        custom_prompt=custom_prompt, rfp_id=rfp_id, rfp_item_id=rfp_item_id, member_id=member_id,
        cost=credits if charge else 0, idempotency_key=idempotency_key, request_hash=request_hash,
    )
    return row["id"]


async def ask_question(
    conn: asyncpg.Connection,
    *,
    account_id: str,
    user_id: int,
    text: str,
    detail_level: int,
    custom_prompt: str | None,
    rfp_id: str | None,
    rfp_item_id: str | None,
    member_id: str | None,
    cost: int,
    idempotency_key: str | None,
    request_hash: bytes | None,
    question_id: str | None = None,
    lease_owner: str | None = None,
    lease_seconds: float = 0.0,
) -> asyncpg.Record:
    """`create_question`, returning the stored question as `get_question` reads it.

    One statement (debit, question, ledger entry), atomic with or without a caller's transaction.
    With `lease_owner` the question is stored leased to that pipeline (`Pipeline.reserve`).
    """
    row = await conn.fetchrow(
        db.query("ask_question"), question_id or new_id("q"), account_id, user_id, member_id,
        rfp_id, rfp_item_id, text, custom_prompt, detail_level, cost, idempotency_key,
        request_hash, lease_owner, lease_seconds,
    )
    if row is not None:
        return row
    account = await conn.fetchrow(db.query("account_standing"), account_id)
    if account is None:
        raise NotFound(f"no account {account_id}")
    if account["subscription_status"] != "active":
        raise UsageBlocked("the account has no active subscription; questions cannot be asked")
    raise UsageBlocked(
        f"out of credits: a question costs {cost} and the account has {account['credits']}"
    )


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise ValidationFailed(
            [f"Idempotency-Key: must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters"]
        )
    return key


async def _replay(conn: asyncpg.Connection, member_id: str, key: str, ask: Ask) -> str | None:
    """The question first asked with this key, if any; 422 when that ask was a different one."""
    previous = await conn.fetchrow(db.query("question_by_idempotency_key"), member_id, key)
    if previous is None:
        return None
    if bytes(previous["request_hash"]) != ask.fingerprint():
        raise ValidationFailed(
            ["Idempotency-Key: already used for a different question; use a new key"]
        )
    return previous["id"]


def _accepted(row: asyncpg.Record) -> web.Response:
    response = json_response(unstructure(Question.from_row(row)), status=202)
    response.headers["Location"] = f"/api/v1/questions/{row['id']}"
    return response


@requires("write", roles=("admin", "member", "viewer"))
async def post_question(request: web.Request) -> web.Response:
    settings = request.app[CONFIG].questions
    fields, body = await read_object(request, "question")
    ask = parse_ask(body, fields, settings.max_question_chars, settings.max_custom_prompt_chars)
    key = _idempotency_key(request)
    who = principal(request)
    pipeline = request.app[PIPELINE]
    async with connection(request) as conn:
        question_id = await _replay(conn, who.member_id, key, ask) if key else None
        if question_id is None:
            # Handed straight to this process's pipeline when it has room: stored leased to it.
            new_question = new_id("q")
            owner = pipeline.reserve(new_question)
            try:
                # One statement: atomic without BEGIN/COMMIT round trips.
                row = await ask_question(
                    conn, account_id=who.account_id, user_id=who.user_id, text=ask.question,
                    detail_level=ask.detail_level, custom_prompt=ask.custom_prompt,
                    rfp_id=None, rfp_item_id=None, member_id=who.member_id,
                    cost=settings.credits_per_question, idempotency_key=key,
                    request_hash=ask.fingerprint() if key else None, question_id=new_question,
                    lease_owner=owner, lease_seconds=settings.lease_seconds,
                )
            except asyncpg.UniqueViolationError:
                pipeline.unreserve(new_question)
                # The same key raced in from a concurrent retry: answer like a replay.
                question_id = await _replay(conn, who.member_id, key or "", ask)
                if question_id is None:
                    raise
                row = await fetch_question(conn, question_id, who.account_id)
            except BaseException:
                # Refused (or cancelled, committed or not: a stored question's lease just
                # expires and any process resumes it).
                pipeline.unreserve(new_question)
                raise
            else:
                if owner is not None:
                    await pipeline.adopt(row)
                else:
                    pipeline.wake()  # (other processes are woken by the question's announcement)
                if settings.credits_per_question:  # counted once committed
                    request.app[METRICS].credits_debited.labels("question").inc(
                        settings.credits_per_question
                    )
        else:
            row = await fetch_question(conn, question_id, who.account_id)
    if key and row["state"] != "new":
        # A replay answers with the first response: the question as it was when accepted.
        row = {**dict(row), "state": "new", "answer": None, "confidence": None,
               "confidence_rationale": None, "requires_attention": False, "attention_points": None,
               "sufficient_context": None, "references": None, "verbatim_answer": False,
               "updated_at": row["created_at"]}
    return _accepted(row)


# -- reading -----------------------------------------------------------------------------------


@requires("read")
async def get_question(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await fetch_question(conn, request.match_info["id"], principal(request).account_id)
    return json_response(unstructure(Question.from_row(row)))


def position(state: str) -> int:
    """A state's event id: its position in SPEC 3's order, 1 (`new`) to 6 (`complete`)."""
    return STATES.index(state) + 1


FINAL = position("complete")
# Every Last-Event-ID understood: an event id or a state's name. A lookup, not int(): "²" is a
# digit to str.isdigit but not to int(), and 5,000 digits exceed int()'s limit.
_EVENT_IDS = {str(position(state)): position(state) for state in STATES} | {
    state: position(state) for state in STATES
}


def last_event_id(request: web.Request) -> int:
    """The position of the last event a reconnecting client saw (SSE `Last-Event-ID`), 0 when
    none; a state's name is understood too, anything else is ignored (the whole stream follows)."""
    return _EVENT_IDS.get(request.headers.get("Last-Event-ID", "").strip(), 0)


def _event(state: str, data: dict[str, Any]) -> bytes:
    return f"event: {state}\nid: {position(state)}\ndata: {json.dumps(data)}\n\n".encode()


def _events_after(seen: int, row: Mapping[str, Any]) -> bytes:
    """The events after position `seen` up to the row's state, in one piece: states passed
    while nobody looked as {id, state}, the row's own state with the whole question."""
    out = [_event(passed, {"id": row["id"], "state": passed})
           for passed in STATES[seen : position(row["state"]) - 1]]
    out.append(_event(row["state"], unstructure(Question.from_row(row))))
    return b"".join(out)


class _EventStream(web.StreamResponse):
    # The headers go out with the first event, in one send (aiohttp's default for streams is a
    # send of their own at prepare()).
    _send_headers_immediately = False


def _working_on(pipeline: Pipeline, question_id: str, account_id: str) -> Mapping[str, Any] | None:
    """The question as last committed by this process's pipeline, if it works on it (or just
    completed it)."""
    row = pipeline.last_committed(question_id)
    return row if row is not None and row["account_id"] == account_id else None


@requires("read", hold_connection=False)
async def question_events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: the current state at once, then one event per state change; the
    stream ends after `complete`. States passed while nobody looked are sent as {id, state}.

    Event ids are the states' positions (1-6): a client reconnecting with `Last-Event-ID` gets
    only what came after; one that has seen `complete` gets 204, which tells an EventSource to
    stop reconnecting. The question is read from the database only when this process is not the
    one answering it (its pipeline hands over every row it commits)."""
    question_id = request.match_info["id"]
    account_id = principal(request).account_id
    seen = last_event_id(request)
    poll = request.app[CONFIG].questions.poll_seconds
    events = request.app[EVENTS]
    pipeline = request.app[PIPELINE]
    with events.subscribe(question_id) as changes:
        listener = events.connections
        row = _working_on(pipeline, question_id, account_id)
        if row is None:
            async with connection(request) as conn:
                row = await fetch_question(conn, question_id, account_id)  # 404 before streaming
        if seen >= FINAL:
            return web.Response(status=204)
        if not seen:  # a first connection starts at the current state; a resumed one gets
            seen = position(row["state"]) - 1  # every state after the one it saw
        response = _EventStream(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                     "X-Accel-Buffering": "no", **stream_headers(request)}
        )
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the client went away: just stop
            if position(row["state"]) <= seen:
                await response.write(b": resumed\n\n")  # nothing new yet; the headers go out
            quiet = 0
            while True:
                # What one look at the question has to say goes out in one write (one send), and
                # the last one together with the end of the stream.
                current = position(row["state"])
                if current > seen:
                    out = _events_after(seen, row)
                    seen = current
                    if seen == FINAL:
                        await response.write_eof(out)
                        break
                    await response.write(out)
                try:
                    change = await asyncio.wait_for(changes.get(), poll)
                except TimeoutError:
                    await response.write(b": waiting\n\n")  # a comment: keeps proxies from timing out
                    quiet += 1
                    if events.listening(listener) and quiet % RECHECK_EVERY:
                        continue  # nothing can have been missed: no read (streams wait in bulk
                        # when the service is busy, and a read each per poll would add to it)
                    listener = events.connections  # fall through to a read: a notification may
                    # have been lost (the listening connection changed), or to be safe now and then
                else:
                    # One look covers every change so far. This process's pipeline hands over
                    # every row it commits, and says when it lets go of a question unfinished
                    # (None): while it works on the question, announcements need no read.
                    changed = [change]
                    while not changes.empty():
                        changed.append(changes.get_nowait())
                    announced, let_go = 0, False
                    for item in changed:
                        if item is None:
                            let_go = True
                        elif isinstance(item, str):
                            announced = max(announced, position(item))
                        elif position(item["state"]) > position(row["state"]):
                            row = item
                    known = max(seen, position(row["state"]))
                    if not let_go and (announced <= known or question_id in pipeline.active):
                        continue
                async with connection(request) as conn:
                    row = await fetch_question(conn, question_id, account_id)
    return response
