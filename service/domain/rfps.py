"""RFPs: read, search, create, update, and list an RFP's items."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg
import attrs

from .. import db
from . import audit
from .convert import Framework, HttpUrl, IsoDate, NonBlank, at_most, structure
from .errors import (
    Conflict,
    NotFound,
    ParameterInvalid,
    ParameterMissing,
    ServiceUnavailable,
    ValidationFailed,
)
from .ids import new_id
from .models import Page, RfpItem

MAX_TITLE = 500
MAX_TEXT = 100_000

MAX_ITEMS_PER_CREATE = 5_000
# What an RFP may hold in all, however its items came (creates, additions, imports of up to
# uploads.max_items each): its page, overview and exports grow with it (20,000 items of 5 KB
# export in 1-2 s), and without a bound repeated imports grew one RFP without end.
MAX_ITEMS_PER_RFP = 20_000


# Search counts matches up to this many (500 pages): every search's work stays bounded. It is
# also the deepest row a search (or the web app's lists) pages to: OFFSET reads every row it
# skips (page 15,000 of 300,000 RFPs cost 0.3 s), so a later page is 400 naming the last one.
SEARCH_COUNT_CAP = 10_000

# A search term is a substring (ILIKE '%term%'), which only the trigram index serves fast, and
# pg_trgm can take a trigram from a pattern only where it holds 3 letters or digits in a row:
# for '%', 'qz', '__' or 'a b' the index yields nothing and PostgreSQL reads every RFP of the
# account (0.55 s of CPU at 300,000). Such a term is refused (400 naming the rule) rather than
# answered from a partial scan (the newest RFPs only), which would silently miss older matches.
MIN_TERM_RUN = 3
# A longer term costs more per row compared (a 7,000-character one: 0.6 s on 5,100 entries of
# the knowledge base) and finds nothing a shorter part of it would not.
MAX_TERM_CHARS = 200
# Backstop for whatever the rules above miss (a term whose trigrams are all common yet which
# matches nothing): each search statement is cancelled after this long, and the request is 503.
SEARCH_TIMEOUT_MS = 250


class ItemsChanged(Conflict):
    """Items to append on a view of the RFP when it held `seen` items (the web app's upload form),
    while it holds `held`: a form sent again. Found under the RFP's lock, where two such forms
    sent at once each see the other's items."""

    def __init__(self, seen: int, held: int) -> None:
        super().__init__(f"the RFP holds {held:,} items, not the {seen:,} it held when the request"
                         " was made; nothing was added")
        self.seen, self.held = seen, held


@attrs.frozen(kw_only=True)
class ItemInput:
    question: NonBlank = attrs.field(validator=at_most(MAX_TEXT))
    section: str | None = attrs.field(default=None, validator=at_most(MAX_TITLE))


@attrs.frozen(kw_only=True)
class RfpInput:
    """The editable fields of an RFP; also the shape of a PATCH (absent fields unchanged)."""

    title: NonBlank = attrs.field(validator=at_most(MAX_TITLE))
    description: str | None = attrs.field(default=None, validator=at_most(MAX_TEXT))
    deadline: IsoDate | None = None
    framework: Framework | None = None
    portal_url: HttpUrl | None = attrs.field(default=None, validator=at_most(2048))
    context: str | None = attrs.field(default=None, validator=at_most(MAX_TEXT))


@attrs.frozen(kw_only=True)
class RfpCreate(RfpInput):
    items: list[ItemInput] = attrs.Factory(list)


def like_pattern(term: str) -> str:
    """An ILIKE pattern matching `term` anywhere, with %, _ and \\ in the term taken literally."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _has_run(term: str, length: int) -> bool:
    run = 0
    for char in term:
        run = run + 1 if char.isalnum() else 0
        if run >= length:
            return True
    return False


def search_term_problem(term: str) -> str | None:
    """What keeps `term` from being searched, in words for the person who typed it (the web
    app's search boxes say it beside the box), or None: search_pattern's rules."""
    if len(term) > MAX_TERM_CHARS:
        return (f"The search term is too long: at most {MAX_TERM_CHARS} characters"
                f" (this one has {len(term):,}). Search for a shorter part of it.")
    if not _has_run(term, MIN_TERM_RUN):
        return (f"Type at least {MIN_TERM_RUN} letters or digits in a row to search"
                " (“mfa”, “50% off”; not “%” or “a b”).")
    return None


def search_pattern(term: str, parameter: str = "query") -> str:
    """The ILIKE pattern for a search term (wildcards taken literally), or ParameterInvalid
    naming the rule it breaks: at most MAX_TERM_CHARS characters, and MIN_TERM_RUN letters or
    digits in a row (what the trigram index needs to serve it)."""
    if len(term) > MAX_TERM_CHARS:
        raise ParameterInvalid(
            f"{parameter} is too long: at most {MAX_TERM_CHARS} characters; got {len(term):,}"
        )
    if not _has_run(term, MIN_TERM_RUN):
        raise ParameterInvalid(
            f"{parameter} must hold at least {MIN_TERM_RUN} letters or digits in a row"
            f" (shorter terms cannot use the search index); got {term[:20]!r}"
        )
    return like_pattern(term)


async def limit_search_time(conn: asyncpg.Connection) -> None:
    """In a transaction: cancel any of its statements after SEARCH_TIMEOUT_MS (ends with it)."""
    await conn.execute(db.query("limit_search_time"), f"{SEARCH_TIMEOUT_MS}ms")


def search_timed_out() -> ServiceUnavailable:
    return ServiceUnavailable(
        f"the search took longer than {SEARCH_TIMEOUT_MS} ms and was stopped;"
        " a longer or more specific term is faster",
        headers={"Retry-After": "1"},
    )


@asynccontextmanager
async def search_time_bounded(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """A read-only transaction whose statements are planned for the pattern they are given (the
    trigram indexes need it seen) and stopped after SEARCH_TIMEOUT_MS: then 503
    (`search_timed_out`)."""
    try:
        async with conn.transaction(readonly=True):
            await conn.execute(db.query("plan_each_search"))
            await limit_search_time(conn)
            yield
    except asyncpg.QueryCanceledError:
        raise search_timed_out() from None


async def bounded_search(
    conn: asyncpg.Connection, count_query: str, page_query: str, account_id: str,
    pattern: str | None, cap: int, page: Page,
) -> tuple[list[asyncpg.Record], int]:
    """A search's page and its count (stopping at `cap`), in one read-only transaction whose
    statements are planned for the pattern they are given and stopped after SEARCH_TIMEOUT_MS
    (then 503, `search_timed_out`)."""
    async with search_time_bounded(conn):
        total = await conn.fetchval(db.query(count_query), account_id, pattern, cap)
        rows = await conn.fetch(db.query(page_query), account_id, pattern, page.size, page.offset)
    return rows, total


async def fetch_rfp(conn: asyncpg.Connection, rfp_id: str, account_id: str) -> asyncpg.Record:
    row = await conn.fetchrow(db.query("get_rfp"), rfp_id, account_id)
    if row is None:
        raise NotFound(f"no RFP {rfp_id} in this account")
    return row


async def append_items(
    conn: asyncpg.Connection,
    account_id: str,
    rfp_id: str,
    questions: Sequence[str],
    sections: Sequence[str | None],
    *,
    returning: bool = False,
    actor: audit.Actor | None = None,
    items_held: int | None = None,
) -> tuple[int, list[asyncpg.Record]]:
    """Append items after the RFP's last one in one statement; the RFP lock orders positions.

    Returns the first new position and, with `returning`, the stored rows. With `actor`, the
    audit event (rfp_items.created) is written in the same transaction. With `items_held`, the
    items are appended only if the RFP still holds that many (else ItemsChanged).
    """
    async with conn.transaction():
        if await conn.fetchrow(db.query("lock_account_rfp"), rfp_id, account_id) is None:
            raise NotFound(f"no RFP {rfp_id} in this account")
        # Items are never deleted (a discarded one stays), so positions count the RFP's items.
        start = await conn.fetchval(db.query("next_item_position"), rfp_id)
        held = start - 1
        if items_held is not None and held != items_held:
            raise ItemsChanged(items_held, held)
        if held + len(questions) > MAX_ITEMS_PER_RFP:
            raise ValidationFailed(
                [f"items: the RFP holds {held:,} items and these are {len(questions):,} more; an "
                 f"RFP holds at most {MAX_ITEMS_PER_RFP:,}"],
                message="too many items for one RFP",
            )
        args = (
            rfp_id,
            [new_id("item") for _ in questions],
            list(questions),
            list(sections),
            list(range(start, start + len(questions))),
        )
        rows: list[asyncpg.Record] = []
        if returning:
            rows = await conn.fetch(db.query("insert_rfp_items_returning"), *args)
        else:
            await conn.execute(db.query("insert_rfp_items"), *args)
        await conn.execute(db.query("touch_rfp"), rfp_id)
        if actor is not None:
            item_ids = [row["id"] for row in rows] if returning else args[1]
            await audit.record(conn, actor, "rfp_items.created", record_id=rfp_id,
                               account_id=account_id, after={"item_ids": item_ids})
    return start, rows


async def create_rfp(
    conn: asyncpg.Connection, *, account_id: str, owner_user_id: int, data: RfpCreate,
    actor: audit.Actor | None = None,
) -> str:
    """Store a new RFP with its items; with `actor`, its audit event in the same transaction."""
    rfp_id = new_id("rfp")
    async with conn.transaction():
        await conn.execute(
            db.query("insert_rfp"),
            rfp_id, account_id, owner_user_id, *_columns(data),
        )
        if data.items:
            await append_items(
                conn, account_id, rfp_id,
                [item.question for item in data.items], [item.section for item in data.items],
            )
        if actor is not None:
            await audit.record(conn, actor, "rfp.created", record_id=rfp_id, account_id=account_id,
                               after={
                                   "title": data.title.strip(), "framework": data.framework,
                                   "deadline": data.deadline, "items": len(data.items),
                               })
    return rfp_id


def _columns(data: RfpInput) -> tuple[Any, ...]:
    """An RFP's stored fields, in the order insert_rfp and update_rfp take them."""
    return (data.title.strip(), data.description, data.deadline, data.framework, data.portal_url,
            data.context)


def _json_value(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


@attrs.frozen(kw_only=True)
class SearchResult:
    rows: list[asyncpg.Record]
    total: int
    capped: bool  # total is "at least this many": counting stopped at SEARCH_COUNT_CAP


async def search_rfps(
    conn: asyncpg.Connection, account_id: str, term: str, page: Page, parameter: str = "query"
) -> SearchResult:
    """The account's RFPs whose title (or description) contains `term`, newest first; an error
    about the term names it as `parameter` (the API's `query`, the web app's `q`)."""
    if not term.strip():  # blank counts as missing: it would match everything
        raise ParameterMissing("query is required: GET /api/v1/rfps/search?query=term")
    pattern = search_pattern(term, parameter)
    rows, total = await bounded_search(conn, "count_search_rfps_capped", "search_rfps", account_id,
                                       pattern, SEARCH_COUNT_CAP, page)
    return SearchResult(rows=rows, total=total, capped=total >= SEARCH_COUNT_CAP)


async def update_rfp(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, fields: dict[str, Any],
    *, actor: audit.Actor | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Change the given fields of an RFP (a PATCH: absent fields keep their stored values);
    returns the editable fields (before, after). With `actor`, the audit event (the changed
    fields) is written in the same transaction."""
    async with conn.transaction():
        current = await conn.fetchrow(db.query("lock_rfp"), rfp_id, account_id)
        if current is None:
            raise NotFound(f"no RFP {rfp_id} in this account")
        editable = [a.name for a in attrs.fields(RfpInput)]
        # Validate the merged record, so absent fields keep their stored values.
        merged = {name: _json_value(current[name]) for name in editable} | fields
        data = structure(merged, RfpInput, root="rfp")
        await conn.execute(db.query("update_rfp"), rfp_id, account_id, *_columns(data))
        before = {name: _json_value(current[name]) for name in editable}
        after = {name: _json_value(getattr(data, name)) for name in editable}
        after["title"] = data.title.strip()
        if actor is not None:
            await audit.record(conn, actor, "rfp.updated", record_id=rfp_id, account_id=account_id,
                               before=before, after=after)
    return before, after


@attrs.frozen(kw_only=True)
class AssigneeFilter:
    """`?assignee=`: only the items assigned to `user_id`, or with None the unassigned ones."""

    user_id: int | None


def _user_id(raw: str) -> int | None:
    """A user id as a query gives it (digits, a positive bigint), or None."""
    # Its length first: int() refuses over 4,300 digits; past a bigint no user exists.
    if raw.isascii() and raw.isdigit() and len(raw) <= 19 and 0 < int(raw) < 2**63:
        return int(raw)
    return None


def assignee_filter(raw: str | None, user_id: int) -> AssigneeFilter | None:
    """`assignee=me|none|<user id>` (`me`: `user_id`, the caller); absent or empty: no filter."""
    if raw is None or raw == "":
        return None
    if raw == "me":
        return AssigneeFilter(user_id=user_id)
    if raw == "none":
        return AssigneeFilter(user_id=None)
    if (wanted := _user_id(raw)) is not None:
        return AssigneeFilter(user_id=wanted)
    raise ParameterInvalid(f"assignee must be me, none or a user id; got {raw[:40]!r}")


def assigned_to(raw: str | None, user_id: int) -> int:
    """The member whose items `GET /api/v1/rfp_items` lists: `assignee=me` (`user_id`, the caller)
    or a user id. Required; `none` is refused too: the unassigned items of a whole account are
    not one member's work (an RFP's are: GET /api/v1/rfps/{id}/rfp_items?assignee=none)."""
    if raw is None or raw == "":
        raise ParameterMissing("assignee is required: me or a user id (GET /api/v1/rfp_items?assignee=me)")
    if raw == "me":
        return user_id
    if (wanted := _user_id(raw)) is not None:
        return wanted
    raise ParameterInvalid(f"assignee must be me or a user id; got {raw[:40]!r}")


async def list_items(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, page: Page,
    assignee: AssigneeFilter | None = None, pattern: str | None = None,
) -> tuple[list[RfpItem], int]:
    """One page of an RFP's items in order (with `assignee`, only theirs; with `pattern`,
    search_pattern's, only those whose question or answer holds it), and how many there are.
    A search runs under SEARCH_TIMEOUT_MS (then 503)."""
    await fetch_rfp(conn, rfp_id, account_id)
    mine, user_id = assignee is not None, None if assignee is None else assignee.user_id
    if pattern is not None:
        async with search_time_bounded(conn):
            rows = await conn.fetch(db.query("search_rfp_items_page"), rfp_id, page.size,
                                    page.offset, pattern, mine, user_id)
        # One row at least: past the last page, the count alone.
        return [RfpItem.from_row(row) for row in rows if row["id"] is not None], rows[0]["total"]
    if assignee is None:
        total = await conn.fetchval(db.query("count_rfp_items"), rfp_id)
    else:
        total = await conn.fetchval(db.query("count_rfp_items_of_assignee"), rfp_id, assignee.user_id)
    rows = await conn.fetch(db.query("list_rfp_items"), rfp_id, page.size, page.offset, mine, user_id)
    return [RfpItem.from_row(row) for row in rows], total


async def list_rfps(conn: asyncpg.Connection, account_id: str, page: Page) -> SearchResult:
    """The account's RFPs, newest first (the web app's list when no term is given)."""
    total = await conn.fetchval(db.query("count_rfps_capped"), account_id, SEARCH_COUNT_CAP)
    rows = await conn.fetch(db.query("list_rfps"), account_id, page.size, page.offset)
    return SearchResult(rows=rows, total=total, capped=total >= SEARCH_COUNT_CAP)


# What the review page's filters keep: an item state each.
REVIEW_FILTERS = {"needs_input": "needs_input", "review": "auto_answered", "approved": "approved"}


def review_filter(raw: str | None) -> str | None:
    """`state=`, as the RFP page's filters and the lists of one's items take it: one of
    REVIEW_FILTERS (`review`: answered, awaiting review), or None (absent or empty) for all."""
    if raw is None or raw == "":
        return None
    if raw not in REVIEW_FILTERS:
        raise ParameterInvalid(f"state must be one of {', '.join(REVIEW_FILTERS)}; got {raw[:40]!r}")
    return raw


_WHOLE = 2_147_483_647  # PostgreSQL's largest integer: left(text, _WHOLE) is all of it


async def review_items(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, state: str | None, page: Page,
    *, cut: int | None = None, item_id: str | None = None, assignee_id: int | None = None,
    pattern: str | None = None,
) -> tuple[asyncpg.Record, list[asyncpg.Record], int]:
    """The RFP, one page of its items with what their questions found, and how many items pass
    `state` (one of REVIEW_FILTERS, or None for all), `item_id`, `assignee_id` (a user id;
    None for all) and `pattern` (search_pattern's, matched on question or answer; None for all).
    Questions and answers come cut to `cut` characters (None: whole), their whole lengths in
    question_chars / answer_chars. A search runs under SEARCH_TIMEOUT_MS (then 503)."""
    rfp = await fetch_rfp(conn, rfp_id, account_id)
    arguments = (rfp_id, REVIEW_FILTERS.get(state or ""), page.size, page.offset, item_id,
                 _WHOLE if cut is None else cut, assignee_id, pattern)
    if pattern is None:
        rows = await conn.fetch(db.query("review_items_page"), *arguments)
    else:
        async with search_time_bounded(conn):
            rows = await conn.fetch(db.query("review_items_page"), *arguments)
    # One row at least: past the last page (or with nothing passing), the count alone.
    items = [row for row in rows if row["id"] is not None]
    if item_id is not None and not items:
        raise NotFound("no such item in this RFP")
    return rfp, items, rows[0]["total"]


# The characters str.strip() takes (none lies past U+3000): auto_answer_items's blank answer is
# the one rfp_items.not_approvable skips.
BLANK = "".join(chr(code) for code in range(0x3001) if chr(code).isspace())


@attrs.frozen(kw_only=True)
class BandItems:
    """auto_answer_items's answer: how many items, the first ones' ids, and when it was read."""

    total: int
    ids: list[str]
    seen: datetime


async def auto_answer_items(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, state: str | None, *,
    min_confidence: float, first: int, assignee_id: int | None = None, pattern: str | None = None,
    unchanged_since: datetime | None = None,
) -> BandItems:
    """The items of an RFP that the page's filters pass (review_items': `state`, `assignee_id`,
    `pattern`) and that a bulk approval of the auto-answer band approves: answered, not
    approved or discarded, an answer that is not blank and no longer than MAX_TEXT (one drafted
    longer before drafts were cut is left to its own page), confidence at least `min_confidence`
    with no attention asked (bands.band's auto_answer); with `unchanged_since`, only those not
    changed after it. The first `first` ids in questionnaire order, and how many in all. A search
    runs under SEARCH_TIMEOUT_MS (then 503)."""
    arguments = (rfp_id, account_id, REVIEW_FILTERS.get(state or ""), assignee_id, pattern,
                 min_confidence, unchanged_since, BLANK, first, MAX_TEXT)
    if pattern is None:
        row = await conn.fetchrow(db.query("auto_answer_items"), *arguments)
    else:
        async with search_time_bounded(conn):
            row = await conn.fetchrow(db.query("auto_answer_items"), *arguments)
    return BandItems(total=row["total"], ids=list(row["ids"]), seen=row["seen"])


async def assigned_items(
    conn: asyncpg.Connection, account_id: str, user_id: int, state: str | None, page: Page,
    *, cut: int | None = None,
) -> tuple[list[asyncpg.Record], int]:
    """One page of the items of the account's RFPs assigned to `user_id`, across its RFPs (by the
    RFP's deadline, none last, then the RFP, then position), each with its RFP's title and
    deadline (rfp_title, rfp_deadline) and requires_attention; and how many items pass `state`
    (one of REVIEW_FILTERS, or None for all). Another account's items are never among them,
    whoever `user_id` is. Questions and answers come cut to `cut` characters (None: whole), their
    whole lengths in question_chars / answer_chars."""
    rows = await conn.fetch(
        db.query("assigned_items_page"), account_id, user_id, REVIEW_FILTERS.get(state or ""),
        page.size, page.offset, _WHOLE if cut is None else cut,
    )
    # One row at least: past the last page, the count alone.
    return [row for row in rows if row["id"] is not None], rows[0]["total"]
