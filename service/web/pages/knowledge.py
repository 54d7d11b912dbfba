"""The knowledge base: search, add, edit, delete, import a CSV with its report, and the library's
care (entries past their review date, duplicates and conflicts)."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from ...domain import import_reports, library
from ...domain.convert import structure
from ...domain.isolation import Unread
from ...domain.knowledge import (
    KnowledgeItemInput,
    create_item,
    delete_item,
    fetch_item,
    import_csv_kept,
    parse_upload,
    search_count_cap,
    search_items,
)
from ...domain.models import Page
from ...domain.preconditions import entry_tag
from ...domain.rfps import search_term_problem
from ...domain.uploads import Limits
from ..actors import actor
from ..auth import connection
from ..body import one_of_members_uploads
from ..keys import CONFIG, LIBRARY_JOBS, PARSERS
from ..views.knowledge import entries_written, start_duplicate_run
from .common import may_write, page, principal, read_form, read_upload, render, see_other, shown_version

WRITERS = ("admin", "member")
# Duplicate and conflict pairs the care page lists (conflicts first). An account's findings grow
# with its entries (up to ~20 an entry, service/domain/library.py); listing them all once made a
# 350 MB page that held the event loop for 25 s, every request of the process waiting.
PAIRS_SHOWN = 200
# What the form just sent did, said on the page it redirects to (?done=…): without it a saved
# entry came back looking exactly as before the press, and a deleted one just vanished.
NOTICES = {
    "added": "Entry added.",
    "saved": "Entry saved: the previous version is kept.",
    "deleted": "Entry deleted.",
    "reviewed": "Marked reviewed: its next review is one review period from today.",
    "merged": "Entries merged: the one you kept stays, the other is removed, and what cited the other"
              " now cites the kept one.",
}


def _notice(request: web.Request) -> str | None:
    return NOTICES.get(request.query.get("done", ""))


def _entry_fields(form: Any, *, editing: bool = False) -> dict[str, Any]:
    """A form's entry as the API's JSON object: tags one per line or separated by ';', yes_no
    from a select (blank: none). A blank question, title or source is left out of a new entry
    and, `editing` one, clears it (the form shows every field: blank is what the editor chose)."""
    fields: dict[str, Any] = {}
    for name in ("question", "answer", "title", "source"):
        value = form.get(name)
        if isinstance(value, str) and (value.strip() or name == "answer" or editing):
            fields[name] = value
    tags = str(form.get("tags") or "")
    fields["tags"] = [t.strip() for t in tags.replace("\n", ";").split(";") if t.strip()]
    yes_no = form.get("yes_no")
    fields["yes_no"] = {"yes": True, "no": False}.get(str(yes_no or ""))
    return fields


@page()
async def kb_list(request: web.Request) -> web.StreamResponse:
    term = request.query.get("q", "")
    current = Page.from_query(request.query, max_rows=search_count_cap(term))
    who = principal(request)
    # A term the search cannot take (too short, too long) is said beside the box, not an error page.
    problem = search_term_problem(term) if term.strip() else None
    items: list[Any] = []
    total, capped = 0, False
    if not problem:
        async with connection(request) as conn:
            items, total, capped = await search_items(conn, who.account_id, term, current)
    return render(request, "kb.html", {
        "items": items, "q": term, "page": current.number, "total": total, "capped": capped,
        "pages": math.ceil(total / current.size), "may_write": may_write(who), "problem": problem,
        "notice": _notice(request),
    }, status=400 if problem else 200)


@page(write=True, roles=WRITERS)
async def kb_create(request: web.Request) -> web.StreamResponse:
    data = structure(_entry_fields(await read_form(request)), KnowledgeItemInput, root="knowledge_base_item")
    async with connection(request) as conn:
        item = await create_item(conn, principal(request).account_id, data, actor=actor(request))
    entries_written(request.app)
    raise see_other(f"/kb/{item.id}?done=added")


# Earlier versions shown on an entry's page, newest first (the API's versions list has them all).
VERSIONS_SHOWN = 20


@page()
async def kb_entry(request: web.Request) -> web.StreamResponse:
    who = principal(request)
    async with connection(request) as conn:
        item = await fetch_item(conn, who.account_id, request.match_info["id"])
        # The current version first, then the kept ones: those are the page's "earlier versions".
        found, total = await library.versions(conn, who.account_id, item.id,
                                              Page(number=1, size=VERSIONS_SHOWN + 1))
        earlier = [v for v in found if not v.current]
        authors = await library.version_authors(conn, who.account_id, earlier)
    return render(request, "kb_entry.html", {
        "item": item, "may_write": may_write(who), "notice": _notice(request),
        "shown": entry_tag(item.version),
        "earlier": earlier, "earlier_total": total - 1, "authors": authors,
        # A version's texts cut as the RFP page cuts an item's, so that the page stays small.
        "cut": request.app[CONFIG].web.item_chars_shown,
    })


@page(write=True, roles=WRITERS)
async def kb_update(request: web.Request) -> web.StreamResponse:
    """The API's PATCH of an entry (library.update_item: the previous version is kept)."""
    form = await read_form(request)
    fields = _entry_fields(form, editing=True)
    who = principal(request)
    item_id = request.match_info["id"]
    async with connection(request) as conn:
        item = await library.update_item(
            conn, who.account_id, item_id, who.member_id, fields, actor=actor(request),
            if_match=shown_version(form),
        )
    entries_written(request.app)
    raise see_other(f"/kb/{item.id}?done=saved")


