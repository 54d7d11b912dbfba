"""Knowledge base: an account's entries (question?, answer, title, tags, source) and CSV import."""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Collection, Iterator, Mapping
from datetime import UTC, date, datetime
from typing import Any

import asyncpg
import attrs

from .. import db
from . import audit, import_reports, preconditions, uploads, webhooks
from .convert import MAX_NAME_SHOWN, NonBlank, TagList, at_most, structure, unstructure
from .errors import NotFound, ValidationFailed
from .ids import could_be_id, new_id
from .models import Page
from .questions import fetch_question
from .rfps import SEARCH_COUNT_CAP, bounded_search, search_pattern
from .uploads import Limits

log = logging.getLogger(__name__)


MAX_QUESTION = 10_000
MAX_ANSWER = 100_000


MAX_SHORT = 500  # title, source, external id, each tag
MAX_TAGS = 50


MAX_IMPORT_ROWS = 10_000
DEFAULT_LIMITS = Limits()
CSV_COLUMNS = ("question", "answer", "title", "tags", "source", "id", "yes_no")


# The CSV's yes_no column: a questionnaire's own Yes/No for the entry; blank or "N/A" is none.
YES_NO = {"yes": True, "y": True, "true": True, "no": False, "n": False, "false": False,
          "": None, "n/a": None, "na": None, "-": None}
YES_NO_WORDS = "Yes, No or blank (also Y, N, true, false, N/A, NA or -; any case)"




def _tags(instance: object, attribute: attrs.Attribute, value: list[str]) -> None:
    if len(value) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    for tag in value:
        if not tag.strip() or len(tag) > MAX_SHORT:
            raise ValueError(f"each tag must be non-blank and at most {MAX_SHORT} characters")


@attrs.frozen(kw_only=True)
class KnowledgeItemInput:
    answer: NonBlank = attrs.field(validator=at_most(MAX_ANSWER))
    question: str | None = attrs.field(default=None, validator=at_most(MAX_QUESTION))
    title: str | None = attrs.field(default=None, validator=at_most(MAX_SHORT))
    tags: TagList = attrs.field(factory=list, validator=_tags)
    source: str | None = attrs.field(default=None, validator=at_most(MAX_SHORT))
    # The entry's own Yes/No (a questionnaire's yes_no column): leads answers to yes/no questions.
    yes_no: bool | None = None


@attrs.frozen(kw_only=True)
class ImportRow(KnowledgeItemInput):
    """A CSV row: an entry plus the importer's own id, which re-imports update by."""

    external_id: str | None = attrs.field(default=None, validator=at_most(MAX_SHORT))


