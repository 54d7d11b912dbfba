"""Reviewing a long RFP on its page: searching its items (with the state and "Assigned to me"
filters and the pager), approving many at once (each as one item's Approve does), and the page's
rough edges (what a viewer, a discarded item and an RFP without items show; errors in words)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from html import unescape
from typing import Any

from aiohttp import FormData
from conftest import lock_waiters, with_config

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password, sign_in  # noqa: F401

from service.domain.rfps import BLANK
from service.web.app import create_app

Row = tuple[str, str, str | None, float | None]


async def add_items(conn: Any, rfp_id: str, rows: list[Row]) -> list[str]:
    """Items (question, state, answer, confidence) in order; their ids."""
    ids = [f"item_{rfp_id[-6:]}_{n}" for n in range(1, len(rows) + 1)]
    await conn.executemany(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, confidence)"
        " VALUES ($1, $2, $3, $4, $5::rfp_item_state, $6, $7)",
        [(item_id, rfp_id, question, n, state, answer, confidence)
         for n, (item_id, (question, state, answer, confidence))
         in enumerate(zip(ids, rows, strict=True), 1)])
    return ids


def shown(page: str, ids: list[str]) -> list[str]:
    return [i for i in ids if f'id="item-{i}"' in page]


def picks(page: str) -> list[str]:
    """The items the page offers to "Approve selected"."""
    return re.findall(r'<input type="checkbox" form="bulk" name="item" value="([^"]+)"', page)


def band_form(page: str) -> list[tuple[str, str]]:
    """What the band's button sends besides the token: the page's filters, `seen` and `back`."""
    form = page.split('id="bulk"', 1)[1].split("</form>", 1)[0]
    return [(name, unescape(value)) for name, value in re.findall(
        r'<input type="hidden" name="(state|assignee|q|seen|back)" value="([^"]*)">', form)]


def seen(page: str) -> tuple[str, str]:
    """The bulk form's `seen`: when the page was shown (both buttons send it)."""
    return ("seen", unescape(field(page, "seen")))


def band_button(page: str) -> str:
    found = re.search(r'id="approve-band" aria-describedby="band-hint">([^<]*)</button>', page)
    return unescape(found.group(1)) if found else ""


def said(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}">(.*?)</p>', page, re.S)
    return unescape(found.group(1)) if found else ""


QUESTIONS = [
    ("Do you encrypt backups?", "auto_answered", "Yes, with AES-256.", 0.92),
    ("Is MFA enforced for administrators?", "auto_answered", "Yes.", 0.9),
    ("Is data encrypted at rest?", "needs_input", "Partly: the database is.", 0.6),
    ("Who is your DPO?", "approved", "Ada Lovelace.", 0.95),
    ("How are keys rotated?", "auto_answered", "Keys are encrypted and rotated yearly.", 0.85),
    ("Do you keep 100% of logs?", "pending", None, None),
]


