"""The RFP list and one RFP's review page, with every per-item and whole-RFP action."""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import quote

from aiohttp import web

from ... import db
from ...domain import import_reports
from ...domain.convert import FRAMEWORKS, structure
from ...domain.errors import Conflict, UsageBlocked, ValidationFailed
from ...domain.models import MemberRef, Page
from ...domain.preconditions import item_tag
from ...domain.rfp_items import (
    AnswerOptions,
    answering_progress,
    assignable_members,
    credits_short,
    fetch_item,
    import_options,
    left_pending,
)
from ...domain.rfps import (
    REVIEW_FILTERS,
    SEARCH_COUNT_CAP,
    ItemsChanged,
    RfpCreate,
    SearchResult,
    assigned_items,
    auto_answer_items,
    create_rfp,
    fetch_rfp,
    like_pattern,
    list_rfps,
    review_items,
    search_rfps,
    search_term_problem,
)
from ...domain.writeback import has_original
from ..actors import actor
from ..auth import connection
from ..body import one_of_members_uploads
from ..keys import CONFIG
from ..responses import json_response
from ..views import rfp_items as rfp_items_views
from ..views.rfp_items import import_upload, review_and_announce, start_answering
from .common import (
    band_of,
    may_write,
    page,
    principal,
    read_form,
    read_upload,
    render,
    see_other,
    shown_version,
)
from .rfp_bulk import approvable, bulk_context, stopped_item
from .rfp_ways import (
    assignee_filter,
    back_saying,
    count,
    form_back,
    my_items_way,
    state_filter,
    way_back,
)

WRITERS = ("admin", "member")


def _page_number(request: web.Request) -> Page:
    return Page.from_query(request.query, max_rows=SEARCH_COUNT_CAP)


@page()
async def home(request: web.Request) -> web.StreamResponse:
    raise see_other("/rfps")


@page()
async def rfp_list(request: web.Request) -> web.StreamResponse:
    term = request.query.get("q", "")
    current = _page_number(request)
    who = principal(request)
    # A term the search cannot take (too short, too long) is said beside the box, not an error page.
    problem = search_term_problem(term) if term.strip() else None
    async with connection(request) as conn:
        if problem:
            found = SearchResult(rows=[], total=0, capped=False)
        elif term.strip():
            found = await search_rfps(conn, who.account_id, term, current, "q")
        else:
            found = await list_rfps(conn, who.account_id, current)
    return render(request, "rfps.html", {
        "rfps": found.rows, "q": term, "page": current.number,
        "pages": math.ceil(found.total / current.size), "total": found.total,
        "capped": found.capped, "may_write": may_write(who),
        "frameworks": FRAMEWORKS, "problem": problem,
    }, status=400 if problem else 200)


