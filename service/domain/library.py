"""Library care: owners and review dates of knowledge entries, their versions, duplicates, merges.

Every change to an entry keeps the entry as it was (the `knowledge_item_versioning` trigger of
migration 0022, so every write path is covered); the member making the change is named for the
transaction with `set_actor`. An entry past its `review_by` is stale: answers drawn from it ask for
attention (service/answering/pipeline.py) and so never reach the auto-answer band.

Duplicates and conflicts are found per account by trigram similarity among the entries that
share rare words (`similar_pairs`) and classified here: near-identical questions or answers are
duplicates; similar questions answered Yes by one and No by the other, or with different numbers
of the same unit ("90 days" vs "30 days"), are conflicts.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import heapq
import logging
import re
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import date, datetime
from typing import Any

import asyncpg
import attrs

from .. import db
from . import audit, preconditions, webhooks
from .convert import IsoDate, NonBlank, structure, unstructure
from .errors import Conflict, NotFound, ValidationFailed
from .ids import could_be_id
from .knowledge import (
    KnowledgeItem,
    KnowledgeItemInput,
    _blank_to_none,
    find_item,
    item_written,
)
from .models import Page

log = logging.getLogger(__name__)


async def set_review_period(conn: asyncpg.Connection, days: int) -> None:
    """Make `days` the review period new entries get (every write path reads it in SQL)."""
    try:
        await conn.execute(db.query("set_review_period"), days)
    except asyncpg.InsufficientPrivilegeError:
        log.warning("cannot write library_settings: new entries keep the review period stored there")


async def set_actor(conn: asyncpg.Connection, member_id: str | None) -> None:
    """Name the member making this transaction's changes (call inside the transaction)."""
    await conn.execute(db.query("set_actor"), member_id)


# -- listing, reviewing, editing ---------------------------------------------------------------


async def list_items(
    conn: asyncpg.Connection, account_id: str, *, stale: bool, owner: str | None, size: int,
    offset: int,
) -> tuple[int, list[KnowledgeItem]]:
    total = await conn.fetchval(db.query("count_library_items"), account_id, stale, owner)
    rows = await conn.fetch(db.query("list_library_items"), account_id, stale, owner, size, offset)
    return total, [KnowledgeItem.from_row(row) for row in rows]


async def mark_reviewed(
    conn: asyncpg.Connection, account_id: str, item_id: str, member_id: str | None,
    review_by: date | None = None, *, actor: audit.Actor | None = None,
) -> KnowledgeItem:
    """Mark an entry reviewed; with `actor`, its audit event in the same transaction."""
    async with conn.transaction():
        await set_actor(conn, member_id)
        row = await conn.fetchrow(
            db.query("mark_knowledge_item_reviewed"), item_id, account_id, review_by
        )
        if row is None:
            raise NotFound(f"no knowledge base item {item_id} in this account")
        item = KnowledgeItem.from_row(row)
        if actor is not None:
            await audit.record(conn, actor, "knowledge_base_item.reviewed", record_id=item.id,
                               account_id=account_id, after={"review_by": review_by})
    return item


@attrs.frozen(kw_only=True)
class ReviewedInput:
    review_by: IsoDate | None = None  # the next review; absent: one review period from today


@attrs.frozen(kw_only=True)
class ItemChange(KnowledgeItemInput):
    """A PATCH of an entry, merged over its stored fields (absent fields keep their values):
    an entry's fields, checked as when it is created, plus its owner and review date."""

    owner_id: str | None = None
    review_by: IsoDate | None = None


