"""What a screen reader gets from the pages, read off their HTML: a walk through the web app with
Chromium's accessibility tree (helper-90) found a page of 100 items offering 100 buttons named
"Approve", 100 "Save", 100 "Discard", 100 "Assign" and 100 text boxes named "Answer": listed out
of context (a screen reader's list of buttons or form fields, a voice command) none said which
item it acts on. The members page's "Change role" and the care page's "Mark reviewed" were alike."""

from __future__ import annotations

import re
from collections import Counter
from html import unescape

from helpers_items import add_items

# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, set_password, sign_in  # noqa: F401


def _text(fragment: str) -> str:
    """A fragment's text as an accessible name is computed: tags dropped, spaces collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def button_names(page: str) -> list[str]:
    names = []
    for attributes, inside in re.findall(r"<button([^>]*)>(.*?)</button>", page, re.S):
        label = re.search(r'aria-label="([^"]*)"', attributes)
        names.append(unescape(label.group(1)) if label else _text(inside))
    return names


def label_names(page: str) -> list[str]:
    return [_text(inside) for inside in re.findall(r"<label[^>]*>(.*?)</label>", page, re.S)]


def link_names(page: str) -> list[str]:
    return [_text(inside) for inside in re.findall(r"<a [^>]*>(.*?)</a>", page, re.S)]


def repeated(names: list[str]) -> dict[str, int]:
    return {name: n for name, n in Counter(names).items() if n > 1}


async def test_rfp_page__each_item_s_controls_say_which_item_they_act_on(
    app_client, admin, make_rfp, conn, config,
):
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await add_items(conn, rfp_id, (1, None, "auto_answered"), (2, None, "needs_input"),
                    (3, None, "approved"), (4, None, "discarded"))
    long_one = "x" * (config.web.item_chars_shown + 1)
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, confidence)"
        " VALUES ('item_long', $1, 'Long?', 5, 'auto_answered', $2, 0.9),"
        "        ('item_long2', $1, 'Longer?', 6, 'auto_answered', $2, 0.9)", rfp_id, long_one)
    await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()

    buttons = button_names(page)
    assert repeated(buttons) == {}, buttons
    for name in ("Save (item 1)", "Approve (item 1)", "Approve and save to knowledge base (item 1)",
                 "Reopen (item 1)", "Discard (item 1)", "Assign (item 1)", "Save to knowledge base (item 3)",
                 "Reopen (item 4)", "Assign (item 6)"):
        assert name in buttons, buttons
    labels = label_names(page)
    assert repeated(labels) == {}, labels
    assert {"Answer (item 2)", "Assigned to (item 2)", "Select item 2 to approve"} <= set(labels)
    links = link_names(page)
    assert repeated([name for name in links if "item" in name]) == {}, links
    assert "Review this item alone, whole (item 6)" in links
    # The words added are for the ear: on the screen the buttons still read "Approve", "Save".
    assert '>Approve<span class="visually-hidden"> (item 1)</span></button>' in page

    alone = await (await app_client.get(f"/rfps/{rfp_id}/items/item_long/assign")).text()
    assert "Assign (item 5)" in button_names(alone) and "Assigned to (item 5)" in label_names(alone)


async def test_members_and_care_pages__row_buttons_name_their_row(
    app_client, admin, make_member, conn,
):
    await set_password(conn, admin.email)
    first = await make_member(admin.account_id, "member")
    second = await make_member(admin.account_id, "viewer")
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer, title, review_by) VALUES"
        " ('kb_r1', $1, 'Backups?', 'Nightly.', 'Backup policy', current_date - 2),"
        " ('kb_r2', $1, 'Do you keep logs?', 'For 30 days.', NULL, current_date - 1)",
        admin.account_id)
    await sign_in(app_client, admin.email)

    members = button_names(await (await app_client.get("/members")).text())
    assert repeated(members) == {}, members
    assert f"Change role of {first.email}" in members and f"Change role of {second.email}" in members

    care = button_names(await (await app_client.get("/kb/care")).text())
    assert repeated(care) == {}, care
    assert {"Mark reviewed: Backup policy", "Mark reviewed: Do you keep logs?"} <= set(care)


async def test_import_reports__the_title_says_which_import_and_a_heading_names_the_rows_left_out(
    app_client, admin, make_rfp, conn,
):
    """The knowledge base's import report was titled "Import report" alone (among tabs, or read
    first by a screen reader, of what?), and its table of rejected rows had no heading, where the
    questionnaire's report says "Import report · {the RFP}" and heads its table "Skipped rows"."""
    from aiohttp import FormData

    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    form = FormData()
    form.add_field("csrf_token", csrf)
    form.add_field("file", b"question,answer\nIs there a DPO?,Yes.\nNo answer here,\n", filename="kb.csv")
    page = await (await app_client.post("/kb/import", data=form)).text()
    assert "<title>Import report · Knowledge base · RFP response</title>" in page
    assert re.findall(r"<h(\d)>([^<]*)</h\1>", page) == [("1", "CSV imported"), ("2", "Rejected rows")]

    rfp_id = await make_rfp(admin, "Acme")
    form = FormData()
    form.add_field("csrf_token", csrf)
    form.add_field("file", b"Question,Answer\nDo you encrypt backups?,\n,\n", filename="q.csv")
    page = await (await app_client.post(f"/rfps/{rfp_id}/import", data=form)).text()
    assert "<title>Import report · Acme · RFP response</title>" in page