def _form_fields(form: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The named form fields, a blank one left out (the record's default: none)."""
    fields = {}
    for name in names:
        value = form.get(name)
        if isinstance(value, str) and value.strip():
            fields[name] = value
    return fields


@page(write=True, roles=WRITERS)
async def create(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    fields = _form_fields(
        form, ("title", "description", "deadline", "framework", "portal_url", "context")
    )
    fields.setdefault("title", "")
    data = structure(fields, RfpCreate, root="rfp")
    who = principal(request)
    async with connection(request) as conn:
        rfp_id = await create_rfp(
            conn, account_id=who.account_id, owner_user_id=who.user_id, data=data, actor=actor(request)
        )
    raise see_other(f"/rfps/{rfp_id}")


def _references(raw: str | None) -> list[dict[str, Any]]:
    if not raw:
        return []
    return [r for r in json.loads(raw) if r.get("used")]


@page()
async def rfp_page(request: web.Request) -> web.StreamResponse:
    rfp_id = request.match_info["id"]
    shown = state_filter(request.query.get("state"))
    # ?assignee=me: only the items assigned to the signed-in member.
    mine = "me" if assignee_filter(request.query.get("assignee")) else None
    # ?q=: only the items whose question or answer holds the term (the RFP search's rule and
    # limits); a term it cannot take is said beside the box.
    term = request.query.get("q", "")
    problem = search_term_problem(term) if term.strip() else None
    pattern = like_pattern(term) if term.strip() and not problem else None
    # ?item=: that item alone, whole, however long (a longer one is cut on the pages of items);
    # opened from "My items" (?from=items, or items?state=…&page=…), it leads back there, to the
    # list's filter and page, and so do its forms.
    alone = request.query.get("item") or None
    my_items_link = my_items_way(request.query.get("from")) if alone is not None else None
    settings = request.app[CONFIG].web
    cut = settings.item_chars_shown
    size = 1 if alone else settings.items_per_page
    # The page of items the list is on: the item alone keeps it for the way back to the list.
    listed = Page.from_query(request.query, size=settings.items_per_page)
    current = Page(number=1, size=1) if alone else listed
    who = principal(request)
    bulk_shown = may_write(who) and not alone
    async with connection(request) as conn:
        # The band "Approve all" approves, across the whole RFP under these filters: read before
        # the items, so that an item answered in between is shown but never counted unseen.
        band = (await auto_answer_items(
            conn, who.account_id, rfp_id, shown, first=0, assignee_id=who.user_id if mine else None,
            pattern=pattern, min_confidence=request.app[CONFIG].questions.auto_answer_confidence,
        ) if bulk_shown and not problem else None)
        stopped = await stopped_item(request, conn, rfp_id) if bulk_shown else None
        if problem and not alone:
            rfp, rows, total = await fetch_rfp(conn, rfp_id, who.account_id), [], 0
        else:
            rfp, rows, total = await review_items(
                conn, who.account_id, rfp_id, None if alone else shown, current,
                cut=None if alone else cut, item_id=alone,
                assignee_id=who.user_id if mine and not alone else None,
                pattern=None if alone else pattern,
            )
        in_flight = await conn.fetchval(db.query("count_rfp_items_in_flight"), rfp_id)
        # "Export into the imported file" only when there is one (items added by hand have none).
        original = bool(rfp["total_items"]) and await has_original(conn, who.account_id, rfp_id)
        writers = _told_apart(await assignable_members(conn, who.account_id)) if may_write(who) else []
        # ?short=1: "answer all" was refused for its credits (answer_all); what they pay for.
        short = (await credits_short(conn, who.account_id, rfp_id,
                                     request.app[CONFIG].questions.credits_per_question)
                 if request.query.get("short") == "1" and may_write(who) else None)
        # ?first=N: "Answer the first N pending items" has finished; what it left pending.
        first = count(request.query.get("first", ""))
        left = (await left_pending(conn, who.account_id, rfp_id,
                                   request.app[CONFIG].questions.credits_per_question)
                if first is not None and may_write(who) and not in_flight else None)
    sections: list[tuple[str | None, list[dict[str, Any]]]] = []
    for row in rows:
        item = {
            "id": row["id"], "question": row["question"], "answer": row["answer"],
            "state": row["state"], "position": row["position"], "section": row["section"],
            "confidence": None if row["confidence"] is None else float(row["confidence"]),
            "band": _item_band(request, row),
            "attention_points": row["attention_points"] or [],
            "references": _references(row["references"]),
            "in_flight": row["state"] == "pending" and row["question_id"] is not None,
            "knowledge_item_id": row["knowledge_item_id"],
            "question_cut": row["question_chars"] > len(row["question"]),
            "answer_cut": row["answer"] is not None and row["answer_chars"] > len(row["answer"]),
            "answer_chars": row["answer_chars"],
            # What the item's form sends back: its answer is saved, or approved, only as shown.
            "tag": item_tag(row["updated_at"]),
            "chars": row["question_chars"] + (row["answer_chars"] or 0),
            "assignee_id": row["assignee_id"], "assignee_name": row["assignee_name"],
            "assignee_email": row["assignee_email"],
        }
        item["approvable"] = approvable(item)
        if not sections or sections[-1][0] != row["section"]:
            sections.append((row["section"], []))
        sections[-1][1].append(item)
    # Every link and way back of the page keeps both filters (state and assignee) but the one it
    # changes: "state=review&assignee=me&" …; the item alone keeps them and the page it was on,
    # for its way back to the list.
    state_part = f"state={shown}" if shown else ""
    mine_part = "assignee=me" if mine else ""
    term_part = f"q={quote(term, safe='')}" if term.strip() else ""
    page_part = f"page={listed.number}" if listed.number > 1 else ""
    kept = "".join(f"{part}&" for part in (state_part, mine_part, term_part) if part)
    listing = "".join(f"{part}&" for part in (state_part, mine_part, term_part, page_part) if part)
    return render(request, "rfp.html", {
        "rfp": rfp, "sections": sections, "shown": shown or "", "filters": REVIEW_FILTERS,
        "mine": bool(mine), "kept": kept, "listing": listing, "my_items_link": my_items_link,
        # Kept by the item's forms' way back: "from=items%3Fstate%3D…&".
        "from_part": (f"from={quote(my_items_link[1:], safe='')}&" if my_items_link else ""),
        "state_links": {value: _query(f"state={value}" if value else "", mine_part, term_part)
                        for value in ("", *REVIEW_FILTERS)},
        "anyone_link": _query(state_part, term_part),
        "mine_link": _query(state_part, "assignee=me", term_part),
        "clear_link": _query(state_part, mine_part),
        "q": term if term.strip() else "", "problem": problem,
        "page": current.number, "pages": math.ceil(total / size), "total": total, "alone": alone,
        "in_flight": in_flight, "original": original, "may_write": may_write(who), "writers": writers,
        "report": None, **_done(request, sections),
        **bulk_context(request, sections, band, stopped, term if pattern else "", bool(shown or mine)),
        # "Answer all" that found nothing pending (?answering=0, answer_all): said, not silent.
        "nothing_pending": request.query.get("answering") == "0" and not in_flight,
        "short": short, "first": {"answered": first, **left} if left else None,
    }, status=400 if problem and not alone else 200)


def _done(request: web.Request, sections: list[tuple[str | None, list[dict[str, Any]]]]) -> dict[str, Any]:
    """What a form just did to an item (?done=…&done_item=…, _back_to_item): said at the item, or
    at the top of the list when the item has left it (approved, in the "review" filter)."""
    done = request.query.get("done")
    if done not in DONE:
        return {"done": None, "done_said": None, "done_item": None, "done_gone": False}
    item_id = request.query.get("done_item")
    shown = any(item["id"] == item_id for _, items in sections for item in items)
    return {"done": done, "done_said": DONE[done], "done_item": item_id, "done_gone": not shown}


def _item_band(request: web.Request, row: Any) -> str | None:
    """An item's confidence band (service/domain/bands.py), None while it is pending or once it
    is discarded."""
    if row["state"] in ("pending", "discarded"):  # no draft to weigh: not answered, or set aside
        return None
    confidence = None if row["confidence"] is None else float(row["confidence"])
    return band_of(request, confidence, row["requires_attention"])


@page()
async def my_items(request: web.Request) -> web.StreamResponse:
    """The signed-in member's items across the account's RFPs, grouped by RFP (the nearest
    deadline first), with the RFP page's state filters; each links to the item alone."""
    shown = state_filter(request.query.get("state"))
    settings = request.app[CONFIG].web
    current = Page.from_query(request.query, size=settings.items_per_page)
    who = principal(request)
    async with connection(request) as conn:
        rows, total = await assigned_items(conn, who.account_id, who.user_id, shown, current,
                                           cut=settings.item_chars_shown)
    rfps: list[dict[str, Any]] = []
    for row in rows:
        if not rfps or rfps[-1]["id"] != row["rfp_id"]:
            rfps.append({"id": row["rfp_id"], "title": row["rfp_title"],
                         "deadline": row["rfp_deadline"], "assigned": []})
        rfps[-1]["assigned"].append({
            "id": row["id"], "position": row["position"], "question": row["question"],
            "question_cut": row["question_chars"] > len(row["question"]), "state": row["state"],
            "confidence": None if row["confidence"] is None else float(row["confidence"]),
            "band": _item_band(request, row),
            "in_flight": row["state"] == "pending" and row["question_id"] is not None,
        })
    kept = f"state={shown}&" if shown else ""
    # Each item's link says where it was opened from, this filter and page, for its way back.
    here = f"{kept}page={current.number}" if current.number > 1 else kept[:-1]
    return render(request, "items.html", {
        "rfps": rfps, "shown": shown or "", "kept": kept, "page": current.number,
        "from_here": quote("items" + (f"?{here}" if here else ""), safe=""),
        "pages": math.ceil(total / current.size), "total": total, "may_write": may_write(who),
    })


def _told_apart(writers: list[MemberRef]) -> list[dict[str, Any]]:
    """The writers as the assign selects list them (id, name): each name with its address
    beside it. A name is its member's to choose, the address not: with the address beside only
    names that another writer bore too, one who took a colleague's name and address as theirs
    ("Grace Hopper (grace@…)"), or the name with an invisible or look-alike character in it, got
    the option that looked told apart, and the colleague's stood bare."""
    return [{"id": writer.id, "name": f"{writer.name} ({writer.email})"} for writer in writers]


def _query(*parts: str) -> str:
    """A link's query from these parts ("state=review", "" for none): "?…", or "" for none."""
    query = "&".join(part for part in parts if part)
    return f"?{query}" if query else ""


# What each button of an item's form asks of the review (views/rfp_items.py review_and_announce).
def _review_fields(form: Any) -> dict[str, Any]:
    action = form.get("action")
    answer = form.get("answer")
    fields: dict[str, Any] = {}
    if isinstance(answer, str) and action in ("save", "approve", "save_to_kb"):
        fields["answer"] = answer
    if action == "save":
        pass
    elif action == "approve":
        fields["state"] = "approved"
    elif action == "save_to_kb":
        fields["state"] = "approved"
        fields["save_to_knowledge_base"] = True
    elif action == "discard":
        fields["state"] = "discarded"
    elif action == "reopen":
        fields["state"] = "pending"
    else:
        raise ValidationFailed([
            "The form's button must be Save, Approve, Save to knowledge base, Discard or Reopen;"
            f" got {str(action)[:40]!r}"
        ])
    return fields




def _back_to_item(form: Any, rfp_id: str, item_id: str, done: str) -> web.HTTPSeeOther:
    """Back to the item on the page the form was sent from, saying what was done to it
    (`done`, one of DONE, shown at the item: nothing said it, and a saved answer looked unchanged)."""
    said = f"done={done}&done_item={quote(item_id, safe='')}"
    return back_saying(form, rfp_id, said, f"item-{item_id}")


# What the RFP page says at an item after each of its forms (_back_to_item); "assign" names the
# assignee (rfp.html).
DONE = {
    "save": "Answer saved.", "approve": "Approved.",
    "save_to_kb": "Approved and saved to the knowledge base.", "discard": "Discarded.",
    "reopen": "Reopened: “Answer all pending items” answers it again.", "assign": "Assignment saved.",
}


@page(write=True, roles=WRITERS)
async def review(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    fields = _review_fields(form)
    rfp_id, item_id = request.match_info["id"], request.match_info["item_id"]
    await review_and_announce(request, rfp_id, item_id, fields, if_match=shown_version(form))
    raise _back_to_item(form, rfp_id, item_id, str(form.get("action")))


# The RFP page's item select offers a few members ("someone else…" for the rest): chosen without
# the script, which fills the select with every writer, it opens the item's own assign page.
CHOOSE = "choose"


def _assignee_field(form: Any) -> int | None:
    """The assign form's member: a user id, or empty for nobody."""
    value = form.get("assignee_id")
    if value in (None, ""):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        return int(value)
    raise ValidationFailed(
        [f"The assignee must be one of the members listed, or nobody; got {str(value)[:40]!r}"])


@page(write=True, roles=WRITERS)
async def assign(request: web.Request) -> web.StreamResponse:
    """The API's PATCH of the item's assignee_id (the assignee is e-mailed unless it is oneself)."""
    form = await read_form(request)
    rfp_id, item_id = request.match_info["id"], request.match_info["item_id"]
    if form.get("assignee_id") == CHOOSE:  # "someone else…" without the script: every writer
        async with connection(request) as conn:  # an item of the account (404), its ids ours
            await fetch_item(conn, principal(request).account_id, rfp_id, item_id)
        back = form_back(form)
        raise see_other(f"/rfps/{rfp_id}/items/{item_id}/assign"
                        + (f"?back={quote(back, safe='')}" if back else ""))
    fields = {"assignee_id": _assignee_field(form)}
    try:
        await review_and_announce(request, rfp_id, item_id, fields)
    except ValidationFailed as exc:
        # Well formed (_assignee_field), the assignee is refused only for not being a writer of
        # the account: the API's detail names them by user id, which the page's select did not.
        if any(detail.startswith("rfp_item.assignee_id:") for detail in exc.details or ()):
            raise ValidationFailed([
                "rfp_item.assignee_id: the member chosen can no longer be assigned items (removed"
                " from the account, or made a viewer, since the page was shown); reload the page"
                " and choose again"]) from None
        raise
    raise _back_to_item(form, rfp_id, item_id, "assign")


@page(write=True, roles=WRITERS)
async def choose_assignee(request: web.Request) -> web.StreamResponse:
    """One item's assign form with a select of every writer of the account: the RFP page's
    "someone else…" without the script (with it, the page's own select gets them)."""
    rfp_id, item_id = request.match_info["id"], request.match_info["item_id"]
    back = way_back(request.query.get("back"))
    who = principal(request)
    async with connection(request) as conn:
        item = await fetch_item(conn, who.account_id, rfp_id, item_id)
        title = await conn.fetchval(db.query("rfp_title"), rfp_id)
        writers = _told_apart(await assignable_members(conn, who.account_id))
    # Its spaces collapsed first (a question is at most MAX_TEXT characters): cut before, its
    # spaces could fill the part read and the rest go unshown, unmarked.
    question = " ".join(item["question"].split())
    return render(request, "assign.html", {
        "rfp_id": rfp_id, "rfp_title": title, "item": item, "writers": writers, "back": back,
        "question": question[:_QUESTION_SHOWN], "question_cut": len(question) > _QUESTION_SHOWN,
    })


_QUESTION_SHOWN = 500  # characters of the question the assign page shows


@page(write=True, roles=WRITERS, multipart=True)
async def upload(request: web.Request) -> web.StreamResponse:
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        rfp = await fetch_rfp(conn, rfp_id, who.account_id)  # 404 before reading a large body
    with one_of_members_uploads(request):
        fields, file = await read_upload(request, request.app[CONFIG].server.max_upload_bytes)
        seen = _not_sent_again(fields, rfp)
        try:
            _, report_id = await import_upload(request, who.account_id, rfp_id, file,
                                               import_options(fields), keep_report=True, items_held=seen)
        except ItemsChanged as changed:  # two sent at once: each passed the check above
            raise _sent_again(changed.seen, changed.held) from None
    # Redirect-after-POST, as the knowledge base's import (pages/knowledge.py kb_import).
    raise see_other(f"/rfps/{rfp_id}/imports/{report_id}")


@page()
async def import_report(request: web.Request) -> web.StreamResponse:
    """A questionnaire upload's report (upload), to any member of the account, as the RFP is.
    Another RFP's, another account's, an unknown or a swept report is the 404 page."""
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        rfp = await fetch_rfp(conn, rfp_id, who.account_id)
        report = await import_reports.fetch(conn, who.account_id, request.match_info["report_id"],
                                            rfp_id=rfp_id)
    return render(request, "import_report.html", {"rfp": rfp, "report": report})


def _not_sent_again(fields: dict[str, str], rfp: dict[str, Any]) -> int | None:
    """The report was the upload's own response: reloading it sent the upload again (a browser
    asks first, or not), which imported the questionnaire a second time, every question twice.
    The report is now a page of its own (redirect-after-POST); this still refuses a form sent
    again once the RFP changed (a report page shown before that change, the same form sent twice,
    another tab's). The form says how many items the RFP had when it was shown (`items_seen`);
    when that has changed, the upload is refused, 409 saying why. A form without the field (an
    older page) imports as before. Returns the count the form saw, for the import to check again
    under the RFP's lock (two forms sent at once both pass here)."""
    raw = fields.get("items_seen")
    if raw is None:
        return None
    seen = count(raw)
    if seen != rfp["total_items"]:
        raise _sent_again(raw[:10], rfp["total_items"])
    return seen


def _sent_again(seen: object, held: int) -> Conflict:
    return Conflict(
        f"Not imported: this upload form was shown when the RFP had {seen} items, and it has"
        f" {held:,} now (a form sent again, from another tab or a page kept open, sends its"
        " file again). Open the RFP to see them; to import a file into it again, upload it from the"
        " RFP's page as it is now.")


@page(write=True, roles=WRITERS)
async def answer_all(request: web.Request) -> web.StreamResponse:
    """"Answer all pending items", or (`max_items`, the offer the page makes when the credits
    fall short) the first ones the credits pay for."""
    form = await read_form(request)
    rfp_id = request.match_info["id"]
    raw = str(form.get("max_items") or "")
    # A form sends text: digits as the number, anything else as itself, for the API's words.
    fields = {"max_items": raw if (number := count(raw)) is None else number}
    options = structure(fields if raw else {}, AnswerOptions)
    async with connection(request) as conn:
        try:
            answering = await start_answering(request, conn, rfp_id, options)
        except UsageBlocked:
            # Too few credits for every item: back to the page, which says so and offers the
            # first ones they pay for (an inactive subscription is the error page, as before).
            cost = request.app[CONFIG].questions.credits_per_question
            if await credits_short(conn, principal(request).account_id, rfp_id, cost) is None:
                raise
            raise back_saying(form, rfp_id, "short=1", "answer-short") from None
    # The first N (the credits' offer): once they are answered, the page says what is left.
    first = f"first={answering['started']}&" if raw else ""
    raise back_saying(form, rfp_id, f"{first}answering={answering['started']}", "progress")


@page()
async def progress(request: web.Request) -> web.StreamResponse:
    """Polled by the RFP page while items are answered (static/app/app.js)."""
    async with connection(request) as conn:
        body = await answering_progress(conn, principal(request).account_id, request.match_info["id"])
    return json_response(body)


@page(hold_connection=False)
async def export(request: web.Request) -> web.StreamResponse:
    """The API's export itself (GET /api/v1/rfps/{id}/export: csv, xlsx or original), for the
    session's member; its failures are shown as pages. As the API's, it holds no pooled
    connection while the file goes to the client (holding the page's, twelve exports a client
    never read held every connection: other accounts could not even sign in)."""
    return await rfp_items_views.export_rfp(request)
