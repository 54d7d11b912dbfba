"""Questions: ask (charged, idempotent), read, and follow a question's state as Server-Sent Events.

`create_question` is the one way to store a question; the RFP workflow uses it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from datetime import datetime
from typing import Any, NewType

import asyncpg
import attrs
from aiohttp import web

from . import db
from .auth import new_id, principal, requires
from .convert import NonBlank, converter, read_object, structure, unstructure
from .errors import NotFound, UsageBlocked, ValidationFailed
from .keys import CONFIG, EVENTS, PIPELINE
from .metrics import METRICS
from .models import MemberRef
from .pipeline import STATES

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
) -> asyncpg.Record:
    """`create_question`, returning the stored question as `get_question` reads it.

    One statement (debit, question, ledger entry), atomic with or without a caller's transaction.
    """
    question_id = new_id("q")
    row = await conn.fetchrow(
        db.query("ask_question"), question_id, account_id, user_id, member_id, rfp_id,
        rfp_item_id, text, custom_prompt, detail_level, cost, idempotency_key, request_hash,
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
    response = web.json_response(unstructure(Question.from_row(row)), status=202)
    response.headers["Location"] = f"/api/v1/questions/{row['id']}"
    return response


@requires("write", roles=("admin", "member", "viewer"))
async def post_question(request: web.Request) -> web.Response:
    settings = request.app[CONFIG].questions
    fields, body = await read_object(request, "question")
    ask = parse_ask(body, fields, settings.max_question_chars, settings.max_custom_prompt_chars)
    key = _idempotency_key(request)
    who = principal(request)
    async with db.connection(request) as conn:
        question_id = await _replay(conn, who.member_id, key, ask) if key else None
        if question_id is None:
            try:
                # One statement: atomic without BEGIN/COMMIT round trips.
                row = await ask_question(
                    conn, account_id=who.account_id, user_id=who.user_id, text=ask.question,
                    detail_level=ask.detail_level, custom_prompt=ask.custom_prompt,
                    rfp_id=None, rfp_item_id=None, member_id=who.member_id,
                    cost=settings.credits_per_question, idempotency_key=key,
                    request_hash=ask.fingerprint() if key else None,
                )
            except asyncpg.UniqueViolationError:
                # The same key raced in from a concurrent retry: answer like a replay.
                question_id = await _replay(conn, who.member_id, key or "", ask)
                if question_id is None:
                    raise
                row = await fetch_question(conn, question_id, who.account_id)
            else:
                request.app[PIPELINE].wake()
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
    async with db.connection(request) as conn:
        row = await fetch_question(conn, request.match_info["id"], principal(request).account_id)
    return web.json_response(unstructure(Question.from_row(row)))


def _event(state: str, data: dict[str, Any]) -> bytes:
    return f"event: {state}\nid: {state}\ndata: {json.dumps(data)}\n\n".encode()


@requires("read", hold_connection=False)
async def question_events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: the current state at once, then one event per state change; the
    stream ends after `complete`. States passed while nobody looked are sent as {id, state}."""
    question_id = request.match_info["id"]
    account_id = principal(request).account_id
    poll = request.app[CONFIG].questions.poll_seconds
    events = request.app[EVENTS]
    with events.subscribe(question_id) as changes:
        listener = events.connections
        async with db.connection(request) as conn:
            row = await fetch_question(conn, question_id, account_id)  # 404 before streaming
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                     "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the client went away: just stop
            # What one look at the question has to say goes out in one write (one send), and the
            # last one together with the end of the stream.
            sent = STATES.index(row["state"])
            first = _event(row["state"], unstructure(Question.from_row(row)))
            if STATES[sent] == "complete":
                await response.write_eof(first)
                return response
            await response.write(first)
            quiet = 0
            while True:
                try:
                    await asyncio.wait_for(changes.get(), poll)
                    while not changes.empty():  # one read covers every change announced so far
                        changes.get_nowait()
                except TimeoutError:
                    await response.write(b": waiting\n\n")  # a comment: keeps proxies from timing out
                    quiet += 1
                    if events.listening(listener) and quiet % RECHECK_EVERY:
                        continue  # nothing can have been missed: no read (streams wait in bulk
                        # when the service is busy, and a read each per poll would add to it)
                    listener = events.connections  # fall through to a read: a notification may
                    # have been lost (the listening connection changed), or to be safe now and then
                async with db.connection(request) as conn:
                    row = await fetch_question(conn, question_id, account_id)
                current = STATES.index(row["state"])
                if current <= sent:
                    continue
                out = [_event(passed, {"id": question_id, "state": passed})
                       for passed in STATES[sent + 1 : current]]
                out.append(_event(row["state"], unstructure(Question.from_row(row))))
                sent = current
                if STATES[sent] == "complete":
                    await response.write_eof(b"".join(out))
                    break
                await response.write(b"".join(out))
    return response