async def test_rfp_page__search_finds_questions_and_answers_with_the_filters_and_the_pager(
    aiohttp_client, config, admin, make_member, make_account, make_rfp, conn,
):
    # Before: the page had no search; finding "the encryption question" among 300 items was
    # paging through them.
    writer = await make_member(admin.account_id, "member")
    await set_password(conn, writer.email)
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, web={"items_per_page": 2})))
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, QUESTIONS)
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = ANY($1::text[])",
                       [ids[0], ids[4]], writer.user_id)
    # Another account's RFP holds the same words: never found, whatever is searched.
    other = await make_account()
    theirs = await make_rfp(other, "Theirs")
    their_ids = await add_items(conn, theirs, [("Do you encrypt everything?", "auto_answered", "Yes.", 0.9)])
    await sign_in(client, writer.email)

    # "encrypt" is in items 1 and 3's questions and item 5's answer: pages of 2, every link
    # keeping the term.
    page = await (await client.get(f"/rfps/{rfp_id}", params={"q": "ENCRYPT"})).text()
    assert shown(page, ids) == [ids[0], ids[2]] and not shown(page, their_ids)
    assert said(page, "search-count") == "3 items matching “ENCRYPT”."
    assert 'href="?q=ENCRYPT&amp;page=2" rel="next"' in page
    assert 'href="?state=review&amp;q=ENCRYPT"' in page  # the state filters keep it
    assert 'href="?assignee=me&amp;q=ENCRYPT" id="assigned-to-me"' in page
    assert field(page, "back") == "?q=ENCRYPT&amp;page=1"
    assert '<input id="q" name="q" type="search" value="ENCRYPT">' in page
    rest = await (await client.get(f"/rfps/{rfp_id}?q=ENCRYPT&page=2")).text()
    assert shown(rest, ids) == [ids[4]]
    # A page past the last (a link kept from before items changed) counts what the search and
    # the filters pass, as every page does: it counted every item of the RFP ("6 items
    # matching", a pager of 3 pages for the search's 2).
    past = await (await client.get(f"/rfps/{rfp_id}?q=ENCRYPT&page=3")).text()
    assert not shown(past, ids) and said(past, "search-count") == "3 items matching “ENCRYPT”."
    assert "Page 3 of 2" in past
    past = await (await client.get(f"/rfps/{rfp_id}?state=approved&page=2")).text()
    assert 'id="past-the-end"' in past and "Page 2 of 3" not in past  # 1 approved, not 6 items

    # With the state filter and "Assigned to me": the form keeps them as hidden fields.
    both = await (await client.get(f"/rfps/{rfp_id}?state=review&assignee=me&q=encrypt")).text()
    assert shown(both, ids) == [ids[0], ids[4]]
    assert said(both, "search-count") == "2 items matching “encrypt” in this filter."
    assert '<input type="hidden" name="state" value="review">' in both
    assert '<input type="hidden" name="assignee" value="me">' in both
    assert 'href="?state=review&amp;assignee=me" id="clear-search"' in both
    # A term's wildcards are literal, and the term is only ever matched in this RFP.
    percent = await (await client.get(f"/rfps/{rfp_id}?q=100%25")).text()
    assert shown(percent, ids) == [ids[5]]
    none = await client.get(f"/rfps/{rfp_id}?q=everything")
    assert none.status == 200 and said(await none.text(), "no-match") == "No items match “everything”."
    assert (await client.get(f"/rfps/{theirs}?q=encrypt")).status == 404

    # Too short or too long: said beside the box, the page kept (not the error page).
    for term, words in (("ab", "Type at least 3 letters or digits in a row"),
                        ("x" * 201, "The search term is too long: at most 200 characters"
                                    " (this one has 201)")):
        response = await client.get(f"/rfps/{rfp_id}", params={"q": term, "state": "review"})
        page = await response.text()
        assert response.status == 400 and said(page, "search-problem").startswith(words), term
        assert not shown(page, ids) and 'id="item-search"' in page and "Acme" in page


