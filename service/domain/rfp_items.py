"""The RFP workflow: add and import items, answer them all, review them, export the response.

Questionnaire uploads are streamed into a spooled temporary file (memory up to a few MiB, then
disk) up to `server.max_upload_bytes`; the app's `client_max_size` (`server.max_body_bytes`) only
bounds bodies read whole, i.e. JSON, so the JSON limit stays small while uploads may be large.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import IO, Any

import asyncpg
import attrs

from .. import db
from ..config import MailConfig
from . import audit, import_reports, mail, preconditions, questionnaires, webhooks, writeback
from .convert import (
    NonBlank,
    PositiveCount,
    ReviewState,
    UserId,
    at_most,
    is_user_id,
    structure,
    unstructure,
)
from .errors import (
    NotFound,
    ParameterInvalid,
    ValidationFailed,
)
from .ids import could_be_id
from .knowledge import save_reviewed_answer
from .models import MemberRef, RfpItem, rfp_json
from .questions import ITEMS_REFUSED, DetailLevel, create_item_questions, require_active_subscription
from .rfps import MAX_ITEMS_PER_RFP, MAX_TEXT, MAX_TITLE, append_items, fetch_rfp
from .tokens import Principal

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class ItemReview:
    """A PATCH of an item, merged over its stored fields (absent fields keep their values)."""

    question: NonBlank = attrs.field(validator=at_most(MAX_TEXT))
    section: str | None = attrs.field(default=None, validator=at_most(MAX_TITLE))
    answer: str | None = attrs.field(default=None, validator=at_most(MAX_TEXT))
    state: ReviewState | None = None
    save_to_knowledge_base: bool = False
    assignee_id: UserId | None = None  # the member (user id) who answers it; null: nobody


async def import_items(
    conn: asyncpg.Connection, actor: audit.Actor, account_id: str, rfp_id: str,
    found: questionnaires.Questionnaire, kept: writeback.KeptFile | None = None,
    *, filename: str | None = None, keep_report: bool = False, items_held: int | None = None,
) -> tuple[dict[str, Any], int, str | None]:
    """`import_questionnaire`, its audit event and its webhook (rfp.items_imported) in one
    transaction: (the import report, how many webhook deliveries were queued, the report's id).
    With `keep_report` (the web app's upload form) the report is kept for its page in that
    transaction (import_reports.py; else the id is None): apart, a failure between the two would
    leave an import done with no page to show it. `items_held`: as append_items'."""
    report_id = None
    async with conn.transaction():
        report = await import_questionnaire(conn, account_id, rfp_id, found, kept, items_held=items_held)
        await audit.record(conn, actor, "rfp.items_imported", record_id=rfp_id,
                           account_id=account_id, after={
                               "filename": filename, "sheet": report["sheet"],
                               "imported": report["imported"],
                               "first_position": report["first_position"],
                               "skipped": report["skipped_count"],
                           })
        queued = await webhooks.emit(conn, account_id, "rfp.items_imported", rfp_id, report)
        if keep_report:
            report_id = await import_reports.keep(conn, account_id, actor.member_id, report, rfp_id=rfp_id)
    return report, queued, report_id


async def import_questionnaire(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, found: questionnaires.Questionnaire,
    kept: writeback.KeptFile | None = None, *, items_held: int | None = None,
) -> dict[str, Any]:
    """Store a parsed questionnaire's rows as items (and, for write-back, the file they came
    from with each item's cell); returns the import report."""
    if not found.rows:
        reasons = [f"row {s.row}: {s.reason}" for s in found.skipped[:20]]
        raise ValidationFailed(
            [f"file: no questions found in column {found.question_column!r}"
             + (f" (sheet {found.sheet!r})" if found.sheet else ""), *reasons],
            message="the file holds no questions",
        )
    async with conn.transaction():
        start, _ = await append_items(
            conn, account_id, rfp_id, [r.question for r in found.rows], [r.section for r in found.rows],
            items_held=items_held,
        )
        if kept is not None:
            await writeback.keep(conn, account_id, rfp_id, start, found, kept)
    return {
        "rfp_id": rfp_id,
        "sheet": found.sheet,
        "header_row": found.header_row,
        "question_column": found.question_column,
        "section_column": found.section_column,
        "imported": len(found.rows),
        "first_position": start,
        "skipped_count": found.skipped_count,
        "skipped": [unstructure(s) for s in found.skipped],
        "answer_column": found.answer_column,
        "kept_for_export": kept is not None,
    }


def import_options(query: Any) -> questionnaires.ImportOptions:
    """The import options from query parameters; a malformed header_row is a 400."""
    header_row: int | None = None
    raw = query.get("header_row")
    if raw not in (None, ""):
        # Its length first: int() refuses over 4,300 digits with a hint for Python programmers.
        if not raw.isascii() or not raw.isdigit() or len(raw) > 7 or int(raw) > 1_000_000:
            raise ParameterInvalid(f"header_row must be a row number (0 = no header row); got {raw!r}")
        header_row = int(raw)
    return questionnaires.ImportOptions(
        sheet=query.get("sheet") or None,
        question_column=query.get("question_column") or None,
        section_column=query.get("section_column") or None,
        header_row=header_row,
        answer_column=query.get("answer_column") or None,
    )


async def fetch_item(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, item_id: str, *, lock: bool = False
) -> asyncpg.Record:
    """One item of an account's RFP (locked for the caller's transaction with `lock`)."""
    query = db.query("lock_rfp_item" if lock else "get_rfp_item")
    row = await conn.fetchrow(query, item_id, rfp_id, account_id)
    if row is None:
        raise NotFound(f"no item {item_id} in RFP {rfp_id}")
    return row


@attrs.frozen(kw_only=True)
class Reviewed:
    """A reviewed item's stored row, and how many webhook deliveries its review queued."""

    row: asyncpg.Record
    queued: int = 0
    mailed: bool = False  # an assignment's e-mail was queued


_REVIEW_AUDITED = ("question", "section", "answer", "state", "knowledge_item_id", "assignee_id")


async def lock_assignee(conn: asyncpg.Connection, account_id: str, user_id: int) -> asyncpg.Record:
    """The member an item is assigned to (id, email, name), their membership locked until the
    caller's transaction ends (so it cannot be removed or made a viewer meanwhile); anyone but a
    member of the account whose role may write is a 422."""
    row = await conn.fetchrow(db.query("lock_assignable_member"), account_id, user_id)
    if row is None:
        raise ValidationFailed([
            f"rfp_item.assignee_id: user {user_id} is not a member of this account who may "
            f"write (admin or member)"
        ])
    return row


def _wanted_assignee(fields: Mapping[str, Any]) -> int | None:
    """The user a review's fields assign the item to, when well formed (structure() reports
    a malformed one)."""
    value = fields.get("assignee_id")
    return value if is_user_id(value) else None


async def assignable_members(conn: asyncpg.Connection, account_id: str) -> list[MemberRef]:
    """The members an account's items may be assigned to (admins and members), by name."""
    rows = await conn.fetch(db.query("assignable_members"), account_id)
    return [MemberRef(id=row["id"], name=row["name"], email=row["email"]) for row in rows]


async def member_user(
    conn: asyncpg.Connection, account_id: str, member_id: str | None
) -> MemberRef | None:
    """The user behind a member of the account as an item shows its assignee (who assigned an
    item); None for no member (the operator's CLI)."""
    return _ref(await conn.fetchrow(db.query("member_user"), account_id, member_id) if member_id else None)


def _ref(row: Mapping[str, Any] | None) -> MemberRef | None:
    """A user's row of `user_ref`'s or `member_user`'s columns (id, name, email), as an item names
    its assignee."""
    return None if row is None else MemberRef(id=row["id"], name=row["name"], email=row["email"])


def assigner_label(assigner: MemberRef | None) -> str:
    """Who assigned an item, as the assignee's e-mail names them: the display name the app shows
    everywhere, with the address beside it."""
    return f"{assigner.name} ({assigner.email})" if assigner is not None else "A colleague"


def assigned_event(
    row: Mapping[str, Any], previous: MemberRef | None, assigned_by: MemberRef | None
) -> dict[str, Any]:
    """The rfp_item.assigned webhook's data: the item as the API shows it (its new `assignee`,
    null when unassigned), `previous_assignee` (null when it had none) and `assigned_by`, the
    member who changed it (null for the operator's CLI)."""
    return unstructure(RfpItem.from_row(row)) | {
        "previous_assignee": unstructure(previous), "assigned_by": unstructure(assigned_by)}


# A member's unassigned items are read for their webhooks this many at a time, and no more of
# their questions and answers than this many bytes (one of each can hold 100,000 characters: 500
# such items were 0.5 GB of the service's memory at once).
_UNASSIGNED_BATCH = 500
_UNASSIGNED_BATCH_BYTES = 4_000_000


def _batches(ids: Sequence[str], sizes: Sequence[int]) -> list[list[str]]:
    """`ids` in batches of at most _UNASSIGNED_BATCH items and _UNASSIGNED_BATCH_BYTES of their
    `sizes` (one item however large it is)."""
    batches: list[list[str]] = []
    held = 0
    for item_id, size in zip(ids, sizes, strict=True):
        if not batches or len(batches[-1]) >= _UNASSIGNED_BATCH or held + size > _UNASSIGNED_BATCH_BYTES:
            batches.append([])
            held = 0
        batches[-1].append(item_id)
        held += size
    return batches


async def unassign_member_items(
    conn: asyncpg.Connection, account_id: str, user_id: int, actor: audit.Actor | None = None
) -> tuple[int, int]:
    """Unassign a member's items of the account (they were removed or made a viewer), in the
    caller's transaction: (how many items, how many webhook deliveries were queued).

    Each item gets its rfp_item.assigned event, as any other change of its assignee does: an
    integration that mirrors who answers what (a task per item in a tracker) must hear that
    these items have nobody now, and `previous_assignee` says whom they were taken from. They are
    written 500 to a statement (fewer when their items are large: _UNASSIGNED_BATCH_BYTES), and
    only when an endpoint wants the type (else the unassignment is its one UPDATE, as before),
    so removing a member with thousands of items stays quick:
    10,000 items unassigned in 0.5 to 0.7 s with an endpoint wanting them (8 MB of events), 60 ms
    without one; 20,000 (an RFP's most) in 1.6 to 1.9 s and 0.1 to 0.4 s (the lead's 2-core machine)."""
    unassigned = await conn.fetchrow(db.query("unassign_member_items"), account_id, user_id)
    ids = unassigned["ids"]
    if not ids or not await webhooks.wanted(conn, account_id, "rfp_item.assigned"):
        return len(ids), 0
    assigned_by = await member_user(conn, account_id, actor.member_id if actor else None)
    previous = _ref(await conn.fetchrow(db.query("user_ref"), user_id))
    queued = 0
    for batch in _batches(ids, unassigned["sizes"]):
        rows = await conn.fetch(db.query("rfp_items_by_ids"), account_id, batch)
        queued += await webhooks.emit_many(conn, account_id, "rfp_item.assigned", [
            (row["id"], assigned_event(row, previous, assigned_by)) for row in rows])
    return len(ids), queued


async def _mail_assignee(
    conn: asyncpg.Connection, config: MailConfig, web_base_url: str, account_id: str,
    rfp_id: str, item: Mapping[str, Any], recipient: str, assigner: str | None, assigned_by: str,
) -> bool:
    """Queue the assignment's e-mail to `recipient`, unless the assigner (a member id; None for
    the CLI) already sent that address mail.assignment_mails_per_hour of them in the last hour,
    or (an assigner's) the account's members had mail.account_mails_per_hour e-mails of any kind
    written in the last hour: whether it was queued. Counted per assigner: one who assigned and
    unassigned in a loop would otherwise have used up the address's allowance and silenced
    everyone else's assignments; and per account, so that many members each within their own
    allowance do not use up the SMTP quota every account shares. Either way the item stays
    assigned."""
    limit = config.assignment_mails_per_hour
    if not limit:
        return False  # assignments are never mailed
    sent = await mail.sent_recently(conn, recipient, "assignment", assigner, 3600)
    if sent >= limit:
        log.info("item %s assigned, not mailed: its assigner sent %s %d assignment e-mails in the "
                 "last hour (mail.assignment_mails_per_hour)", item["id"], recipient, sent)
        return False
    # After the address's lock (sent_recently), as invitations take theirs after lock_address.
    if assigner is not None and await mail.account_mail_wait(conn, config, account_id):
        log.info("item %s assigned, not mailed: account %s's members had %d e-mails sent in the "
                 "last hour (mail.account_mails_per_hour)", item["id"], account_id,
                 config.account_mails_per_hour)
        return False
    title = await conn.fetchval(db.query("rfp_title"), rfp_id)
    subject, body = assignment_mail(web_base_url, rfp_id, title, item, assigned_by)
    await mail.enqueue(conn, config, recipient, subject, body, kind="assignment",
                       requested_by=assigner, account_id=account_id)
    return True


def assignment_mail(
    base_url: str, rfp_id: str, rfp_title: str, item: Mapping[str, Any], assigned_by: str
) -> tuple[str, str]:
    """The e-mail telling a member an item was assigned to them, linking to the item alone;
    `assigned_by` as assigner_label writes it. The title, the assigner and the question each
    stay on one line: a line break in a title made the Subject unbuildable (the message failed
    every attempt), and one in a name (its user's to choose) wrote lines of the sender's own into
    the body, a link before the item's."""
    link = f"{base_url.rstrip('/')}/rfps/{rfp_id}?item={item['id']}"
    rfp_title, assigned_by = mail.one_line(rfp_title), mail.one_line(assigned_by)
    question = mail.one_line(item["question"])
    if len(question) > 300:
        question = question[:300] + "…"
    body = f"""Hello,

{assigned_by} assigned you item {item['position']} of the RFP "{rfp_title}":

{question}

Review it here:

{link}
"""
    return f"Assigned to you: item {item['position']} of {rfp_title}"[:200], body


async def review(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, item_id: str, fields: dict[str, Any],
    member_id: str | None = None, *, actor: audit.Actor | None = None, web_base_url: str = "",
    mail_config: MailConfig | None = None, if_match: Collection[str] | None = None,
) -> Reviewed:
    """Review one item (PATCH): locked, merged, checked, stored and, when asked, saved to the
    knowledge base, all in one transaction. With `actor`, the same transaction writes the audit
    events (rfp_item.updated; rfp_item.approved and rfp.approved when the review approves the
    item, or the last item of the RFP) and queues their webhooks (the RFP's `web_link` built
    on `web_base_url`). With `mail_config`, assigning the item to another member than
    `member_id` queues one e-mail to them, linking to the item alone on `web_base_url`. With
    `if_match`, only while the item's tag is one of them (preconditions.check), else
    PreconditionFailed and nothing is written."""
    async with conn.transaction():
        # The RFP before its item, as "answer all" takes them (a review of a pending item saved
        # while an answer all started deadlocked with it).
        if await conn.fetchval(db.query("lock_rfp_before_items"), rfp_id, account_id) is None:
            raise NotFound(f"no item {item_id} in RFP {rfp_id}")
        # The assignee's membership before the item, in the order removing a member takes them
        # (members.remove_member locks the membership, then unassigns its items).
        wanted = _wanted_assignee(fields)
        assignee = await lock_assignee(conn, account_id, wanted) if wanted is not None else None
        current = await fetch_item(conn, account_id, rfp_id, item_id, lock=True)
        preconditions.check(if_match, preconditions.item_tag(current["updated_at"]),
                            f"item {item_id}")
        changes_state = fields.get("state", current["state"]) != current["state"]
        # The RFP's state before, when this review may change it (rfp.approved is sent once).
        rfp_before = (
            await fetch_rfp(conn, current["rfp_id"], account_id)
            if actor is not None and changes_state else None
        )
        row = await review_item(conn, account_id, current, fields, member_id, assignee)
        reassigned = row["assignee_id"] != current["assignee_id"]
        mailing = (mail_config is not None and assignee is not None and reassigned
                   and assignee["member_id"] != member_id)
        announcing = (actor is not None and reassigned
                      and await webhooks.wanted(conn, account_id, "rfp_item.assigned"))
        assigner = await member_user(conn, account_id, member_id) if mailing or announcing else None
        mailed = False
        if mailing:
            assert mail_config is not None and assignee is not None
            mailed = await _mail_assignee(conn, mail_config, web_base_url, account_id, rfp_id,
                                          row, assignee["email"], member_id,
                                          assigner_label(assigner))
        if actor is None:
            return Reviewed(row=row, mailed=mailed)
        queued = 0
        if announcing:
            queued += await webhooks.emit(conn, account_id, "rfp_item.assigned", row["id"],
                                          assigned_event(row, MemberRef.assignee_of(current), assigner))
        await audit.record(conn, actor, "rfp_item.updated", record_id=row["id"],
                           account_id=account_id,
                           before={k: current[k] for k in _REVIEW_AUDITED},
                           after={k: row[k] for k in _REVIEW_AUDITED})
        if row["state"] == "approved" and current["state"] != "approved":
            await audit.record(conn, actor, "rfp_item.approved", record_id=row["id"],
                               account_id=account_id)
            queued += await webhooks.emit(conn, account_id, "rfp_item.approved", row["id"],
                                          unstructure(RfpItem.from_row(row)))
        if rfp_before is not None and rfp_before["state"] != "approved":
            rfp_after = await fetch_rfp(conn, current["rfp_id"], account_id)
            if rfp_after["state"] == "approved":
                await audit.record(conn, actor, "rfp.approved", record_id=rfp_after["id"],
                                   account_id=account_id)
                rfp = rfp_json(rfp_after, web_base_url, with_context=True)
                queued += await webhooks.emit(conn, account_id, "rfp.approved", rfp["id"], rfp)
    return Reviewed(row=row, queued=queued, mailed=mailed)


# The most items one bulk approval takes: a page of the RFP page at its default size
# (web.items_per_page). Each is a transaction of its own (review), a few milliseconds each, so a
# request stays well under a second; more is refused (422 naming the cap), not cut short.
MAX_BULK_APPROVE = 100

# Why a bulk approval left an item as it was, in the order the web app says them; "changed":
# changed since the page that chose it was shown (approve_items' `unchanged_since`).
SKIPPED = ("already_approved", "no_answer", "discarded", "not_found", "changed")


@attrs.frozen(kw_only=True)
class BulkApproved:
    """What approve_items did: the items approved, those skipped by reason (one of SKIPPED), and
    how many webhook deliveries the approvals queued."""

    approved: list[str]
    skipped: dict[str, list[str]]
    queued: int = 0


class BulkStopped(Exception):
    """approve_items stopped at `item_id`: its approval failed (the failure is `__cause__`: a
    ValidationFailed, a transaction conflict, a lost connection…). `done`, the items approved and
    skipped before it, stay so (each was committed alone); it was not approved (its transaction
    rolled back), and the `left` ids after it were not tried."""

    def __init__(self, done: BulkApproved, item_id: str, left: int) -> None:
        super().__init__(f"the bulk approval stopped at item {item_id}")
        self.done, self.item_id, self.left = done, item_id, left


def not_approvable(item: Mapping[str, Any]) -> str | None:
    """Why a bulk approval skips an item (one of SKIPPED), or None: it is approved as one item's
    approval would approve it (the RFP page's Approve button)."""
    if item["state"] == "approved":
        return "already_approved"
    if item["state"] == "discarded":  # one item's approval would take it back; a bulk one never
        return "discarded"
    if item["answer"] is None or not item["answer"].strip():
        return "no_answer"
    return None


async def approve_items(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, item_ids: Sequence[str],
    member_id: str | None = None, *, save_to_knowledge_base: bool = False,
    actor: audit.Actor | None = None, web_base_url: str = "", unchanged_since: datetime | None = None,
) -> BulkApproved:
    """Approve many items of an RFP at once, each exactly as one item's approval does (review:
    its rfp_item.updated and rfp_item.approved events and webhooks, rfp.approved with the last
    one, and with `save_to_knowledge_base` its knowledge-base entry), each in a transaction of
    its own: an item another reviewer changed meanwhile is skipped alone, never undoing the
    others. Items already approved, discarded or without an answer, ids not of this RFP and,
    with `unchanged_since`, items changed after it (the page that chose them was shown then)
    are skipped and reported by reason. More than MAX_BULK_APPROVE ids is ValidationFailed.
    An item whose approval fails stops the run: BulkStopped, with what was done before it."""
    wanted = list(dict.fromkeys(item_ids))  # each once, in the order given
    if len(wanted) > MAX_BULK_APPROVE:
        raise ValidationFailed(
            [f"at most {MAX_BULK_APPROVE:,} items can be approved at once; {len(wanted):,} were chosen"],
            "too many items to approve at once",
        )
    await fetch_rfp(conn, rfp_id, account_id)  # another account's RFP: 404, nothing read
    fields: dict[str, Any] = {"state": "approved"}
    if save_to_knowledge_base:
        fields["save_to_knowledge_base"] = True
    done = BulkApproved(approved=[], skipped={})
    queued = 0
    for index, item_id in enumerate(wanted):
        if not could_be_id(item_id):
            done.skipped.setdefault("not_found", []).append(item_id)
            continue
        try:
            reason, reviewed = await _approve_one(conn, account_id, rfp_id, item_id, fields, member_id,
                                                  actor, web_base_url, unchanged_since)
        except Exception as exc:
            # The items before it are committed (webhooks queued, audit written): the caller must
            # be able to say so, not only the failure.
            raise BulkStopped(attrs.evolve(done, queued=queued), item_id, len(wanted) - index - 1) from exc
        if reason is not None:
            done.skipped.setdefault(reason, []).append(item_id)
            continue
        done.approved.append(item_id)
        queued += reviewed.queued if reviewed is not None else 0
    return attrs.evolve(done, queued=queued)


async def _approve_one(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, item_id: str, fields: dict[str, Any],
    member_id: str | None, actor: audit.Actor | None, web_base_url: str,
    unchanged_since: datetime | None,
) -> tuple[str | None, Reviewed | None]:
    """One item of approve_items in its own transaction: (why it was skipped, None) or (None,
    its review)."""
    async with conn.transaction():
        # The RFP, then the item, as review takes them; checked under the item's lock.
        await conn.fetchval(db.query("lock_rfp_before_items"), rfp_id, account_id)
        try:
            current = await fetch_item(conn, account_id, rfp_id, item_id, lock=True)
        except NotFound:
            return "not_found", None
        if reason := not_approvable(current):
            return reason, None
        if unchanged_since is not None and current["updated_at"] > unchanged_since:
            return "changed", None
        return None, await review(conn, account_id, rfp_id, item_id, fields, member_id,
                                  actor=actor, web_base_url=web_base_url)


def approval_problems(item: Mapping[str, Any]) -> list[str]:
    """What keeps an item, as stored, from being approved (review_item's checks of its fields,
    e.g. an answer drafted longer than MAX_TEXT), each "rfp_item.<field>: …"; [] for nothing."""
    stored = {"question": item["question"], "section": item["section"], "answer": item["answer"],
              "state": "approved"}
    try:
        review = structure(stored, ItemReview, root="rfp_item")
    except ValidationFailed as exc:
        return list(exc.details or [exc.message])
    if review.answer is None or not review.answer.strip():
        return ["rfp_item.answer: an item needs an answer before it can be approved"]
    return []


async def review_item(
    conn: asyncpg.Connection, account_id: str, current: asyncpg.Record, fields: dict[str, Any],
    member_id: str | None = None, assignee: asyncpg.Record | None = None,
) -> asyncpg.Record:
    """Apply a review to a locked item (in the caller's transaction) and return the stored row.
    A new assignee must be a member who may write: `assignee` when the caller locked them
    already (lock_assignee), else checked and locked here."""
    stored = {"question": current["question"], "section": current["section"],
              "answer": current["answer"], "assignee_id": current["assignee_id"]}
    review = structure(stored | fields, ItemReview, root="rfp_item")
    state = review.state or current["state"]
    answer = review.answer if review.answer is None or review.answer.strip() else None
    problems = []
    if state == "approved" and answer is None:
        problems.append("rfp_item.answer: an item needs an answer before it can be approved")
    if review.save_to_knowledge_base and state != "approved":
        problems.append(
            "rfp_item.save_to_knowledge_base: only an approved answer can be saved to the knowledge base"
        )
    if problems:
        raise ValidationFailed(problems)
    if (review.assignee_id is not None and review.assignee_id != current["assignee_id"]
            and (assignee is None or assignee["id"] != review.assignee_id)):
        await lock_assignee(conn, account_id, review.assignee_id)
    # A question the review gives is stored stripped; one it does not give stays as it was (an
    # assignment's review wrote it back stripped, and an item being answered whose question had
    # spaces around it was taken over by a rewrite nobody asked for, its answer dropped).
    question = review.question.strip() if "question" in fields else current["question"]
    row = await conn.fetchrow(
        db.query("review_rfp_item"), current["id"], question, review.section,
        answer, state, review.assignee_id,
    )
    if review.save_to_knowledge_base:
        entry, _ = await save_reviewed_answer(
            conn, account_id, question=row["question"], answer=answer, title=row["section"],
            source=f"rfp:{row['rfp_id']}", external_id=f"rfp_item:{row['id']}", owner=member_id,
            saved_as=current["knowledge_item_id"],
        )
        row = await conn.fetchrow(db.query("link_rfp_item_to_knowledge_item"), row["id"], entry.id)
    await conn.execute(db.query("touch_rfp"), row["rfp_id"])
    return row


EXPORT_COLUMNS = ("question", "answer", "state", "confidence", "section")
EXPORT_FORMATS = {"csv": "text/csv", "xlsx": questionnaires.XLSX_MEDIA_TYPE}


def export_format(query: Any) -> str:
    wanted = query.get("format") or "csv"
    if wanted == "original":  # write-back into the imported file (service/domain/writeback.py)
        return wanted
    if wanted not in EXPORT_FORMATS:
        raise ParameterInvalid(f"format must be csv, xlsx or original; got {wanted!r}")
    return wanted


def export_filename(title: str, rfp_id: str, fmt: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()[:60]
    return f"{slug or rfp_id}.{fmt}"


def export_cells(row: asyncpg.Record) -> list[Any]:
    confidence = None if row["confidence"] is None else round(float(row["confidence"]), 4)
    return [row["question"], row["answer"], row["state"], confidence, row["section"]]


# A spreadsheet opening the CSV runs a cell starting with one of these as a formula
# (=HYPERLINK(…) sends neighbouring cells to another site): OWASP's CSV injection advice is to
# make such a cell text by putting a single quote in front of it.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """An export cell as written to CSV: None as empty, formula-like text neutralised."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_row(cells: Sequence[Any]) -> list[Any]:
    return [csv_cell(cell) for cell in cells]


def _new_xlsx(title: str) -> Any:
    """A write-only workbook (rows go to a temporary file as they are appended) with its header."""
    from openpyxl import Workbook

    workbook = Workbook(write_only=True)
    sheet = workbook.create_sheet("RFP items")
    sheet.append(list(EXPORT_COLUMNS))
    # The title is cleaned as the cells are: a control character there (a vertical tab pasted
    # from a spreadsheet) made docProps/core.xml malformed, a file Excel and openpyxl refuse.
    workbook.properties.title = writeback.excel_text(title)[:200]
    return workbook


def _append_xlsx(workbook: Any, rows: Sequence[Sequence[Any]]) -> None:
    """Rows of export_cells; text never becomes a formula, nor passes Excel's cell limit."""
    from openpyxl.cell import WriteOnlyCell

    sheet = workbook.worksheets[0]
    for cells in rows:
        out = []
        for value in cells:
            if isinstance(value, str):
                cell = WriteOnlyCell(sheet, value=writeback.excel_text(value))
                cell.data_type = "s"  # "=…" from a questionnaire is text, not a formula
                out.append(cell)
            else:
                out.append(value)
        sheet.append(out)


async def spool_xlsx(conn: asyncpg.Connection, rfp_id: str, title: str, out: IO[bytes]) -> int:
    """Write an RFP's items as XLSX into `out`, read from a cursor 100 rows at a time and added
    to the workbook in a thread; returns the number of items. The items were read whole first:
    an export's memory grew with its RFP (items hold up to 200,000 characters, an RFP 20,000)."""
    workbook = await asyncio.to_thread(_new_xlsx, title)
    count = 0
    async with conn.transaction():
        cursor = await conn.cursor(db.query("export_rfp_items"), rfp_id)
        while batch := await cursor.fetch(100):
            await asyncio.to_thread(_append_xlsx, workbook, [export_cells(row) for row in batch])
            count += len(batch)
    await asyncio.to_thread(workbook.save, out)
    return count


async def spool_csv(conn: asyncpg.Connection, rfp_id: str, out: IO[bytes]) -> int:
    """Write an RFP's items as UTF-8 CSV into `out`, read from a cursor in batches; returns the
    number of items. The caller sends `out` once the connection is back in the pool, so a client
    that reads slowly (or never) holds a file, not a database connection."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(EXPORT_COLUMNS)
    count = 0
    async with conn.transaction():
        # Batches of 100 rows (an item holds up to 200,000 characters), and a turn for the event
        # loop after each 64 KB written: 500-row batches held it for 1.4 s at a time while the
        # CSV of 2,000 long items (400 MB) was written, every request of the process waiting.
        async for row in conn.cursor(db.query("export_rfp_items"), rfp_id, prefetch=100):
            writer.writerow(csv_row(export_cells(row)))
            count += 1
            if text.tell() > 64 * 1024:
                out.write(text.getvalue().encode())
                text.seek(0)
                text.truncate()
                await asyncio.sleep(0)
    out.write(text.getvalue().encode())
    return count


async def spool_export(conn: asyncpg.Connection, rfp: Mapping[str, Any], fmt: str, out: IO[bytes]) -> int:
    """Write an RFP's items in `fmt` (csv or xlsx) into `out`; returns the number of items."""
    if fmt == "xlsx":
        return await spool_xlsx(conn, rfp["id"], rfp["title"], out)
    return await spool_csv(conn, rfp["id"], out)


def _at_most_items(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and value > MAX_ITEMS_PER_RFP:
        raise ValueError(f"must be at most {MAX_ITEMS_PER_RFP:,}, the most items an RFP holds")


@attrs.frozen(kw_only=True)
class AnswerOptions:
    """The optional body of "answer all": the same options as an ask, for every item."""

    answer_detail_level: DetailLevel = 1  # type: ignore[assignment]  # normal
    custom_prompt: str | None = None
    # At most this many of the pending items, the first by position: what the account's credits
    # pay for when they do not pay for all (all or nothing otherwise). None: every pending item.
    max_items: PositiveCount | None = attrs.field(default=None, validator=_at_most_items)


async def answer_pending_items(
    conn: asyncpg.Connection, who: Principal, rfp_id: str, options: AnswerOptions, cost: int,
    *, actor: audit.Actor | None = None,
) -> dict[str, int]:
    """Create one charged question per pending item not already being answered, in one transaction.

    All or nothing: without an active subscription or credits for every item (or for the first
    `options.max_items`, when given), nothing is asked;
    without an active subscription it is refused (403) even when no item is pending.
    The RFP lock makes a concurrent second call wait and then find nothing left to start. With
    `actor`, the audit event (rfp.answer_started) is written in the same transaction.
    """
    async with conn.transaction():
        if await conn.fetchrow(db.query("lock_account_rfp"), rfp_id, who.account_id) is None:
            raise NotFound(f"no RFP {rfp_id} in this account")
        items = await conn.fetch(db.query("lock_unanswered_items"), rfp_id, options.max_items)
        if items:
            # Its one statement checks and debits the account (locking it), or raises.
            await create_item_questions(
                conn, account_id=who.account_id, user_id=who.user_id, member_id=who.member_id,
                rfp_id=rfp_id, items=[(item["id"], item["question"]) for item in items],
                detail_level=options.answer_detail_level, custom_prompt=options.custom_prompt,
                credits=cost,
            )
            await conn.execute(db.query("touch_rfp"), rfp_id)
        else:  # nothing to charge for: an inactive account is refused all the same, never 202
            await require_active_subscription(conn, who.account_id, ITEMS_REFUSED)
        in_flight = await conn.fetchval(db.query("count_rfp_items_in_flight"), rfp_id)
        answering = {"started": len(items), "in_flight": in_flight,
                     "credits_charged": cost * len(items)}
        if actor is not None:
            await audit.record(conn, actor, "rfp.answer_started", record_id=rfp_id,
                               account_id=who.account_id, after=answering)
    return answering


async def _standing_and_waiting(
    conn: asyncpg.Connection, account_id: str, rfp_id: str
) -> tuple[asyncpg.Record | None, int]:
    """The account's credits and subscription, and how many items "answer all" would start now."""
    standing = await conn.fetchrow(db.query("account_standing"), account_id)
    return standing, await conn.fetchval(db.query("count_rfp_items_waiting"), rfp_id)


async def credits_short(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, cost: int
) -> dict[str, int] | None:
    """Why "answer all" was refused when it was the credits: the items it would start, the
    account's credits, and how many of the first items those pay for (`max_items`). None when the
    subscription is not active, or the credits now pay for every item (added meanwhile)."""
    standing, waiting = await _standing_and_waiting(conn, account_id, rfp_id)
    if standing is None or standing["subscription_status"] != "active":
        return None
    if standing["credits"] >= cost * waiting:
        return None
    return {"waiting": waiting, "credits": standing["credits"], "cost": cost,
            "affordable": standing["credits"] // cost if cost else waiting}


async def left_pending(conn: asyncpg.Connection, account_id: str, rfp_id: str, cost: int) -> dict[str, int]:
    """What "answer the first N" left: the items still pending, what answering them costs, and
    the account's credits."""
    standing, waiting = await _standing_and_waiting(conn, account_id, rfp_id)
    return {"waiting": waiting, "cost": cost * waiting, "credits": standing["credits"] if standing else 0}


async def answering_progress(conn: asyncpg.Connection, account_id: str, rfp_id: str) -> dict[str, Any]:
    """Where "answer all" has got to: the RFP's state and stats, and how many items are in flight."""
    from .rfps import fetch_rfp

    rfp = await fetch_rfp(conn, rfp_id, account_id)
    in_flight = await conn.fetchval(db.query("count_rfp_items_in_flight"), rfp_id)
    return {
        "state": rfp["state"],
        "in_flight": in_flight,
        "total_items": rfp["total_items"],
        "pending_items": rfp["pending_items"],
        "needs_input_items": rfp["needs_input_items"],
        "auto_answered_items": rfp["auto_answered_items"],
        "approved_items": rfp["approved_items"],
        "overall_completion_percentage": rfp["overall_completion_percentage"],
    }