async def update_item(
    conn: asyncpg.Connection, account_id: str, item_id: str, member_id: str | None,
    fields: Mapping[str, Any], *, actor: audit.Actor | None = None,
    if_match: Collection[str] | None = None,
) -> KnowledgeItem:
    """Change an entry; the previous version is kept (who, when, what). With `actor`, its audit
    event and webhook are written in the same transaction. With `if_match`, only while the
    entry's tag is one of them (preconditions.check), else PreconditionFailed."""
    async with conn.transaction():
        current = await conn.fetchrow(db.query("lock_knowledge_item"), item_id, account_id)
        if current is None:
            raise NotFound(f"no knowledge base item {item_id} in this account")
        preconditions.check(if_match, preconditions.entry_tag(current["version"]),
                            f"knowledge base item {item_id}")
        before = await find_item(conn, account_id, item_id) if actor is not None else None
        stored = {
            "answer": current["answer"], "question": current["question"], "title": current["title"],
            "tags": list(current["tags"]), "source": current["source"], "yes_no": current["yes_no"],
            "owner_id": current["owner_member_id"],
            "review_by": current["review_by"].isoformat(),
        }
        if "review_by" in fields and fields["review_by"] is None:
            raise ValidationFailed(["knowledge_base_item.review_by: must be a date; an entry "
                                    "always has a review date"])
        change = structure(stored | dict(fields), ItemChange, root="knowledge_base_item")
        if change.owner_id is not None and not await conn.fetchval(
            db.query("is_account_member"), change.owner_id, account_id
        ):
            raise ValidationFailed(
                [f"knowledge_base_item.owner_id: {change.owner_id!r} is not a member of this account"]
            )
        await set_actor(conn, member_id)
        row = await conn.fetchrow(
            db.query("update_knowledge_item"), item_id, account_id,
            _blank_to_none(change.question), change.answer, _blank_to_none(change.title),
            [tag.strip() for tag in change.tags], _blank_to_none(change.source), change.yes_no,
            change.owner_id, change.review_by,
        )
        item = KnowledgeItem.from_row(row)
        if actor is not None:
            await item_written(conn, actor, account_id, item, "knowledge_base_item.updated", before)
    return item


async def stale_items(conn: asyncpg.Connection, account_id: str) -> list[dict[str, Any]]:
    """Every stale entry of an account with its owner's e-mail, most overdue first."""
    return [dict(row) for row in await conn.fetch(db.query("stale_items"), account_id)]


# -- versions ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ItemVersion:
    version: int
    current: bool
    question: str | None
    answer: str
    title: str | None
    tags: list[str]
    source: str | None
    yes_no: bool | None
    owner_id: str | None
    review_by: date | None
    written_by: str | None  # the member id who wrote this version (null: an import or the system)
    written_at: datetime
    replaced_by: str | None
    replaced_at: datetime | None
    change: str | None  # how it was replaced: updated, deleted or merged (null: the current one)


async def versions(
    conn: asyncpg.Connection, account_id: str, item_id: str, page: Page
) -> tuple[list[ItemVersion], int]:
    """A page of an entry's versions, newest first: the current one (if it still exists), then
    the kept ones; and how many there are in all."""
    # One snapshot: an edit between the reads would show a version twice (current and kept).
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        current = await conn.fetchrow(db.query("get_knowledge_item"), item_id, account_id)
        total = await conn.fetchval(db.query("count_knowledge_item_versions"), item_id, account_id)
        if current is None and not total:
            raise NotFound(f"no knowledge base item {item_id} in this account")
        # The current version is the first of the whole list: kept versions start after it.
        first = current is not None and page.offset == 0
        kept = await conn.fetch(
            db.query("knowledge_item_versions"), item_id, account_id, page.size - first,
            max(0, page.offset - (current is not None)),
        )
    found = []
    if first:
        found.append(ItemVersion(
            version=current["version"], current=True, question=current["question"],
            answer=current["answer"], title=current["title"], tags=list(current["tags"]),
            source=current["source"], yes_no=current["yes_no"],
            owner_id=current["owner_member_id"], review_by=current["review_by"],
            written_by=current["updated_by"], written_at=current["updated_at"],
            replaced_by=None, replaced_at=None, change=None,
        ))
    found.extend(
        ItemVersion(
            version=row["version"], current=False, question=row["question"], answer=row["answer"],
            title=row["title"], tags=list(row["tags"]), source=row["source"], yes_no=row["yes_no"],
            owner_id=row["owner_member_id"], review_by=row["review_by"],
            written_by=row["written_by"], written_at=row["written_at"],
            replaced_by=row["replaced_by"], replaced_at=row["replaced_at"], change=row["change"],
        )
        for row in kept
    )
    return found, total + (current is not None)