async def test_bulk_approve__approves_each_as_one_approval_and_counts_what_it_skipped(
    app_client, admin, make_rfp, conn,
):
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, [*QUESTIONS, ("Set aside?", "discarded", "Old.", 0.9),
                                         ("Blank?", "needs_input", "  ", 0.1)])
    await conn.execute(
        "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret) VALUES"
        " ('whep_bulk', $1, 'https://hooks.example.com/in',"
        " '{rfp_item.approved,rfp.approved}', 'whsec_AAAA')", admin.account_id)
    csrf = await sign_in(app_client, admin.email)

    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    # Offered: the answered items not yet approved (not the approved, pending, discarded or blank).
    assert picks(page) == [ids[0], ids[1], ids[2], ids[4]]
    assert band_button(page) == "Approve all 3 auto-answer items"  # 0.85 and up, no attention asked

    # One item approved alone (and saved to the knowledge base), as the page's button does it.
    alone = await app_client.post(f"/rfps/{rfp_id}/items/{ids[0]}", allow_redirects=False, data={
        "csrf_token": csrf, "action": "save_to_kb", "answer": "Yes, with AES-256.", "back": "?page=1"})
    assert alone.status == 303
    # The rest in one go, every item ticked: the approved, pending, discarded and blank ones skipped.
    response = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("back", "?state=review&page=1"), ("scope", "selected"),
        ("save_to_kb", "1"), seen(page),
        *(("item", item_id) for item_id in [*ids[1:], ids[0], "item_nope", "item_\x00", "x" * 5000])])
    assert response.status == 303
    assert response.headers["Location"] == f"/rfps/{rfp_id}?state=review&page=1&bulk=3,2,2,1,3,0#bulk-done"
    page = await (await app_client.get(response.headers["Location"])).text()
    # An id no item has (a NUL byte, 5,000 characters: a 500 before) is skipped as gone.
    assert said(page, "bulk-done") == ("Approved 3 items. Skipped 8: 2 already approved, 2 without an"
                                       " answer, 1 discarded, 3 no longer in this RFP.")
    states = dict(await conn.fetch("SELECT id, state::text FROM rfp_items WHERE rfp_id = $1", rfp_id))
    assert [states[i] for i in ids] == ["approved"] * 5 + ["pending", "discarded", "needs_input"]

    # Each approved in bulk has what the one approved alone has: the same audit events, webhook
    # events and knowledge-base entry (source and external id), the RFP approved once with the last.
    async def trail(item_id: str) -> dict[str, Any]:
        actions = sorted(r["action"] for r in await conn.fetch(
            "SELECT action FROM audit_events WHERE record_id = $1", item_id))
        updated = await conn.fetchrow("SELECT before, after FROM audit_events WHERE record_id = $1"
                                      " AND action = 'rfp_item.updated'", item_id)
        changed = {k for k in json.loads(updated["after"]) if json.loads(updated["before"]).get(k)
                   != json.loads(updated["after"])[k]}
        hooks = [json.loads(r["body"]) for r in await conn.fetch(
            "SELECT body FROM webhook_events WHERE record_id = $1", item_id)]
        entry = await conn.fetchrow(
            "SELECT k.source, k.external_id, k.question, k.answer FROM rfp_items i"
            " JOIN knowledge_items k ON k.id = i.knowledge_item_id WHERE i.id = $1", item_id)
        question, answer = await conn.fetchrow("SELECT question, answer FROM rfp_items WHERE id = $1",
                                               item_id)
        return {"actions": actions, "changed": changed,
                "hooks": [(h["type"], h["data"]["id"], h["data"]["state"]) for h in hooks],
                "entry": (entry["source"], entry["external_id"], entry["question"] == question,
                          entry["answer"] == answer)}

    expected = await trail(ids[0])
    assert expected["actions"] == ["rfp_item.approved", "rfp_item.updated"]
    assert expected["changed"] == {"state", "knowledge_item_id"}
    assert expected["hooks"] == [("rfp_item.approved", ids[0], "approved")]
    for item_id in (ids[1], ids[2], ids[4]):
        got = await trail(item_id)
        assert got["actions"] == expected["actions"] and got["changed"] == expected["changed"]
        assert got["hooks"] == [("rfp_item.approved", item_id, "approved")]
        assert got["entry"] == (f"rfp:{rfp_id}", f"rfp_item:{item_id}", True, True)
    assert await conn.fetchval("SELECT count(*) FROM audit_events WHERE action = 'rfp.approved'") == 0
    # The RFP is approved with its last item (the pending one answered and approved, the blank one
    # discarded): once, by the bulk approval.
    await conn.execute("UPDATE rfp_items SET answer = 'Yes.', state = 'auto_answered' WHERE id = $1", ids[5])
    await conn.execute("UPDATE rfp_items SET state = 'discarded' WHERE id = $1", ids[7])
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    last = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("scope", "selected"), ("item", ids[5]), seen(page)])
    assert last.headers["Location"] == f"/rfps/{rfp_id}?bulk=1,0,0,0,0,0#bulk-done"
    assert await conn.fetchval("SELECT count(*) FROM audit_events WHERE action = 'rfp.approved'") == 1
    assert await conn.fetchval("SELECT count(*) FROM webhook_events WHERE type = 'rfp.approved'") == 1
    assert await conn.fetchval("SELECT knowledge_item_id FROM rfp_items WHERE id = $1", ids[5]) is None


