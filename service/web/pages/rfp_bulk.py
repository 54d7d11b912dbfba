"""The RFP page's bulk approval: "Approve selected" (the boxes ticked) and the band's button (the
auto-answer items the page's filters pass, across the RFP, MAX_BULK_APPROVE a press), and what
the page says after either, including where an item's failure stopped the run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

from ...domain.errors import NotFound, ParameterInvalid, ValidationFailed
from ...domain.ids import could_be_id
from ...domain.rfp_items import (
    MAX_BULK_APPROVE,
    SKIPPED,
    BulkStopped,
    approval_problems,
    fetch_item,
    not_approvable,
)
from ...domain.rfps import (
    MAX_TEXT,
    BandItems,
    auto_answer_items,
    fetch_rfp,
    like_pattern,
    search_term_problem,
)
from ..auth import connection
from ..keys import CONFIG
from ..views.rfp_items import approve_and_announce
from .common import logged_failure, page, principal, read_form
from .fields import in_words
from .rfp_ways import assignee_filter, back_saying, count, state_filter

WRITERS = ("admin", "member")


# What the RFP page says after a bulk approval, each reason an item was skipped (SKIPPED).
SKIPPED_SAID = {"already_approved": "already approved", "no_answer": "without an answer",
                "discarded": "discarded", "not_found": "no longer in this RFP",
                "changed": "changed since the page was shown"}

# Why a bulk approval stopped at an item (?bulk_why=, _stop_kind): what the page says of it.
STOPPED_SAID = {
    "invalid": "Item {position} cannot be approved as it stands",
    "conflict": ("Approving item {position} conflicted with another change made at the same moment"
                 " and was rolled back."),
    "unavailable": "The database became unavailable while item {position} was being approved.",
    "error": "Something went wrong on our side while approving item {position}; it has been logged.",
}


def approvable(item: dict[str, Any]) -> bool:
    """Whether the page offers the item to the bulk approval (approve_items approves it): not an
    answer longer than an approval accepts (drafted before drafts were cut at MAX_TEXT; the page
    holds it cut, `answer_chars` its whole length), which would stop the run at itself."""
    return not_approvable(item) is None and (item["answer_chars"] or 0) <= MAX_TEXT


async def stopped_item(request: web.Request, conn: Any, rfp_id: str) -> dict[str, Any] | None:
    """The item a bulk approval stopped at (?bulk_stop=, approve), as the page says it: its
    position and, when it was refused as it stands, what keeps it from being approved now."""
    item_id = request.query.get("bulk_stop")
    if not item_id or not could_be_id(item_id) or request.query.get("bulk_why") not in STOPPED_SAID:
        return None
    try:
        item = await fetch_item(conn, principal(request).account_id, rfp_id, item_id)
    except NotFound:
        return None
    problems = approval_problems(item) if request.query.get("bulk_why") == "invalid" else []
    return {"id": item_id, "position": item["position"], "problems": in_words(problems)}


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def bulk_context(
    request: web.Request, sections: list[tuple[str | None, list[dict[str, Any]]]],
    band: BandItems | None, stopped: dict[str, Any] | None, term: str, filtered: bool,
) -> dict[str, Any]:
    """The page's bulk approval: the band's button (the auto-answer items under the page's
    filters, across the RFP, MAX_BULK_APPROVE a press), and what the last one did
    (?bulk=approved,already approved,no answer,discarded,not found,changed: counts; with
    bulk_band=1 the band's; with bulk_stop, bulk_why and bulk_left, where it stopped: approve)."""
    shown = [item for _, items in sections for item in items]
    total = band.total if band is not None else 0
    where = (" matching this search" if term else "") + (" in this filter" if filtered else "")
    after_band = request.query.get("bulk_band") == "1"
    if after_band and total > MAX_BULK_APPROVE:
        label = f"Approve the next {MAX_BULK_APPROVE} ({total:,} left)"
    elif after_band:
        label = "Approve the last one" if total == 1 else f"Approve the last {total}"
    elif total > MAX_BULK_APPROVE:
        label = f"Approve the first {MAX_BULK_APPROVE} of {total:,} auto-answer items{where}"
    else:
        label = (f"Approve the one auto-answer item{where}" if total == 1
                 else f"Approve all {total} auto-answer items{where}")
    said = None
    numbers = [count(c) for c in request.query.get("bulk", "").split(",")]
    if len(numbers) == 1 + len(SKIPPED) and None not in numbers:
        approved, *skipped = numbers
        said = f"Approved {_plural(approved, 'item', 'items')}."
        if sum(skipped):
            reasons = ", ".join(f"{n} {SKIPPED_SAID[why]}"
                                for why, n in zip(SKIPPED, skipped, strict=True) if n)
            said += f" Skipped {sum(skipped)}: {reasons}."
        if after_band and band is not None:
            said += (f" {_plural(total, 'auto-answer item', 'auto-answer items')}{where}"
                     f" {'is' if total == 1 else 'are'} left to approve." if total
                     else f" No auto-answer item{where} is left to approve.")
    return {"approvable": any(approvable(item) for item in shown), "band_total": total,
            "band_label": label, "band_where": where,
            "band_seen": band.seen.isoformat() if band is not None else "",
            "bulk_said": said, "bulk_max": MAX_BULK_APPROVE,
            "bulk_stopped": _stopped_said(request, stopped) if said else None}


def _stopped_said(request: web.Request, stopped: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where the bulk approval stopped, in words: why, and what it left unapproved."""
    why, left = request.query.get("bulk_why"), count(request.query.get("bulk_left", ""))
    if stopped is None or why not in STOPPED_SAID or left is None:
        return None
    said = STOPPED_SAID[why].format(position=stopped["position"])
    if why == "invalid":
        said += (": " + "; ".join(stopped["problems"]) + "." if stopped["problems"]
                 else ".")
        said += " Open it alone to correct it (or discard it)."
    if left:
        rest = f"It and the {_plural(left, 'item', 'items')} chosen after it were not approved"
        rest += ": approve them again." if why != "invalid" else "; the others can be approved again."
    else:
        rest = "It was not approved" + (": approve it again." if why != "invalid" else ".")
    return {"id": stopped["id"], "said": said, "left": rest}


def _band_filters(form: Any) -> tuple[str | None, bool, str | None]:
    """The page's filters the band's button was pressed under (the state, "Assigned to me", the
    search's pattern), refused in words as the page refuses them."""
    try:
        shown = state_filter(str(form.get("state") or "") or None)
        mine = assignee_filter(str(form.get("assignee") or ""))
    except ParameterInvalid as exc:
        raise ValidationFailed([exc.message], "nothing was approved") from None
    term = str(form.get("q") or "")
    if term.strip() and (problem := search_term_problem(term)):
        raise ValidationFailed([problem], "nothing was approved")
    return shown, mine, like_pattern(term) if term.strip() else None


def _seen(form: Any) -> datetime:
    """When the page the bulk approval was sent from was shown (its `seen`): only the items
    unchanged since are approved, each one the reviewer could have seen there."""
    try:
        seen = datetime.fromisoformat(str(form.get("seen") or ""))
        # In UTC, as the database takes it: year 1 at +01:00 or 9999 at -01:00 parse, but fall
        # outside what a timestamp holds (OverflowError sending the query: a 500).
        seen = seen.astimezone(UTC) if seen.tzinfo is not None else None
    except (ValueError, OverflowError):
        seen = None
    if seen is None:
        raise ValidationFailed(["The page's time is missing; reload the page and try again."],
                               "nothing was approved")
    return seen


def _stop_kind(request: web.Request, stopped: BulkStopped) -> str:
    """Why a bulk approval stopped (a key of STOPPED_SAID), logged as the error page would."""
    cause = stopped.__cause__ or stopped
    return "invalid" if isinstance(cause, ValidationFailed) else logged_failure(request, cause)


@page(write=True, roles=WRITERS)
async def approve(request: web.Request) -> web.StreamResponse:
    """Approve many items at once: the ones ticked ("Approve selected", `item`), or (`band`) the
    first MAX_BULK_APPROVE of the RFP's items in the auto-answer band that pass the page's
    filters (`state`, `assignee`, `q`), chosen here; either way only those not changed since the
    page was shown (`seen`), each as its Approve button would (approve_items); back to the page
    saying how many were approved and skipped, and where an item's failure stopped the run."""
    form = await read_form(request)
    rfp_id = request.match_info["id"]
    scope = form.get("scope")
    if scope not in ("selected", "band"):
        raise ValidationFailed(
            ["Choose “Approve selected” or “Approve all … auto-answer items”."],
            "nothing was approved")
    if scope == "band":
        (shown, mine, pattern), seen = _band_filters(form), _seen(form)
        who = principal(request)
        async with connection(request) as conn:
            await fetch_rfp(conn, rfp_id, who.account_id)  # another account's RFP: 404
            band = await auto_answer_items(
                conn, who.account_id, rfp_id, shown, first=MAX_BULK_APPROVE,
                assignee_id=who.user_id if mine else None, pattern=pattern, unchanged_since=seen,
                min_confidence=request.app[CONFIG].questions.auto_answer_confidence)
        ids = band.ids
    else:
        ids = [str(value) for value in form.getall("item", [])]
        if not ids:
            raise ValidationFailed(["Tick the items to approve first (the box beside each item)."],
                                   "nothing was approved")
        if len(ids) > MAX_BULK_APPROVE:  # said in words before any id is read
            raise ValidationFailed([f"At most {MAX_BULK_APPROVE} items can be approved at once;"
                                    f" {len(ids):,} were chosen."], "too many items to approve at once")
        # Only those unchanged since the page was shown, as the band's: a ticked item whose answer
        # was rewritten meanwhile (another reviewer, a reopened item answered again) was approved
        # unseen, where its own Approve button sends the answer it shows.
        seen = _seen(form)
    band_part = "&bulk_band=1" if scope == "band" else ""
    try:
        done = await approve_and_announce(request, rfp_id, ids, unchanged_since=seen,
                                          save_to_knowledge_base=form.get("save_to_kb") == "1")
    except BulkStopped as stopped:
        stop = (f"&bulk_stop={quote(stopped.item_id, safe='')}&bulk_why={_stop_kind(request, stopped)}"
                f"&bulk_left={stopped.left}")
        raise back_saying(form, rfp_id, f"bulk={_counts(stopped.done)}{band_part}{stop}",
                           "bulk-done") from None
    raise back_saying(form, rfp_id, f"bulk={_counts(done)}{band_part}", "bulk-done")


def _counts(done: Any) -> str:
    """A bulk approval's counts as ?bulk= carries them: approved, then skipped by reason."""
    return ",".join(str(n) for n in (len(done.approved),
                                     *(len(done.skipped.get(why, [])) for why in SKIPPED)))
