"""Questions: ask (charged, idempotent), read, and follow a question's state as Server-Sent Events.

`create_question` stores a question; `create_item_questions` stores an RFP's items' questions at
once ("answer all"). Nothing else writes questions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import asyncpg
import attrs

from .. import db
from . import audit
from .convert import DETAIL_LEVELS, DetailLevel, NonBlank, structure
from .errors import NotFound, UsageBlocked, ValidationFailed
from .ids import new_id
from .models import MemberRef
from .tokens import Principal

# A question's states, in order (SPEC 3); the pipeline moves it along them (answering/pipeline.py).
STATES = ("new", "ready_to_answer", "references_fetched", "answered", "confidence_calculated", "complete")
MAX_IDEMPOTENCY_KEY = 255




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


@attrs.frozen(kw_only=True)
class QuestionReference:
    """A knowledge-base entry the answer drew on (an extension of SPEC 2.2)."""

    id: str
    external_id: str | None
    title: str | None
    score: float
    # The entry's version the answer used (issue 20); null for questions answered before versions.
    version: int | None = None


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
                    score=ref["score"], version=ref.get("kb_version"),
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


async def fetch_question_and_token(
    conn: asyncpg.Connection, question_id: str, account_id: str, token_hash: bytes
) -> tuple[asyncpg.Record, bool]:
    """`fetch_question` and whether the token of `token_hash` is still live, in one statement."""
    row = await conn.fetchrow(db.query("get_question_and_token"), question_id, account_id,
                              token_hash)
    if row is None:
        raise NotFound(f"no question {question_id} in this account")
    return row, row["token_live"]


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
    actor: audit.Actor | None = None,
) -> asyncpg.Record:
    """`create_question`, returning the stored question as `get_question` reads it.

    One statement (debit, question, ledger entry and, with `actor`, the question.asked audit
    event), atomic with or without a caller's transaction. With `lease_owner` the question is
    stored leased to that pipeline (`Pipeline.reserve`).
    """
    question_id = question_id or new_id("q")
    event = (
        audit.values(actor, "question.asked", record_id=question_id, account_id=account_id,
                     after={"credits": cost})
        if actor is not None else audit.NO_EVENT
    )
    row = await conn.fetchrow(
        db.query("ask_question"), question_id, account_id, user_id, member_id,
        rfp_id, rfp_item_id, text, custom_prompt, detail_level, cost, idempotency_key,
        request_hash, lease_owner, lease_seconds, *event,
    )
    if row is not None:
        return row
    raise await _refusal(conn, account_id, "questions cannot be asked", f"a question costs {cost}")


async def _refusal(conn: asyncpg.Connection, account_id: str, refused: str, cost: str) -> Exception:
    """Why a debit matched no account: none, no active subscription (`refused` says what cannot
    be done), or too few credits (`cost` says what it costs)."""
    account = await conn.fetchrow(db.query("account_standing"), account_id)
    refusal = _standing_refusal(account, account_id, refused)
    if refusal is not None:
        return refusal
    return UsageBlocked(f"out of credits: {cost} and the account has {account['credits']}")


def _standing_refusal(account: asyncpg.Record | None, account_id: str, refused: str) -> Exception | None:
    if account is None:
        return NotFound(f"no account {account_id}")
    if account["subscription_status"] != "active":
        return UsageBlocked(f"the account has no active subscription; {refused}")
    return None


async def require_active_subscription(conn: asyncpg.Connection, account_id: str, refused: str) -> None:
    """403 usage_blocked, as a charged request would be, when the account's subscription is not
    active: for a request that happens to charge nothing this time ("answer all" with nothing
    pending), so that it is refused alike whatever there is to do."""
    account = await conn.fetchrow(db.query("account_standing"), account_id)
    refusal = _standing_refusal(account, account_id, refused)
    if refusal is not None:
        raise refusal


ITEMS_REFUSED = "items cannot be answered"  # what an inactive account's "answer all" is told


async def create_item_questions(
    conn: asyncpg.Connection,
    *,
    account_id: str,
    user_id: int,
    member_id: str | None,
    rfp_id: str,
    items: Sequence[tuple[str, str]],
    detail_level: int = 1,
    custom_prompt: str | None = None,
    credits: int = 1,
) -> list[str]:
    """`create_question` for each RFP item of `items` ((item id, question) pairs), charging
    `credits` for each, and each item marked as being answered by its question: in one statement,
    in the caller's transaction; the questions' ids in the items' order.

    Raises UsageBlocked (and writes nothing) without an active subscription or credits for every
    item. Wake the pipeline after the transaction commits.
    """
    question_ids = [new_id("q") for _ in items]
    stored = await conn.fetchval(
        db.query("ask_item_questions"), account_id, user_id, member_id, question_ids,
        [item_id for item_id, _ in items], [text for _, text in items], rfp_id, custom_prompt,
        credits, detail_level,
    )
    if stored == len(items):
        return question_ids
    raise await _refusal(conn, account_id, ITEMS_REFUSED,
                         f"answering {len(items)} items costs {credits * len(items)}")


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


class Reservations(Protocol):
    """Where a question asked here can be answered at once (`answering.pipeline.Pipeline`)."""

    def reserve(self, question_id: str) -> str | None: ...

    def unreserve(self, question_id: str) -> None: ...


@attrs.frozen(kw_only=True)
class Asked:
    """What `ask` did: `row` is the question as the response shows it; `stored` the question this
    call stored and charged for (None: a replay of an earlier ask), leased to `lease_owner`
    when the caller's pipeline reserved a place for it (run it with `Pipeline.adopt`)."""

    row: Mapping[str, Any]
    stored: asyncpg.Record | None
    lease_owner: str | None