async def version_authors(
    conn: asyncpg.Connection, account_id: str, found: Sequence[ItemVersion]
) -> dict[str, str]:
    """Who wrote and who replaced each of `found` (versions' member ids), by name; a member removed
    since is absent."""
    ids = sorted({m for v in found for m in (v.written_by, v.replaced_by) if m is not None})
    if not ids:
        return {}
    rows = await conn.fetch(db.query("version_authors"), account_id, ids)
    return {row["id"]: row["name"] for row in rows}


# -- what a question drew on -------------------------------------------------------------------


def stale_attention_point(item_id: str, review_by: str | None) -> str:
    when = f" (review by {review_by})" if review_by else ""
    return (f"Drawn from knowledge-base entry {item_id}, which is past its review date{when}: "
            "check it is still right before using this answer.")


# -- duplicates and conflicts ------------------------------------------------------------------

# "Yes, …" / "No." at the start of an answer: its Yes/No lead.
_LEAD = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
# A number with a unit of time or size: what retention periods, RTOs and limits are stated in.
_QUANTITY = re.compile(
    r"(\d+(?:[.,]\d+)?)\s*(second|minute|hour|day|week|month|year|gb|mb|tb|%|percent)s?(?![a-z])",
    re.IGNORECASE,
)


def yes_no_lead(answer: str | None, yes_no: bool | None = None) -> bool | None:
    """The entry's own Yes/No, else the Yes/No its answer opens with."""
    if yes_no is not None:
        return yes_no
    match = _LEAD.match(answer or "")
    return None if match is None else match.group(1).lower() == "yes"


def quantities(answer: str) -> dict[str, set[float]]:
    """The numbers an answer states, by unit: {"day": {90.0}}."""
    found: dict[str, set[float]] = {}
    for number, unit in _QUANTITY.findall(answer):
        unit = "%" if unit.lower() == "percent" else unit.lower()
        found.setdefault(unit, set()).add(float(number.replace(",", ".")))
    return found


@attrs.frozen(kw_only=True)
class Finding:
    item_a: str
    item_b: str
    kind: str  # duplicate | conflict
    reason: str
    similarity: float


def classify(
    a: Mapping[str, Any], b: Mapping[str, Any], question_similarity: float | None,
    answer_similarity: float | None, duplicate_similarity: float,
) -> Finding | None:
    """What a similar pair is: a conflict (same question, different Yes/No or numbers), a
    duplicate (near-identical question or answer), or nothing worth reporting."""
    ids = (a["id"], b["id"])
    if question_similarity is not None:
        lead_a, lead_b = yes_no_lead(a["answer"], a["yes_no"]), yes_no_lead(b["answer"], b["yes_no"])
        if lead_a is not None and lead_b is not None and lead_a != lead_b:
            yes, no = ids if lead_a else ids[::-1]
            return Finding(item_a=ids[0], item_b=ids[1], kind="conflict",
                           reason=f"same question answered Yes by {yes} and No by {no}",
                           similarity=question_similarity)
        numbers_a, numbers_b = quantities(a["answer"]), quantities(b["answer"])
        for unit in sorted(numbers_a.keys() & numbers_b.keys()):
            if numbers_a[unit] != numbers_b[unit]:
                shown = " vs ".join(
                    ", ".join(f"{n:g}" for n in sorted(side)) + f" {unit}"
                    for side in (numbers_a[unit], numbers_b[unit])
                )
                return Finding(item_a=ids[0], item_b=ids[1], kind="conflict",
                               reason=f"same question, different numbers: {shown}",
                               similarity=question_similarity)
        if question_similarity >= duplicate_similarity:
            return Finding(item_a=ids[0], item_b=ids[1], kind="duplicate",
                           reason="near-identical questions", similarity=question_similarity)
    if answer_similarity is not None and answer_similarity >= duplicate_similarity:
        return Finding(item_a=ids[0], item_b=ids[1], kind="duplicate",
                       reason="near-identical answers", similarity=answer_similarity)
    return None


@attrs.frozen(kw_only=True)
class DuplicateRun:
    entries: int
    findings: int
    seconds: float


