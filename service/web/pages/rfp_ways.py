"""The RFP page's forms' ways back to it (their filters and page kept), what the redirects
carry for the page to say (counts), and its state filter as the RFP page, its bulk approval and
"My items" take it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from ...domain.errors import ParameterInvalid
from ...domain.models import Page
from ...domain.rfps import review_filter
from .common import see_other

# The longest way back kept: the page's own are under 100 characters but for a search term, at
# most 200 characters of up to 12 each percent-encoded. A longer one went into the redirect whole
# (a 1 MB form field, a 1 MB Location header, past what proxies take).
BACK_MAX = 2_600


def way_back(value: Any) -> str:
    """A way back to the page a form was sent from ("?state=…&page=…"), or "" for none."""
    back = str(value or "")
    return back if back.startswith("?") and len(back) <= BACK_MAX else ""


def form_back(form: Any) -> str:
    """A form's way back to the page it was sent from: its `back`, or ""."""
    return way_back(form.get("back"))


def back_saying(form: Any, rfp_id: str, said: str, anchor: str) -> web.HTTPSeeOther:
    """Back to the RFP page the form was sent from (its filters kept), `said` (what the form did,
    for the page to say) added to its query, at `anchor`."""
    back = form_back(form).rstrip("?&")
    return see_other(f"/rfps/{rfp_id}{back}{'&' if back else '?'}{said}#{anchor}")


def count(text: Any) -> int | None:
    """A small count sent as text (a query's or form's: at most 6 ASCII digits), or None."""
    text = str(text)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None


def state_filter(raw: str | None) -> str | None:
    """A state filter (?state=, or the bulk approval's `state`: review_filter), refused in the
    words of the filter links above the items (the API's "state must be one of needs_input, …")."""
    try:
        return review_filter(raw)
    except ParameterInvalid:
        raise ParameterInvalid("The filter must be Needs input, Review or Approved (the links above"
                               f" the items), or none for every item; got {str(raw)[:40]!r}") from None


def assignee_filter(raw: str | None) -> bool:
    """Whether ?assignee=me (or the bulk approval's `assignee`) asks for one's own items only;
    anything but "me" or none is refused in the words of the filter links."""
    if raw in (None, "", "me"):
        return raw == "me"
    raise ParameterInvalid("The filter must be Assigned to me or Anyone's (the links above the"
                           f" items); got {str(raw)[:40]!r}")


def my_items_way(raw: str | None) -> str | None:
    """An item alone's ?from= when "My items" opened it: "items", or "items?state=…&page=…", the
    list's filter and page, so that its way back returns there (from page 2 of "Needs input" it
    led to page 1 of every item, where the item may not be); the address of that page of "My
    items", or None for any other value. A filter or page it names is checked as the list's own."""
    if raw == "items":
        return "/items"
    if not (raw or "").startswith("items?"):
        return None
    given = parse_qsl(raw[len("items?"):], keep_blank_values=True)
    names = [name for name, _ in given]
    if len(set(names)) != len(names) or not set(names) <= {"state", "page"}:
        return None
    fields = dict(given)
    shown = state_filter(fields.get("state") or None)
    number = Page.from_query({"page": fields.get("page", "")}).number
    parts = (f"state={shown}" if shown else "", f"page={number}" if number > 1 else "")
    kept = "&".join(part for part in parts if part)
    return "/items" + (f"?{kept}" if kept else "")