@attrs.frozen(kw_only=True)
class KnowledgeItem:
    id: str
    question: str | None
    answer: str
    title: str | None
    tags: list[str]
    source: str | None
    external_id: str | None
    yes_no: bool | None
    created_at: datetime
    updated_at: datetime
    # Library care (service/domain/library.py): who keeps the entry right, and until when.
    owner_id: str | None = None
    review_by: date | None = None
    reviewed_at: datetime | None = None
    stale: bool = False
    version: int = 1

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> KnowledgeItem:
        review_by = row.get("review_by")
        return cls(
            id=row["id"],
            question=row["question"],
            answer=row["answer"],
            title=row["title"],
            tags=list(row["tags"]),
            source=row["source"],
            external_id=row["external_id"],
            yes_no=row["yes_no"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            owner_id=row.get("owner_member_id"),
            review_by=review_by,
            reviewed_at=row.get("reviewed_at"),
            stale=review_by is not None and review_by < datetime.now(UTC).date(),
            version=row.get("version", 1),
        )


def _blank_to_none(value: str | None) -> str | None:
    return value if value is not None and value.strip() else None


_AUDITED = ("question", "answer", "title", "tags", "source", "yes_no", "owner_id", "review_by")


async def item_written(
    conn: asyncpg.Connection, actor: audit.Actor, account_id: str, item: KnowledgeItem,
    event_type: str, before: KnowledgeItem | None = None,
) -> int:
    """The audit event and webhook of a created, changed or deleted entry (in the caller's
    transaction); returns how many webhook deliveries were queued."""
    data = unstructure(item)
    if event_type.endswith("deleted"):
        await audit.record(conn, actor, event_type, record_id=item.id, account_id=account_id,
                           before={k: data[k] for k in _AUDITED})
    else:
        old = unstructure(before) if before is not None else None
        await audit.record(conn, actor, event_type, record_id=item.id, account_id=account_id,
                           before=None if old is None else {k: old[k] for k in _AUDITED},
                           after={k: data[k] for k in _AUDITED})
    return await webhooks.emit(conn, account_id, event_type, item.id, data)


async def create_item(
    conn: asyncpg.Connection, account_id: str, data: KnowledgeItemInput,
    *, actor: audit.Actor | None = None,
) -> KnowledgeItem:
    """Add an entry; with `actor`, its audit event and webhook in the same transaction."""
    async with conn.transaction():
        # Its first version says who wrote it (library.py).
        await conn.execute(db.query("set_actor"), actor.member_id if actor else None)
        item = await _insert_item(conn, account_id, data)
        if actor is not None:
            await item_written(conn, actor, account_id, item, "knowledge_base_item.created")
    return item


async def _insert_item(
    conn: asyncpg.Connection, account_id: str, data: KnowledgeItemInput
) -> KnowledgeItem:
    row = await conn.fetchrow(
        db.query("insert_knowledge_item"),
        new_id("kb"),
        account_id,
        _blank_to_none(data.question),
        data.answer,
        _blank_to_none(data.title),
        [tag.strip() for tag in data.tags],
        _blank_to_none(data.source),
        None,  # external ids come from imports only
        data.yes_no,
    )
    return KnowledgeItem.from_row(row)


async def find_item(conn: asyncpg.Connection, account_id: str, item_id: str) -> KnowledgeItem | None:
    if not could_be_id(item_id):  # a NUL (PostgreSQL text holds none) is as unknown as any id
        return None
    row = await conn.fetchrow(db.query("get_knowledge_item"), item_id, account_id)
    return None if row is None else KnowledgeItem.from_row(row)


async def fetch_item(conn: asyncpg.Connection, account_id: str, item_id: str) -> KnowledgeItem:
    item = await find_item(conn, account_id, item_id)
    if item is None:
        raise NotFound(f"no knowledge base item {item_id} in this account")
    return item


async def delete_item(
    conn: asyncpg.Connection, account_id: str, item_id: str, *, actor: audit.Actor | None = None,
    if_match: Collection[str] | None = None,
) -> KnowledgeItem:
    """Delete an entry; returns it as it was. With `actor`, its audit event and webhook are
    written in the same transaction. With `if_match`, only while the entry's tag is one of them
    (preconditions.check), else PreconditionFailed: an entry edited since it was read is not
    deleted unseen."""
    if not could_be_id(item_id):
        raise NotFound("no such knowledge base item in this account")
    async with conn.transaction():
        # The deleted version says who deleted it (library.py).
        await conn.execute(db.query("set_actor"), actor.member_id if actor else None)
        await conn.execute(db.query("lock_items_saved_as"), [item_id], account_id)  # before the entry
        row = await conn.fetchrow(db.query("lock_knowledge_item"), item_id, account_id)
        if row is None:
            raise NotFound(f"no knowledge base item {item_id} in this account")
        preconditions.check(if_match, preconditions.entry_tag(row["version"]),
                            f"knowledge base item {item_id}")
        await conn.execute(db.query("delete_knowledge_item"), item_id, account_id)
        item = KnowledgeItem.from_row(row)
        if actor is not None:
            await item_written(conn, actor, account_id, item, "knowledge_base_item.deleted")
    return item


@attrs.frozen(kw_only=True)
class Rejection:
    row: int  # the spreadsheet row: the header is row 1, the first entry row 2
    reason: str


@attrs.frozen(kw_only=True)
class ImportReport:
    imported: int
    created: int
    updated: int
    rejected: list[Rejection]
    ignored_columns: list[str]


@attrs.frozen(kw_only=True)
class ParsedCsv:
    valid: list[tuple[int, ImportRow]]  # (row number, row)
    rejected: list[Rejection]
    ignored_columns: list[str]


def _shown(text: str) -> str:
    """A cell quoted in the report, cut to MAX_NAME_SHOWN characters: a report quoting whole
    cells (up to uploads.max_cell_chars each) was four times its upload as the import's page."""
    return text if len(text) <= MAX_NAME_SHOWN else text[:MAX_NAME_SHOWN] + "…"


def parse_knowledge_csv(text: str, limits: Limits = DEFAULT_LIMITS) -> ParsedCsv:
    """The valid rows of a knowledge-base CSV (with their row numbers) and the rejected ones.

    A header without `answer` or too many rows rejects the whole file (422), as does a file past
    an upload limit (413) or holding a NUL character (422); a bad row only itself. Columns other
    than CSV_COLUMNS (spreadsheet exports carry many) are ignored and named. The format is fixed:
    comma-separated, so no delimiter is guessed.
    """
    return _knowledge_rows(uploads.csv_records(io.StringIO(text, newline=""), limits, csv.excel))


def _knowledge_rows(records: Iterator[tuple[int, list[str]]]) -> ParsedCsv:
    try:
        first = next(records, None)
    except uploads.NotCsv as exc:
        raise ValidationFailed([f"csv: the header row is not valid CSV: {exc.error}"],
                               message="the file could not be read") from None
    header = None if first is None else first[1]
    if header is None:
        raise ValidationFailed(["csv: the file is empty; expected a header row question,answer,…"],
                               message="the file is empty")
    names = [name.strip().lower() for name in header]
    problems = []
    known = [name for name in names if name in CSV_COLUMNS]
    if len(set(known)) != len(known):
        problems.append("csv: a column appears twice in the header")
    if "answer" not in names:
        problems.append("csv: the header must have an answer column")
    if problems:
        raise ValidationFailed(problems, message="the header row is not usable")

    valid: list[tuple[int, ImportRow]] = []
    rejected: list[Rejection] = []
    seen_ids: dict[str, int] = {}
    while True:
        try:
            record = next(records, None)
        except uploads.NotCsv as exc:
            rejected.append(Rejection(row=exc.row, reason=f"not valid CSV: {exc.error}"))
            break  # the reader cannot resynchronise after a broken quote
        if record is None:
            break
        row_number, values = record
        if not any(value.strip() for value in values):
            continue  # blank lines are not entries
        if row_number - 1 > MAX_IMPORT_ROWS:
            raise ValidationFailed([f"csv: at most {MAX_IMPORT_ROWS} rows per import; split the file"],
                                   message="the file has too many rows")
        if len(values) != len(names):
            rejected.append(Rejection(
                row=row_number, reason=f"has {len(values)} fields; the header has {len(names)}"
            ))
            continue
        fields = {name: value for name, value in zip(names, values, strict=True) if name in CSV_COLUMNS}
        yes_no_text = (fields.get("yes_no") or "").strip().lower()
        if yes_no_text not in YES_NO:
            rejected.append(Rejection(
                row=row_number, reason=f"yes_no must be {YES_NO_WORDS}; got {_shown(fields['yes_no'])!r}"
            ))
            continue
        raw: dict[str, Any] = {
            "answer": fields["answer"],
            "question": fields.get("question") or None,
            "title": fields.get("title") or None,
            "source": fields.get("source") or None,
            "external_id": (fields.get("id") or "").strip() or None,
            "tags": [tag.strip() for tag in (fields.get("tags") or "").split(";") if tag.strip()],
            "yes_no": YES_NO[yes_no_text],
        }
        try:
            item = structure(raw, ImportRow)
        except ValidationFailed as exc:
            reason = "; ".join(exc.details or [exc.message]).replace("external_id", "id")
            rejected.append(Rejection(row=row_number, reason=reason))
            continue
        if item.external_id is not None:
            if item.external_id in seen_ids:
                rejected.append(Rejection(
                    row=row_number,
                    reason=f"id {item.external_id!r} already appears on row {seen_ids[item.external_id]}",
                ))
                continue
            seen_ids[item.external_id] = row_number
        valid.append((row_number, item))
    ignored = [_shown(name) for name in names if name not in CSV_COLUMNS]
    return ParsedCsv(valid=valid, rejected=rejected, ignored_columns=ignored)


def parse_upload(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> ParsedCsv:
    """An uploaded knowledge-base CSV's bytes (UTF-8), parsed: what a parse worker process runs
    (service/domain/isolation.py), so a large or hostile file never blocks the service."""
    with uploads.unforeseen("file: not a readable knowledge-base CSV: its CSV structure is malformed"):
        return uploads.read_csv(io.BytesIO(raw), limits, _knowledge_rows, dialect=csv.excel)


async def import_csv(
    conn: asyncpg.Connection, account_id: str, text: str | ParsedCsv,
    actor: audit.Actor | None = None,
) -> ImportReport:
    """Create or update (by `id`) the valid rows in one transaction; report the rejected ones.
    With `actor`, the audit event and the entries' webhooks are written in that transaction."""
    parsed = parse_knowledge_csv(text) if isinstance(text, str) else text
    async with conn.transaction():
        report = await _import_rows(conn, account_id, parsed, actor)
    if parsed.valid:
        await merge_pending_index(conn)
    return report


async def import_csv_kept(
    conn: asyncpg.Connection, account_id: str, parsed: ParsedCsv, actor: audit.Actor,
) -> tuple[ImportReport, str]:
    """`import_csv`, its report kept (import_reports.py) in the import's transaction, for the web
    app's report page: (the report, its id). Kept apart, a failure between the two would leave an
    import done with no page to show it, and the form sent again would import it twice."""
    async with conn.transaction():
        report = await _import_rows(conn, account_id, parsed, actor)
        report_id = await import_reports.keep(conn, account_id, actor.member_id, unstructure(report))
    if parsed.valid:
        # After the commit: for a role not the index's owner it fails, which would abort the import.
        await merge_pending_index(conn)
    return report, report_id


async def _import_rows(
    conn: asyncpg.Connection, account_id: str, parsed: ParsedCsv, actor: audit.Actor | None,
) -> ImportReport:
    """The rows of `import_csv`, within the caller's transaction."""
    valid = parsed.valid
    created = updated = 0
    if valid:
        items = [item for _, item in valid]
        # The entries' versions say who (library.py).
        await conn.execute(db.query("set_actor"), actor.member_id if actor else None)
        rows = await conn.fetch(
            db.query("upsert_knowledge_items"),
            account_id,
            [new_id("kb") for _ in items],
            [_blank_to_none(i.question) for i in items],
            [i.answer for i in items],
            [_blank_to_none(i.title) for i in items],
            [json.dumps(i.tags) for i in items],
            [_blank_to_none(i.source) for i in items],
            [i.external_id for i in items],
            [i.yes_no for i in items],
        )
        created = sum(1 for row in rows if row["created"])
        updated = len(rows) - created
        if actor is not None:
            await audit.record(conn, actor, "knowledge_base_items.imported", after={
                "created": created, "updated": updated, "rejected": len(parsed.rejected),
            }, account_id=account_id)
            await emit_items(conn, account_id, rows)
    return ImportReport(
        imported=created + updated,
        created=created,
        updated=updated,
        rejected=parsed.rejected,
        ignored_columns=parsed.ignored_columns,
    )


async def emit_items(conn: asyncpg.Connection, account_id: str, rows: list[asyncpg.Record]) -> None:
    """knowledge_base_item.created/updated for the rows of an import, when an endpoint wants them."""
    for event_type, wanted_rows in (
        ("knowledge_base_item.created", [r["id"] for r in rows if r["created"]]),
        ("knowledge_base_item.updated", [r["id"] for r in rows if not r["created"]]),
    ):
        if wanted_rows and await webhooks.wanted(conn, account_id, event_type):
            for row in await conn.fetch(db.query("knowledge_items_by_ids"), account_id, wanted_rows):
                item = KnowledgeItem.from_row(row)
                await webhooks.emit(conn, account_id, event_type, item.id, unstructure(item))


async def merge_pending_index(conn: asyncpg.Connection) -> None:
    """Merge the full-text index's pending list into the index proper after a bulk write.

    New entries' lexemes wait in the GIN index's pending list until autovacuum merges them, and
    every retrieval reads that whole list meanwhile (BENCHMARKS.md, Retrieval). Merging costs the
    import what the next vacuum would have spent anyway. Only the index's owner may merge; another
    role leaves it to autovacuum.
    """
    try:
        await conn.execute(db.query("merge_knowledge_index_pending"))
    except asyncpg.InsufficientPrivilegeError:
        log.info("not the knowledge index's owner: its pending list is left to autovacuum")


@attrs.frozen(kw_only=True)
class Review:
    approved: bool
    answer: str | None = None  # the corrected answer; absent: the question's own answer


async def save_review(
    conn: asyncpg.Connection, account_id: str, question_id: str, answer: str | None,
    member_id: str | None = None, *, actor: audit.Actor | None = None, approved: bool = True,
) -> tuple[KnowledgeItem, bool]:
    """Store question `question_id` with `answer` (or its own answer) as a knowledge-base entry:
    (the entry, whether it is new). The entry an earlier review of this question (or of the same
    question text) saved is updated rather than duplicated. With `actor`, the review's audit event
    (`approved`: whether the answer was approved, else corrected) and the entry's audit event and
    webhook are written in the same transaction."""
    async with conn.transaction():
        item, created = await _save_review(conn, account_id, question_id, answer, member_id)
        if actor is not None:
            await audit.record(conn, actor, "question.reviewed", record_id=question_id,
                               account_id=account_id,
                               after={"approved": approved, "knowledge_base_item_id": item.id})
            await item_written(conn, actor, account_id, item, "knowledge_base_item.created"
                               if created else "knowledge_base_item.updated")
    return item, created


async def _save_review(
    conn: asyncpg.Connection, account_id: str, question_id: str, answer: str | None,
    member_id: str | None,
) -> tuple[KnowledgeItem, bool]:
    row = await fetch_question(conn, question_id, account_id)
    text = answer if answer is not None else row["answer"]
    details = []
    if answer is None and (row["state"] != "complete" or not row["sufficient_context"]):
        details.append("answer: required when the question has no drafted answer to approve")
    elif text is None or not text.strip():
        details.append("answer: must not be blank")
    elif len(text) > MAX_ANSWER:
        details.append(f"answer: must be at most {MAX_ANSWER} characters")
    if len(row["question"]) > MAX_QUESTION:
        details.append(f"question: longer than {MAX_QUESTION} characters; add the entry by hand")
    if details:
        raise ValidationFailed(details)
    return await save_reviewed_answer(
        conn, account_id, question=row["question"], answer=text,
        source=f"review of question {question_id}", reviewed_question=question_id, owner=member_id,
    )


async def save_reviewed_answer(
    conn: asyncpg.Connection, account_id: str, *, question: str, answer: str, source: str,
    title: str | None = None, external_id: str | None = None, reviewed_question: str | None = None,
    owner: str | None = None, saved_as: str | None = None,
) -> tuple[KnowledgeItem, bool]:
    """Save an answer a person approved as a knowledge-base entry: (the entry, whether it is new).

    The one way both reviews save: an RFP item's (keyed by `external_id` "rfp_item:<id>") and a
    question's (keyed by `reviewed_question`, or the same question text). Saving the same item or
    question again updates its entry rather than adding another; a new entry is owned by `owner`
    (the reviewing member), an existing one keeps its owner and review date. `saved_as`: the entry
    an RFP item is saved as now (rfp_items.knowledge_item_id), which is the one a merge kept once
    the item's own entry was merged into it (its external id went with the duplicate).
    """
    async with conn.transaction():
        await conn.execute(db.query("set_actor"), owner)  # the entry's version says who (library.py)
        if reviewed_question is not None:  # a question's review: one entry per question text
            await conn.execute(db.query("lock_reviewed_question_text"), account_id, question)
        for _ in range(2):  # a second pass updates the entry a concurrent first save just inserted
            saved = await conn.fetchrow(
                db.query("save_reviewed_answer"), new_id("kb"), account_id, question, answer, title,
                source, external_id, reviewed_question, owner, saved_as,
            )
            if saved is not None:
                return KnowledgeItem.from_row(saved), saved["created"]
    raise RuntimeError("save_reviewed_answer: the entry neither existed nor could be inserted")


# A search of the knowledge base counts its matches up to this many (50 pages), and pages no
# deeper: each match is rechecked against its whole answer, and counting 10,000 of 50,000 entries
# took 120 ms where 1,000 take a tenth of that. The list without a term counts to SEARCH_COUNT_CAP.
KB_SEARCH_COUNT_CAP = 1_000


def search_count_cap(term: str | None) -> int:
    """How far search_items counts (and pages) for `term`."""
    return KB_SEARCH_COUNT_CAP if term and term.strip() else SEARCH_COUNT_CAP


async def search_items(
    conn: asyncpg.Connection, account_id: str, term: str | None, page: Page,
    parameter: str = "q",
) -> tuple[list[KnowledgeItem], int, bool]:
    """One page of the account's entries whose question, answer or title holds `term` (the same
    substring rule and term limits as the RFP search; None or blank: every entry), newest first,
    the count, and whether the count stopped at search_count_cap ("at least")."""
    pattern = search_pattern(term, parameter) if term and term.strip() else None
    cap = search_count_cap(term)
    rows, total = await bounded_search(conn, "count_knowledge_items_capped",
                                       "search_knowledge_items", account_id, pattern, cap, page)
    return [KnowledgeItem.from_row(row) for row in rows], total, total >= cap