# Candidate pairs come from rare words, as retrieval's candidates do: two entries that say the same
# thing share their rarest words, and a rare word's few entries are all that is compared (never
# every pair: 10,000 entries are 50 million pairs). Each candidate pair is then scored by trigram
# similarity (pg_trgm's measure: shared over all trigrams of the words).
RARE_WORDS = 4  # an entry's rarest words (each in 2 to MAX_POSTING entries) that choose its candidates
MAX_POSTING = 200  # a word in more entries than this says nothing about sameness
# Each entry is compared with at most this many others, those sharing most of its rare words
# first, and entries of one same text pair with the first of them only (a star, not every pair).
# Without these bounds n entries saying the same thing were n(n-1)/2 comparisons and findings:
# 3,000 copies of one entry (a 100 KB CSV) took 41 s of CPU and 1.8 GB, 10,000 would exhaust
# memory. Now a run's work and findings grow with the number of entries, not its square.
MAX_CANDIDATES = 20
ANSWER_OPENING = 300  # answers are compared by their opening characters
# and questions by theirs: a comparison costs as many trigrams as the texts hold, and 20 of them
# per entry of 10,000-character questions were ~80 s of CPU for 100 MB of questions, in a thread
# that holds the GIL against the event loop. Questions as written are far shorter than this.
QUESTION_OPENING = 1_000
# Trigram sets kept at once for comparing (the oldest made is let go): an entry's set is up to
# ~100 KB for 1,000 characters of words, and kept for every entry compared, 2,000 entries in pairs
# sharing two words held 154 MB (30,000: some 2.3 GB). A set let go is made again if needed.
GRAMS_KEPT = 256
# A run keeps its first findings in the report's order (conflicts first, the most alike first),
# as many as the report's pages reach. It kept every one: 100,000 entries' 450,224 findings,
# which every GET of the report (any reader's) and the library care page sorted and counted,
# 0.5-1 s of database time each, for pairs no page showed.
MAX_FINDINGS = 10_000
_WORD = re.compile(r"[^\W_]+")


def trigrams(text: str) -> frozenset[str]:
    """pg_trgm's trigrams: of each lower-cased word, padded with two spaces before and one after."""
    grams = set()
    for word in _WORD.findall(text.lower()):
        padded = f"  {word} "
        grams.update(padded[i:i + 3] for i in range(len(padded) - 2))
    return frozenset(grams)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    shared = len(a & b)
    union = len(a) + len(b) - shared
    return shared / union if union else 0.0


def similar_pairs(texts: Mapping[str, str], threshold: float) -> dict[tuple[str, str], float]:
    """{(id a, id b): similarity} of the texts at least `threshold` alike, a < b."""
    # Kept small: a probe's 30,000 entries of words found nowhere else held 1.5 GB here. A word of
    # one entry (most of such a library's) keeps that entry's id, not a list of its own; a text
    # is told identical to another by a digest of its words, not a copy of them; an entry's words
    # are found again where they are needed rather than kept.
    same: dict[str, bytes] = {}
    once: dict[str, str] = {}
    postings: dict[str, list[str]] = {}
    for item_id, text in texts.items():
        found = _WORD.findall(text.lower())
        same[item_id] = hashlib.blake2b(" ".join(found).encode(), digest_size=16).digest()
        for word in set(found):
            if (held := postings.get(word)) is not None:
                held.append(item_id)
            elif (first := once.pop(word, None)) is not None:
                postings[word] = [first, item_id]
            else:
                once[word] = item_id
    del once
    # Identical texts pair up even when every word is common: each with the first of them.
    first_of: dict[bytes, str] = {}
    for item_id in sorted(texts):
        first_of.setdefault(same[item_id], item_id)
    grams: dict[str, frozenset[str]] = {}
    pairs: dict[tuple[str, str], float] = {}
    for item_id, text in texts.items():
        found = set(_WORD.findall(text.lower()))  # again: kept, every entry's words were most of it
        rare = sorted((w for w in found if w in postings and len(postings[w]) <= MAX_POSTING),
                      key=lambda w: (len(postings[w]), w))[:RARE_WORDS]
        # Another entry is compared only when it shares two of these words (one when the entry
        # has only one): near-duplicates share nearly all their words, strangers a common one.
        hits = collections.Counter(other for w in rare for other in postings[w] if other > item_id)
        needed = min(2, len(rare))
        shared = sorted(((-count, other) for other, count in hits.items() if count >= needed))
        candidates = {other for _, other in shared[:MAX_CANDIDATES]}
        first = first_of[same[item_id]]
        if first != item_id:
            candidates.add(first)
        if not candidates:
            continue
        mine = _trigrams_kept(grams, texts, item_id)
        for other in candidates:
            theirs = _trigrams_kept(grams, texts, other)
            score = similarity(mine, theirs)
            if score >= threshold:
                pairs[(item_id, other) if item_id < other else (other, item_id)] = score
    return pairs