@page(write=True, roles=WRITERS)
async def kb_delete(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    async with connection(request) as conn:
        await delete_item(
            conn, principal(request).account_id, request.match_info["id"], actor=actor(request),
            if_match=shown_version(form),
        )
    entries_written(request.app)
    raise see_other("/kb?done=deleted")


@page(write=True, roles=WRITERS, multipart=True)
async def kb_import(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    with one_of_members_uploads(request):
        _, upload = await read_upload(request, config.server.max_upload_bytes)
        # As the API's import: parsed in a worker process within the upload limits.
        with upload.file:
            parsed = await request.app[PARSERS].run(parse_upload, Unread(upload.file),
                                                    Limits.of(config.uploads),
                                                    owner=principal(request).account_id)
    async with connection(request) as conn:
        _, report_id = await import_csv_kept(conn, principal(request).account_id, parsed, actor(request))
    entries_written(request.app)
    # Redirect-after-POST: the report's page is a GET, so that a reload (or Back then Forward)
    # reads the report again; as the POST's own response, a reload imported the file again.
    raise see_other(f"/kb/imports/{report_id}")


@page()
async def kb_import_report(request: web.Request) -> web.StreamResponse:
    """A CSV import's report (kb_import), to any member of the account: the knowledge base is
    theirs to read. Another account's, an unknown or a swept report is the 404 page."""
    async with connection(request) as conn:
        report = await import_reports.fetch(conn, principal(request).account_id, request.match_info["id"])
    return render(request, "kb_import.html", {"report": report})


@page()
async def kb_care(request: web.Request) -> web.StreamResponse:
    """What the API's `?stale=true` and `/duplicates` show: entries past their review date (most
    overdue first) and the last duplicate/conflict findings (a run starts when they are stale)."""
    current = Page.from_query(request.query)
    who = principal(request)
    async with connection(request) as conn:
        total, stale = await library.list_items(
            conn, who.account_id, stale=True, owner=None, size=current.size, offset=current.offset
        )
        report = await library.duplicate_report(conn, who.account_id, limit=PAIRS_SHOWN + 1)
    if report["state"] != "fresh":
        start_duplicate_run(request.app, who.account_id)
    more_pairs = len(report["pairs"]) > PAIRS_SHOWN
    del report["pairs"][PAIRS_SHOWN:]
    return render(request, "kb_care.html", {
        "stale": stale, "total": total, "page": current.number,
        "pages": math.ceil(total / current.size), "report": report, "more_pairs": more_pairs,
        "running": who.account_id in request.app[LIBRARY_JOBS], "may_write": may_write(who),
        "notice": _notice(request),
    })


@page(write=True, roles=WRITERS)
async def kb_reviewed(request: web.Request) -> web.StreamResponse:
    """The API's POST …/reviewed: the entry's next review is one review period away."""
    who = principal(request)
    async with connection(request) as conn:
        await library.mark_reviewed(
            conn, who.account_id, request.match_info["id"], who.member_id, None, actor=actor(request)
        )
    raise see_other("/kb/care?done=reviewed")
