"""Merging a pair the library care page lists (a duplicate, or a conflict whose right answer the
writer chooses): a page showing both entries whole, where the writer presses the one to keep, and
that form, which is the API's merge (library.merge: the same versions, audit events, webhooks).

A pair gone meanwhile (merged or deleted by someone else), an entry of another account or of
none, and the same entry twice are each a page saying so in words, never the error page's 500."""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from ...domain import library
from ...domain.errors import Conflict, NotFound, ValidationFailed
from ...domain.knowledge import KnowledgeItem, find_item
from ..actors import actor
from ..auth import connection
from ..keys import CONFIG
from ..views.knowledge import entries_written
from .common import page, principal, read_form, render, see_other
from .knowledge import WRITERS

_SAME = "Both sides name the same entry: an entry cannot be merged into itself."
_UNNAMED = "This page merges two entries, and the address does not name both."
_UNSEEN = ("The form does not say which versions of the entries were shown, so nothing was merged: "
           "open the pair again from the Library care page and choose there.")
_CHANGED = ("One of the entries changed since the page was shown (someone edited it meanwhile), so "
            "nothing was merged: look at both again before choosing.")


def _refused(request: web.Request, status: int, message: str,
             left: list[KnowledgeItem] | None = None, again: str | None = None) -> web.Response:
    return render(request, "kb_merge.html", {
        "problem": message, "left": left or [], "gone": status == 404, "again": again,
    }, status=status)


def _version(value: object) -> int | None:
    # (At most 9 digits: Python refuses to read an integer of thousands, a 500 for a forged form.)
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(
        value) <= 9 else None


async def _gone(request: web.Request, ids: tuple[str, str]) -> web.Response:
    """404, alike for an entry merged or deleted since and for one of another account or of none
    (the API's "not found" rule); the one of the two still there is linked."""
    who = principal(request)
    async with connection(request) as conn:
        left = [item for item_id in dict.fromkeys(ids)
                if (item := await find_item(conn, who.account_id, item_id)) is not None]
    return _refused(request, 404, "", left)


@page(roles=WRITERS)
async def merge_page(request: web.Request) -> web.StreamResponse:
    """Both entries of a pair (`?a=…&b=…`), each with a button keeping it; opening it changes
    nothing. A writer's page only, as the merge is: a viewer is refused it (403)."""
    ids = (request.query.get("a", "").strip(), request.query.get("b", "").strip())
    if not all(ids):
        return _refused(request, 400, _UNNAMED)
    if ids[0] == ids[1]:
        return _refused(request, 422, _SAME)
    who = principal(request)
    async with connection(request) as conn:
        entries = [await find_item(conn, who.account_id, item_id) for item_id in ids]
    if None in entries:
        return await _gone(request, ids)
    return render(request, "kb_merge.html", {
        "problem": None, "entries": entries, "cut": request.app[CONFIG].web.item_chars_shown,
    })


@page(write=True, roles=WRITERS)
async def merge(request: web.Request) -> web.StreamResponse:
    """The API's POST …/{id}/merge with the form's `duplicate_id`: this entry is kept, that one
    removed; back to the care page, which says so."""
    keep_id = request.match_info["id"]
    form = await read_form(request)
    duplicate_id = str(form.get("duplicate_id") or "").strip()
    if not duplicate_id:
        return _refused(request, 400, _UNNAMED)
    # The versions the page showed: an entry edited since is not kept, or removed, unseen.
    shown = {keep_id: _version(form.get("keep_version")),
             duplicate_id: _version(form.get("duplicate_version"))}
    if None in shown.values() and keep_id != duplicate_id:
        return _refused(request, 400, _UNSEEN)
    who = principal(request)
    try:
        async with connection(request) as conn:
            await library.merge(conn, who.account_id, keep_id, duplicate_id, who.member_id,
                                actor=actor(request), shown_versions=shown)
    except NotFound:
        return await _gone(request, (keep_id, duplicate_id))
    except Conflict:
        again = f"/kb/care/merge?{urlencode({'a': keep_id, 'b': duplicate_id})}"
        return _refused(request, 409, _CHANGED, again=again)
    except ValidationFailed as exc:
        if keep_id == duplicate_id:
            return _refused(request, 422, _SAME)
        # The duplicate not found is the API's 422 (a field of its body names it); here, as the
        # kept entry not found, the pair is gone.
        if any(d.startswith("duplicate_id: no knowledge base item") for d in exc.details or ()):
            return await _gone(request, (keep_id, duplicate_id))
        raise
    entries_written(request.app)
    raise see_other("/kb/care?done=merged")