def _trigrams_kept(kept: dict[str, frozenset[str]], texts: Mapping[str, str], item_id: str) -> frozenset[str]:
    found = kept.get(item_id)
    if found is None:
        if len(kept) >= GRAMS_KEPT:
            del kept[next(iter(kept))]  # the oldest made
        found = kept[item_id] = trigrams(texts[item_id])
    return found


def classify_library(
    entries: Sequence[Mapping[str, Any]], duplicate_similarity: float, conflict_similarity: float
) -> list[Finding]:
    """Every duplicate and conflict among an account's entries (CPU only: run it in a thread)."""
    by_id = {row["id"]: row for row in entries}
    by_question = similar_pairs(
        {row["id"]: row["question"][:QUESTION_OPENING] for row in entries if row["question"]},
        min(duplicate_similarity, conflict_similarity),
    )
    by_answer = similar_pairs(
        {row["id"]: row["answer"][:ANSWER_OPENING] for row in entries}, duplicate_similarity
    )
    return [
        found
        for a, b in sorted(by_question.keys() | by_answer.keys())
        if (found := classify(by_id[a], by_id[b], by_question.get((a, b)), by_answer.get((a, b)),
                              duplicate_similarity)) is not None
    ]


def first_findings(findings: Sequence[Finding], limit: int = MAX_FINDINGS) -> list[Finding]:
    """The first `limit` findings in list_duplicates' order (CPU only: run it in a thread)."""
    return heapq.nsmallest(limit, findings, key=lambda f: (
        f.kind != "conflict", -f.similarity, f.item_a, f.item_b))


async def find_duplicates(
    conn: asyncpg.Connection, account_id: str, *, duplicate_similarity: float,
    conflict_similarity: float,
) -> DuplicateRun | None:
    """Recompute an account's duplicates and conflicts; None when a run is already under way."""
    started = time.monotonic()
    claim = await conn.fetchrow(db.query("start_duplicate_run"), account_id)
    if claim is None:
        return None
    entries = await conn.fetch(db.query("duplicate_entries"), account_id)
    findings = await asyncio.to_thread(
        classify_library, entries, duplicate_similarity, conflict_similarity
    )
    kept = await asyncio.to_thread(first_findings, findings)
    seconds = time.monotonic() - started
    async with conn.transaction():
        await conn.execute(db.query("clear_duplicates"), account_id)
        await conn.execute(
            db.query("replace_duplicates"), account_id, [f.item_a for f in kept],
            [f.item_b for f in kept], [f.kind for f in kept], [f.reason for f in kept],
            [f.similarity for f in kept],
        )
        await conn.execute(db.query("finish_duplicate_run"), account_id, len(entries), seconds,
                           claim["seen"])
    return DuplicateRun(entries=len(entries), findings=len(findings), seconds=seconds)


def _entry(row: Mapping[str, Any], side: str) -> dict[str, Any]:
    return {"id": row[f"{side}_id"], "question": row[f"{side}_question"], "answer": row[f"{side}_answer"]}


async def duplicate_report(
    conn: asyncpg.Connection, account_id: str, limit: int | None = None, page: Page | None = None
) -> dict[str, Any]:
    """The account's last findings: {state, computed_at, entries, seconds, pairs}. `state` is
    `fresh`, `outdated` (entries changed since) or `computing` (no finished run yet). Pairs come
    conflicts first: with `limit`, only the first that many; with `page`, that page's, and the
    report has the SPEC's `pagination` object (a large library has tens of thousands)."""
    run = await conn.fetchrow(db.query("duplicate_run"), account_id)
    if page is not None:
        limit = page.size
    rows = await conn.fetch(db.query("list_duplicates"), account_id, limit,
                            page.offset if page is not None else 0)
    if run is None or run["computed_at"] is None:
        state = "computing"
    elif run["computed_at"] < run["started_at"] or run["outdated"]:
        state = "outdated"
    else:
        state = "fresh"
    return {
        "state": state,
        "computed_at": None if run is None else run["computed_at"],
        "entries": None if run is None else run["entries"],
        "seconds": None if run is None or run["seconds"] is None else round(run["seconds"], 3),
        "pairs": [
            {"kind": row["kind"], "reason": row["reason"], "similarity": round(row["similarity"], 4),
             "items": [_entry(row, "a"), _entry(row, "b")]}
            for row in rows
        ],
    } | ({} if page is None else {"pagination": page.pagination(
        await conn.fetchval(db.query("count_duplicates"), account_id), len(rows))})