async def test_bulk_approve__the_band_approves_the_filters_items_across_the_rfp_100_at_a_time(
    aiohttp_client, config, admin, make_member, make_rfp, conn,
):
    """Before: "Approve all N auto-answer items on this page" approved the ids the page listed,
    one page's worth: 400 such items of a 600-item RFP were a reviewer paging through six pages.
    Now the server chooses them, by the page's filters, across the RFP, 100 a press."""
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, web={"items_per_page": 10})))
    writer = await make_member(admin.account_id, "member")
    await set_password(conn, writer.email)
    rfp_id = await make_rfp(admin, "Acme")
    rows: list[Row] = []
    for n in range(1, 261):
        question = f"Question {n} about {'encryption' if n % 2 == 0 else 'backups'}?"
        if n % 10 == 3:
            rows.append((question, "needs_input", "Partly.", 0.6))  # the review band
        elif n % 10 == 7:
            rows.append((question, "auto_answered", "\u3000\u00a0", 0.9))  # blank to str.strip()
        elif n == 1:
            rows.append((question, "approved", "Yes.", 0.9))
        elif n == 4:
            rows.append((question, "pending", None, None))
        elif n == 6:
            rows.append((question, "discarded", "Yes.", 0.9))
        else:
            # Item 2's answer opens with spaces: not blank for all that.
            rows.append((question, "auto_answered" if n % 4 else "needs_input",
                         "\n Yes." if n == 2 else "Yes.", 0.9))
    ids = await add_items(conn, rfp_id, rows)
    # One answer that asks for attention: never in the band, whatever its confidence.
    await conn.execute(
        "INSERT INTO questions (id, account_id, user_id, question, state, requires_attention)"
        " VALUES ('q_attention', $1, $2, 'Question 9?', 'complete', true)", admin.account_id,
        admin.user_id)
    await conn.execute("UPDATE rfp_items SET question_id = 'q_attention' WHERE id = $1", ids[8])
    band = [item_id for n, item_id in enumerate(ids, 1)
            if n % 10 not in (3, 7) and n not in (1, 4, 6, 9)]
    assert len(band) == 204
    csrf = await sign_in(client, writer.email)

    async def approved() -> set[str]:
        return {r["id"] for r in await conn.fetch(
            "SELECT id FROM rfp_items WHERE rfp_id = $1 AND state = 'approved'", rfp_id)} - {ids[0]}

    async def press(page: str, *extra: tuple[str, str]) -> str:
        response = await client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
            ("csrf_token", csrf), ("scope", "band"), *band_form(page), *extra])
        assert response.status == 303, await response.text()
        return response.headers["Location"]

    # The first 100 of the RFP's 204, in questionnaire order, from page 1 of 26; an item the page
    # shows but that changed after it was shown (another reviewer's edit) is left for the next.
    page = await (await client.get(f"/rfps/{rfp_id}")).text()
    assert band_button(page) == "Approve the first 100 of 204 auto-answer items"
    await conn.execute("UPDATE rfp_items SET answer = 'Yes, edited.', updated_at = now() WHERE id = $1",
                       band[5])
    # The ids a form might list are not read: only the server's choice counts.
    location = await press(page, ("band_item", ids[2]), ("item", ids[2]))
    assert location == f"/rfps/{rfp_id}?page=1&bulk=100,0,0,0,0,0&bulk_band=1#bulk-done"
    assert await approved() == set(band[:5] + band[6:101])
    page = await (await client.get(location)).text()
    assert said(page, "bulk-done") == "Approved 100 items. 104 auto-answer items are left to approve."
    assert band_button(page) == "Approve the next 100 (104 left)"
    location = await press(page)
    assert "bulk=100,0,0,0,0,0&bulk_band=1#" in location
    page = await (await client.get(location)).text()
    assert said(page, "bulk-done") == "Approved 100 items. 4 auto-answer items are left to approve."
    assert band_button(page) == "Approve the last 4"
    page = await (await client.get(f"/rfps/{rfp_id}")).text()  # not after a press: no "last"
    assert band_button(page) == "Approve all 4 auto-answer items"
    await press(page)
    assert await approved() == set(band)
    page = await (await client.get(f"/rfps/{rfp_id}")).text()
    assert 'id="approve-band"' not in page

    # Under the filters and the search: only the items they pass, of every page.
    await conn.execute("UPDATE rfp_items SET state = CASE WHEN position % 4 = 0 THEN 'needs_input'"
                       " ELSE 'auto_answered' END::rfp_item_state WHERE id = ANY($1::text[])", band)
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = ANY($1::text[])",
                       band[::3], writer.user_id)
    query = "?state=review&assignee=me&q=ENCRYPTION"
    page = await (await client.get(f"/rfps/{rfp_id}{query}")).text()
    passing = [i for n, i in enumerate(ids, 1) if i in band[::3] and n % 2 == 0 and n % 4]
    assert band_button(page) == (f"Approve all {len(passing)} auto-answer items matching this search"
                                 " in this filter")
    location = await press(page)
    assert location.startswith(f"/rfps/{rfp_id}{query}&page=1&bulk={len(passing)},0,0,0,0,0&bulk_band=1")
    assert await approved() == set(passing)
    page = await (await client.get(location)).text()
    assert said(page, "bulk-done") == (f"Approved {len(passing)} items. No auto-answer item matching this"
                                       " search in this filter is left to approve.")
    assert 'id="approve-band"' not in page

    # A filter the page would refuse is refused in words, nothing approved; so is a form without
    # the page's time.
    seen = ("seen", "2026-01-01T00:00:00+00:00")
    for extra, words in (((("state", "open"), seen), "The filter must be Needs input"),
                         ((("q", "ab"), seen), "Type at least 3"),
                         ((("assignee", "7"), seen), "The filter must be Assigned to me"),
                         ((("seen", "yesterday"),), "reload the page")):
        refused = await client.post(f"/rfps/{rfp_id}/approve", data=[
            ("csrf_token", csrf), ("scope", "band"), *extra])
        assert refused.status == 422 and words in unescape(await refused.text()), extra
    assert await approved() == set(passing)