async def ask(
    conn: asyncpg.Connection, who: Principal, asked: Ask, key: str | None, *, cost: int,
    lease_seconds: float, reservations: Reservations, actor: audit.Actor | None = None,
) -> Asked:
    """Ask a question for `who`, charged `cost` credits, idempotent per (member, `key`).

    A key used before answers with that first response (the question as it was when accepted);
    the same key for a different question is a 422. One statement stores and charges; a question
    is stored leased to the caller's pipeline when it has room, else unleased for any process to
    claim. With `actor`, the audit event commits with the question.
    """
    question_id = await _replay(conn, who.member_id, key, asked) if key else None
    stored = None
    owner = None
    if question_id is None:
        new_question = new_id("q")
        owner = reservations.reserve(new_question)
        try:
            # One statement committing on its own, audit event included: the ask's debit locks
            # the account's row, which every question of the account waits for, and each round
            # trip while it was held (a transaction's next statement, its COMMIT; on a busy event
            # loop, milliseconds each) lowered how many questions an account could ask a second.
            row = await ask_question(
                conn, account_id=who.account_id, user_id=who.user_id, text=asked.question,
                detail_level=asked.detail_level, custom_prompt=asked.custom_prompt,
                rfp_id=None, rfp_item_id=None, member_id=who.member_id, cost=cost,
                idempotency_key=key, request_hash=asked.fingerprint() if key else None,
                question_id=new_question, lease_owner=owner, lease_seconds=lease_seconds,
                actor=actor,
            )
        except asyncpg.UniqueViolationError:
            reservations.unreserve(new_question)
            owner = None
            # The same key raced in from a concurrent retry: answer like a replay.
            question_id = await _replay(conn, who.member_id, key or "", asked)
            if question_id is None:
                raise
            row = await fetch_question(conn, question_id, who.account_id)
        except BaseException:
            # Refused (or cancelled, committed or not: a stored question's lease just expires and
            # any process resumes it).
            reservations.unreserve(new_question)
            raise
        else:
            stored = row
    else:
        row = await fetch_question(conn, question_id, who.account_id)
    shown: Mapping[str, Any] = row
    if key and row["state"] != "new":
        # A replay answers with the first response: the question as it was when accepted.
        shown = {**dict(row), "state": "new", "answer": None, "confidence": None,
                 "confidence_rationale": None, "requires_attention": False, "attention_points": None,
                 "sufficient_context": None, "references": None, "verbatim_answer": False,
                 "updated_at": row["created_at"]}
    return Asked(row=shown, stored=stored, lease_owner=owner)


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
    Wake the pipeline (`Pipeline.wake`) after the transaction commits so it is answered at once
    (otherwise the next poll, at most `questions.poll_seconds` later, picks it up).
    """
    row = await ask_question(
        conn, account_id=account_id, user_id=user_id, text=text, detail_level=detail_level,
        custom_prompt=custom_prompt, rfp_id=rfp_id, rfp_item_id=rfp_item_id, member_id=member_id,
        cost=credits if charge else 0, idempotency_key=idempotency_key, request_hash=request_hash,
    )
    return row["id"]