# -- merging -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class MergeInput:
    duplicate_id: NonBlank  # the entry merged into this one, and removed


async def merge(
    conn: asyncpg.Connection, account_id: str, keep_id: str, duplicate_id: str, member_id: str | None,
    *, actor: audit.Actor | None = None, shown_versions: Mapping[str, int] | None = None,
) -> tuple[KnowledgeItem, int]:
    """Merge `duplicate_id` into `keep_id`: questions and RFP items that cited the duplicate cite
    the kept entry (each question remembering `merged_from`), the duplicate's versions stay
    readable, and it is removed. Returns the kept entry and how many questions were repointed.
    With `actor`, the merge's audit event, the duplicate's deletion (audit event and webhook) and
    the kept entry's update webhook are written in the same transaction.

    `shown_versions` (entry id → version), from the web app's page where a member chose the entry
    kept after reading both: either one changed since is a Conflict and nothing is merged, where
    a text edited meanwhile was kept, or removed, unseen."""
    if keep_id == duplicate_id:
        raise ValidationFailed(["duplicate_id: must be another entry than the one kept"])
    # Ids no entry can have (a NUL, which PostgreSQL text cannot hold: the lookups would be a 500)
    # are refused as unknown ones are.
    if not could_be_id(keep_id):
        raise NotFound("no such knowledge base item in this account")
    if not could_be_id(duplicate_id):
        raise ValidationFailed(["duplicate_id: no knowledge base item by that id in this account"])
    async with conn.transaction():
        # The duplicate as it was, for its deletion's event (a missing one is the 422 below).
        duplicate = await find_item(conn, account_id, duplicate_id) if actor is not None else None
        # The RFP items saved as either entry first, as an approval takes an item, then its entry.
        await conn.execute(db.query("lock_items_saved_as"), [keep_id, duplicate_id], account_id)
        # Both entries locked in one order, an import's: merging A into B while B is merged into
        # A (each locking its kept entry first), or while an import updated both, deadlocked.
        locked = {row["id"]: row for row in await conn.fetch(
            db.query("lock_knowledge_items_to_merge"), [keep_id, duplicate_id], account_id)}
        kept = locked.get(keep_id)
        if kept is None:
            raise NotFound(f"no knowledge base item {keep_id} in this account")
        if duplicate_id not in locked:
            raise ValidationFailed([f"duplicate_id: no knowledge base item {duplicate_id} in this account"])
        changed = [item_id for item_id, version in (shown_versions or {}).items()
                   if item_id in locked and locked[item_id]["version"] != version]
        if changed:
            raise Conflict(f"knowledge base item {changed[0]} changed since it was shown; nothing was merged")
        await set_actor(conn, member_id)
        await conn.execute(db.query("set_merging"))
        repointed = await conn.fetch(
            db.query("repoint_question_references"), account_id, duplicate_id, keep_id
        )
        await conn.execute(db.query("repoint_rfp_items"), duplicate_id, keep_id)
        await conn.execute(db.query("delete_merged_item"), duplicate_id, account_id)
        item = KnowledgeItem.from_row(kept)
        if actor is not None:
            await audit.record(conn, actor, "knowledge_base_item.merged", record_id=item.id,
                               account_id=account_id, after={
                                   "merged_id": duplicate_id, "questions_repointed": len(repointed),
                               })
            if duplicate is not None:
                await item_written(conn, actor, account_id, duplicate, "knowledge_base_item.deleted")
            await webhooks.emit(conn, account_id, "knowledge_base_item.updated", item.id,
                                unstructure(item))
    return item, len(repointed)