async def test_bulk_approve__refused_to_a_viewer_past_the_cap_without_csrf_or_a_choice(
    app_client, admin, make_member, make_rfp, conn,
):
    viewer = await make_member(admin.account_id, "viewer")
    await set_password(conn, admin.email)
    await set_password(conn, viewer.email)
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, [(f"Question {n}?", "auto_answered", "Yes.", 0.9)
                                         for n in range(1, 102)])
    csrf = await sign_in(app_client, admin.email)

    # Past the cap: 422 naming it, nothing approved.
    many = await app_client.post(f"/rfps/{rfp_id}/approve", data=[
        ("csrf_token", csrf), ("scope", "selected"), *(("item", i) for i in ids)])
    assert many.status == 422
    assert "At most 100 items can be approved at once; 101 were chosen." in unescape(await many.text())
    nothing = await app_client.post(f"/rfps/{rfp_id}/approve", data={"csrf_token": csrf, "scope": "selected"})
    assert nothing.status == 422 and "Tick the items to approve first" in await nothing.text()
    forged = await app_client.post(f"/rfps/{rfp_id}/approve", data={"scope": "selected", "item": ids[0]})
    assert forged.status == 403
    band = band_form(await (await app_client.get(f"/rfps/{rfp_id}")).text())
    forged = await app_client.post(f"/rfps/{rfp_id}/approve", data=[("scope", "band"), *band])
    assert forged.status == 403
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE state = 'approved'") == 0

    await app_client.post("/signout", data={"csrf_token": csrf})
    csrf = await sign_in(app_client, viewer.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert not picks(page) and 'id="bulk"' not in page and "/approve" not in page
    refused = await app_client.post(f"/rfps/{rfp_id}/approve",
                                    data={"csrf_token": csrf, "scope": "selected", "item": ids[0]})
    assert refused.status == 403
    refused = await app_client.post(f"/rfps/{rfp_id}/approve",
                                    data=[("csrf_token", csrf), ("scope", "band"), *band])
    assert refused.status == 403
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE state = 'approved'") == 0


async def test_rfp_page__rough_edges(app_client, admin, make_member, make_rfp, conn):
    viewer = await make_member(admin.account_id, "viewer")
    await set_password(conn, admin.email)
    await set_password(conn, viewer.email)
    empty = await make_rfp(admin, "Empty")
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, [("Kept?", "auto_answered", "Yes.", 0.9),
                                         ("Set aside?", "discarded", "No.", 0.9)])
    csrf = await sign_in(app_client, admin.email)

    # An RFP without items: nothing to answer or export, the upload offered.
    page = await (await app_client.get(f"/rfps/{empty}")).text()
    assert "answer-all" not in page and "export-csv" not in page and "/export" not in page
    assert f'action="/rfps/{empty}/import"' in page and "Upload a questionnaire to add them." in page
    # Nor anything to filter or search: the filters' links and the search box, over no item at all.
    assert 'aria-label="Filter items"' not in page and 'id="item-search"' not in page
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert 'id="answer-all"' in page and 'id="export-csv"' in page
    assert 'aria-label="Filter items"' in page and 'id="item-search"' in page
    # "Approve selected" says what it approves: the boxes beside the items, unexplained before
    # (pressed with none ticked, an error page).
    assert 'id="approve-selected" aria-describedby="bulk-hint">' in page
    assert 'id="bulk-hint">(tick the box beside each item to approve; at most 100 at once)' in page
    # A discarded item shows no band (its draft is set aside); the kept one shows its band.
    kept, discarded = (page.split(f'id="item-{i}"', 1)[1].split("</header>", 1)[0] for i in ids)
    assert 'class="band band-auto_answer"' in kept and 'class="band' not in discarded
    # Refusals say the field in words, not the API's name.
    refused = await app_client.post(f"/rfps/{rfp_id}/items/{ids[0]}",
                                    data={"csrf_token": csrf, "action": "approve", "answer": " "})
    text = unescape(await refused.text())
    assert refused.status == 422 and "The answer: an item needs an answer before it can be approved" in text
    assert "rfp_item." not in text
    bad = await app_client.post(f"/rfps/{rfp_id}/items/{ids[0]}", data={"csrf_token": csrf, "action": "x"})
    assert bad.status == 422 and "action:" not in unescape(await bad.text())
    state = await app_client.get(f"/rfps/{rfp_id}?state=open")
    assert state.status == 400
    assert "The filter must be Needs input, Review or Approved" in await state.text()
    # ?bulk= is the page's own (approve redirects there): a count that is no ASCII number is
    # ignored, where a '²' (a digit to str.isdigit, not to int()) was a 500.
    for counts in ("²,0,0,0,0", "٣,0,0,0,0"):
        odd = await app_client.get(f"/rfps/{rfp_id}", params={"bulk": counts})
        assert odd.status == 200 and 'id="bulk-done"' not in await odd.text(), counts

    # A viewer is never assigned: no "Assigned to me" (nor "Anyone's").
    await app_client.post("/signout", data={"csrf_token": csrf})
    await sign_in(app_client, viewer.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert "assigned-to-me" not in page and "assigned-to-anyone" not in page
    assert 'id="item-search"' in page


async def test_rfp_page__offers_the_export_into_the_imported_file_only_when_one_is_kept(
    app_client, admin, make_rfp, conn
):
    """An RFP whose items were added by hand (the API) offered "Export into the imported file",
    whose link was an error page ("Please correct the form … format: original needs the
    questionnaire imported … library.max_kept_file_bytes"). It is offered once a questionnaire
    is imported and kept; CSV and XLSX always."""
    rfp_id = await make_rfp(admin, "By hand")
    await add_items(conn, rfp_id, [("Kept?", "auto_answered", "Yes.", 0.9)])
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert 'id="export-csv"' in page and 'id="export-xlsx"' in page
    assert 'id="export-original"' not in page
    form = FormData()
    form.add_field("csrf_token", csrf)
    form.add_field("file", b"Question,Answer\nWho?,\n", filename="q.csv", content_type="text/csv")
    assert (await app_client.post(f"/rfps/{rfp_id}/import", data=form)).status == 200  # (303)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert 'id="export-original"' in page
    exported = await app_client.get(f"/rfps/{rfp_id}/export?format=original")
    assert exported.status == 200


async def test_bulk_approve__an_item_that_cannot_be_approved_stops_the_run_and_the_page_says_what_was(
    app_client, admin, make_rfp, conn,
):
    """Before: the third item's failure was the error page alone (422), where the first two were
    approved (each in its own transaction), their events and webhooks written: the reviewer could
    not tell. Now the page comes back saying both, and that the rest were not approved."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    # A draft longer than an answer may be (100,000 characters): the local engine's high detail
    # joins the entry's answer and two more entries' (each up to 100,000).
    ids = await add_items(conn, rfp_id, [
        ("One?", "auto_answered", "Yes.", 0.9), ("Two?", "auto_answered", "Yes.", 0.9),
        ("Three?", "auto_answered", "Yes. " + "x" * 100_000, 0.9),
        ("Four?", "auto_answered", "Yes.", 0.9), ("Five?", "auto_answered", "Yes.", 0.9)])
    csrf = await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    response = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("back", "?page=1"), ("scope", "selected"), *(("item", i) for i in ids),
        seen(page)])
    assert response.status == 303
    assert response.headers["Location"] == (
        f"/rfps/{rfp_id}?page=1&bulk=2,0,0,0,0,0&bulk_stop={ids[2]}&bulk_why=invalid&bulk_left=2#bulk-done")
    page = await (await app_client.get(response.headers["Location"])).text()
    assert said(page, "bulk-done") == "Approved 2 items."
    stopped = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", said(page, "bulk-stopped")))
    assert stopped == (
        "Item 3 cannot be approved as it stands: The answer: must be at most 100000 characters."
        " Open it alone to correct it (or discard it). It and the 2 items chosen after it were not"
        " approved; the others can be approved again. Open the item")
    assert f'href="?item={ids[2]}" id="bulk-stopped-item"' in page
    states = dict(await conn.fetch("SELECT id, state::text FROM rfp_items WHERE rfp_id = $1", rfp_id))
    assert [states[i] for i in ids] == ["approved"] * 2 + ["auto_answered"] * 3
    # The audit and the webhooks follow each item, as before: the two approved, nothing else.
    approvals = await conn.fetch("SELECT record_id FROM audit_events WHERE action = 'rfp_item.approved'")
    assert sorted(r["record_id"] for r in approvals) == ids[:2]

    # The page offers neither button that item, so a press approves the others. Before, the
    # band's button chose it first on every press, stopped there each time and approved nothing.
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert picks(page) == [ids[3], ids[4]]
    assert band_button(page) == "Approve all 2 auto-answer items"
    response = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("scope", "band"), *band_form(page)])
    assert response.headers["Location"].endswith("bulk=2,0,0,0,0,0&bulk_band=1#bulk-done")
    page = await (await app_client.get(response.headers["Location"])).text()
    assert said(page, "bulk-done") == "Approved 2 items. No auto-answer item is left to approve."
    states = dict(await conn.fetch("SELECT id, state::text FROM rfp_items WHERE rfp_id = $1", rfp_id))
    assert [states[i] for i in ids] == ["approved"] * 2 + ["auto_answered"] + ["approved"] * 2


async def test_bulk_approve__a_deadlock_partway_says_what_was_approved_before_it(
    app_client, admin, make_rfp, conn,
):
    """A transaction conflict at the fourth item (PostgreSQL breaks a deadlock by rolling the
    approval's transaction back): the first three stay approved, the page says so and that the
    fourth and fifth were not, where the reviewer saw only a 503 page."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, [(f"Q{n}?", "auto_answered", "Yes.", 0.9) for n in range(1, 6)])
    csrf = await sign_in(app_client, admin.email)
    page_time = seen(await (await app_client.get(f"/rfps/{rfp_id}")).text())
    # This session never breaks the deadlock itself: the approval's backend, waiting first, does.
    await conn.execute("SET deadlock_timeout = '60s'")
    async with conn.transaction():
        await conn.execute("SELECT 1 FROM rfp_items WHERE id = $1 FOR UPDATE", ids[3])
        posting = asyncio.create_task(app_client.post(
            f"/rfps/{rfp_id}/approve", allow_redirects=False,
            data=[("csrf_token", csrf), ("scope", "selected"), *(("item", i) for i in ids), page_time]))
        await lock_waiters(conn, 1)  # the approval holds the RFP and waits for the fourth item
        await conn.execute("SELECT 1 FROM rfps WHERE id = $1 FOR NO KEY UPDATE", rfp_id)
        response = await posting
    assert response.status == 303
    assert response.headers["Location"] == (
        f"/rfps/{rfp_id}?bulk=3,0,0,0,0,0&bulk_stop={ids[3]}&bulk_why=conflict&bulk_left=1#bulk-done")
    page = await (await app_client.get(response.headers["Location"])).text()
    assert said(page, "bulk-done") == "Approved 3 items."
    assert re.sub(r"<[^>]+>", "", said(page, "bulk-stopped")) == (
        "Approving item 4 conflicted with another change made at the same moment and was rolled back."
        " It and the 1 item chosen after it were not approved: approve them again. Open the item")
    states = dict(await conn.fetch("SELECT id, state::text FROM rfp_items WHERE rfp_id = $1", rfp_id))
    assert [states[i] for i in ids] == ["approved"] * 3 + ["auto_answered"] * 2


def test_blank__is_what_str_strip_takes():
    """auto_answer_items counts a blank answer as the approval skips it (str.strip()): an answer
    of a space PostgreSQL's btrim() keeps was counted forever as left to approve."""
    assert BLANK == "".join(chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace())
