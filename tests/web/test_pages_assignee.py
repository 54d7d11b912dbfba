"""The RFP page's assignees: each item's assignee, the writers' select to assign or unassign it,
the "Assigned to me" filter, and the assignee's e-mail linking to the item alone."""

from __future__ import annotations

import re
from html import escape, unescape
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

from conftest import mail_settings, with_config

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password, sign_in  # noqa: F401

from service.web.app import create_app


async def items(conn: Any, rfp_id: str, count: int) -> list[str]:
    ids = [f"item_{rfp_id[-6:]}_{n}" for n in range(1, count + 1)]
    await conn.executemany("INSERT INTO rfp_items (id, rfp_id, question, position) VALUES ($1, $2, $3, $4)",
                           [(item_id, rfp_id, f"Question {n}?", n) for n, item_id in enumerate(ids, 1)])
    return ids


def select_of(page: str, item_id: str) -> str:
    found = re.search(rf'<select id="as-{item_id}" name="assignee_id">(.*?)</select>', page, re.S)
    assert found, f"no assignee select for {item_id}"
    return found.group(1)


def assignable_of(page: str) -> str:
    """The page's one list of the account's writers, which app.js puts in an item's select."""
    found = re.search(r'<template id="assignable">(.*?)</template>', page, re.S)
    assert found, "no list of writers"
    return found.group(1)


async def test_rfp_page__writers_assign_and_unassign_an_item_with_the_select(
    app_client, admin, make_member, make_rfp, conn,
):
    writer = await make_member(admin.account_id, "member")
    viewer = await make_member(admin.account_id, "viewer")
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    first, second = await items(conn, rfp_id, 2)
    csrf = await sign_in(app_client, admin.email)

    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    options = select_of(page, first)
    # Nobody selected yet; the item offers nobody, you and someone else, and the page lists the
    # account's writers once (app.js puts them in the select); never a viewer.
    assert '<option value="">nobody</option>' in options and " selected" not in options
    assert f'<option value="{admin.user_id}">' in options and '<option value="choose">' in options
    listed = assignable_of(page)
    assert f'<option value="{admin.user_id}">' in listed and f'<option value="{writer.user_id}">' in listed
    assert f'value="{viewer.user_id}"' not in options + listed
    assert f'action="/rfps/{rfp_id}/items/{first}/assign"' in page

    forged = await app_client.post(f"/rfps/{rfp_id}/items/{first}/assign",
                                   data={"assignee_id": str(writer.user_id)}, allow_redirects=False)
    assert forged.status == 403
    assigned = await app_client.post(
        f"/rfps/{rfp_id}/items/{first}/assign", allow_redirects=False,
        data={"csrf_token": csrf, "assignee_id": str(writer.user_id), "back": "?state=review&page=1"})
    assert assigned.status == 303
    assert assigned.headers["Location"] == (f"/rfps/{rfp_id}?state=review&page=1"
                                            f"&done=assign&done_item={first}#item-{first}")
    assert await conn.fetchval("SELECT assignee_id FROM rfp_items WHERE id = $1", first) == writer.user_id
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert f'<option value="{writer.user_id}" selected>' in select_of(page, first)
    assert " selected" not in select_of(page, second)

    refused = await app_client.post(f"/rfps/{rfp_id}/items/{second}/assign",
                                    data={"csrf_token": csrf, "assignee_id": str(viewer.user_id)})
    text = unescape(await refused.text())
    # Said without the user's id (the API's caller sent it; the page's select named a person).
    assert refused.status == 422 and "The assignee: the member chosen can no longer be assigned" in text
    assert f"user {viewer.user_id}" not in text and "reload the page" in text
    malformed = await app_client.post(f"/rfps/{rfp_id}/items/{second}/assign",
                                      data={"csrf_token": csrf, "assignee_id": "me"})
    # Said in words, not with the API's field name (assignee_id).
    text = unescape(await malformed.text())
    assert malformed.status == 422 and "The assignee must be one of the members listed" in text
    assert "assignee_id" not in text

    unassigned = await app_client.post(f"/rfps/{rfp_id}/items/{first}/assign", allow_redirects=False,
                                       data={"csrf_token": csrf, "assignee_id": ""})
    assert unassigned.status == 303
    assert await conn.fetchval("SELECT assignee_id FROM rfp_items WHERE id = $1", first) is None


async def test_rfp_page__a_viewer_sees_the_assignee_and_no_select(
    app_client, admin, make_member, make_rfp, conn,
):
    viewer = await make_member(admin.account_id, "viewer")
    await set_password(conn, viewer.email)
    rfp_id = await make_rfp(admin, "Acme")
    first, _ = await items(conn, rfp_id, 2)
    await conn.execute("UPDATE users SET first_name = 'Grace', last_name = 'Hopper' WHERE id = $1",
                       admin.user_id)
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = $1", first, admin.user_id)
    await sign_in(app_client, viewer.email)

    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert '<p class="assignee">Assigned to Grace Hopper</p>' in page
    assert page.count('class="assignee"') == 1
    assert "<select" not in page and "/assign" not in page


async def test_rfp_page__assigned_to_me_shows_only_mine_and_keeps_the_filter(
    aiohttp_client, config, admin, make_member, make_rfp, conn,
):
    writer = await make_member(admin.account_id, "member")
    await set_password(conn, writer.email)
    # Two items a page, so that the pager and the forms' way back show the filter kept.
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, web={"items_per_page": 2})))
    rfp_id = await make_rfp(admin, "Acme")
    ids = await items(conn, rfp_id, 5)
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = ANY($1::text[])",
                       [ids[0], ids[2], ids[4]], writer.user_id)
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = $1", ids[1], admin.user_id)
    await sign_in(client, writer.email)

    everything = await (await client.get(f"/rfps/{rfp_id}")).text()
    assert 'href="?assignee=me" id="assigned-to-me"' in everything
    mine = await (await client.get(f"/rfps/{rfp_id}?assignee=me")).text()
    assert 'id="assigned-to-me" aria-current="true"' in mine
    assert [i for i in ids if f'id="item-{i}"' in mine] == [ids[0], ids[2]]
    assert 'href="?assignee=me&amp;page=2"' in mine
    assert field(mine, "back") == "?assignee=me&amp;page=1"
    rest = await (await client.get(f"/rfps/{rfp_id}?assignee=me&page=2")).text()
    assert [i for i in ids if f'id="item-{i}"' in rest] == [ids[4]]
    both = await (await client.get(f"/rfps/{rfp_id}?assignee=me&state=approved")).text()
    assert "No items in this filter." in both

    bad = await client.get(f"/rfps/{rfp_id}?assignee=someone")
    assert bad.status == 400 and "The filter must be Assigned to me or Anyone&#39;s" in await bad.text()
    # The item alone stays whole and alone, whatever the filter.
    alone = await (await client.get(f"/rfps/{rfp_id}?item={ids[1]}&assignee=me")).text()
    assert [i for i in ids if f'id="item-{i}"' in alone] == [ids[1]]


async def test_assign_form__mails_the_assignee_a_link_that_opens_the_item_alone(
    aiohttp_client, config, admin, make_member, make_rfp, conn, smtp,
):
    writer = await make_member(admin.account_id, "member")
    await set_password(conn, admin.email)
    await set_password(conn, writer.email)
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, mail=mail_settings(smtp.port))))
    rfp_id = await make_rfp(admin, "Acme security review")
    first, second = await items(conn, rfp_id, 2)
    csrf = await sign_in(client, admin.email)
    assigned = await client.post(f"/rfps/{rfp_id}/items/{second}/assign", allow_redirects=False,
                                 data={"csrf_token": csrf, "assignee_id": str(writer.user_id)})
    assert assigned.status == 303

    [message] = await smtp.wait_for(1)
    assert message["To"] == writer.email
    assert message["Subject"] == "Assigned to you: item 2 of Acme security review"
    link = f"http://localhost/rfps/{rfp_id}?item={second}"
    assert link in message.get_content()

    await client.post("/signout", data={"csrf_token": csrf})
    await sign_in(client, writer.email)
    alone = await (await client.get(link.removeprefix("http://localhost"))).text()
    assert f'id="item-{second}"' in alone and f'id="item-{first}"' not in alone
    assert f'<option value="{writer.user_id}" selected>' in select_of(alone, second)


class Links(HTMLParser):
    """Every link on a page (href, id) and every form's way back (its action, its `back`)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str | None]] = []
        self.backs: list[tuple[str, str]] = []
        self._action = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            self.links.append((found["href"] or "", found.get("id")))
        elif tag == "form":
            self._action = found.get("action") or ""
        elif tag == "input" and found.get("name") == "back":
            self.backs.append((self._action, found.get("value") or ""))


def links_of(page: str) -> Links:
    parser = Links()
    parser.feed(page)
    return parser


def query_of(rfp_id: str, href: str) -> dict[str, list[str]] | None:
    """The query of a link to the RFP page itself ("?…" or "/rfps/{id}…"); None for another page."""
    parts = urlsplit(href)
    if href.startswith("#") or parts.path not in ("", f"/rfps/{rfp_id}"):
        return None
    return parse_qs(parts.query)


async def test_rfp_page__every_link_and_way_back_keeps_assigned_to_me(
    aiohttp_client, config, admin, make_member, make_rfp, conn,
):
    """Walks the page's links (state filters, pager, the item alone and its way back) and its
    forms' ways back: each keeps ?assignee=me, but the one link that leaves it."""
    writer = await make_member(admin.account_id, "member")
    await set_password(conn, writer.email)
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"},
        web={"items_per_page": 2, "item_chars_shown": 40})))
    rfp_id = await make_rfp(admin, "Acme")
    ids = await items(conn, rfp_id, 6)
    await conn.execute("UPDATE rfp_items SET state = 'auto_answered', answer = 'Yes.',"
                       " assignee_id = $2 WHERE id = ANY($1::text[])", ids[:5], writer.user_id)
    # One of the writer's items too long to show: it has the link to the item alone.
    await conn.execute("UPDATE rfp_items SET question = repeat('Long question? ', 10) WHERE id = $1",
                       ids[3])
    csrf = await sign_in(client, writer.email)

    start = f"/rfps/{rfp_id}?state=review&assignee=me&page=2"
    page = await (await client.get(start)).text()
    found = links_of(page)
    walked = 0
    for href, link_id in found.links:
        query = query_of(rfp_id, unescape(href))
        if query is None:
            continue
        walked += 1
        if link_id == "assigned-to-anyone":  # leaves the filter, keeps the state
            assert query == {"state": ["review"]}, href
            continue
        assert query.get("assignee") == ["me"], href
        shown = await client.get(f"/rfps/{rfp_id}?{urlsplit(unescape(href)).query}")
        assert shown.status == 200, href
        assert 'id="assigned-to-me" aria-current="true"' in await shown.text(), href
    # All, the three states, Anyone's, Assigned to me, the pager's previous and next, the item alone.
    assert walked == 9, found.links
    alone_href = next(unescape(h) for h, _ in found.links if "item=" in h)
    assert parse_qs(urlsplit(alone_href).query) == {
        "state": ["review"], "assignee": ["me"], "page": ["2"], "item": [ids[3]]}

    assert found.backs and all(parse_qs(back.removeprefix("?")).get("assignee") == ["me"]
                               for _, back in found.backs), found.backs
    # A form's way back, sent: the redirect keeps it.
    back = next(back for action, back in found.backs if action.endswith(f"/items/{ids[2]}"))
    saved = await client.post(f"/rfps/{rfp_id}/items/{ids[2]}", allow_redirects=False,
                              data={"csrf_token": csrf, "action": "save", "answer": "Yes!", "back": back})
    assert saved.headers["Location"] == (f"/rfps/{rfp_id}?state=review&assignee=me&page=2"
                                         f"&done=save&done_item={ids[2]}#item-{ids[2]}")
    answer_back = next(back for action, back in found.backs if action.endswith("/answer"))
    answered = await client.post(f"/rfps/{rfp_id}/answer", allow_redirects=False,
                                 data={"csrf_token": csrf, "back": answer_back})
    assert answered.status == 303
    assert re.fullmatch(rf"/rfps/{rfp_id}\?state=review&assignee=me&page=2&answering=\d+#progress",
                        answered.headers["Location"]), answered.headers["Location"]

    # The item alone: its way back to the list and its forms' keep the filters and the page.
    alone = links_of(await (await client.get(f"/rfps/{rfp_id}{alone_href}")).text())
    [back_to_list] = [unescape(h) for h, link_id in alone.links if link_id == "all-items"]
    assert back_to_list == f"/rfps/{rfp_id}?state=review&assignee=me&page=2#item-{ids[3]}"
    assert {back for _, back in alone.backs} == {f"?state=review&assignee=me&page=2&item={ids[3]}"}


async def test_rfp_page__its_options_grow_with_writers_plus_items_not_their_product(
    app_client, admin, make_member, make_rfp, conn,
):
    """Each item's select held every writer: 100 items and 50 writers were 5,100 options, 385 KB."""
    await set_password(conn, admin.email)
    writers = [await make_member(admin.account_id, "member") for _ in range(30)]
    rfp_id = await make_rfp(admin, "Acme")
    ids = await items(conn, rfp_id, 20)
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = $1", ids[0], writers[0].user_id)
    await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    # Per item nobody, you and someone else (and its assignee): 61; the 31 writers once.
    assert page.count("<option") == 20 * 3 + 1 + 31
    assert assignable_of(page).count("<option") == 31


async def test_assign__someone_else_without_the_script_opens_the_item_s_assign_page(
    app_client, admin, make_member, make_rfp, conn,
):
    writer = await make_member(admin.account_id, "member")
    viewer = await make_member(admin.account_id, "viewer")
    await set_password(conn, admin.email)
    await set_password(conn, viewer.email)
    rfp_id = await make_rfp(admin, "Acme")
    first, _ = await items(conn, rfp_id, 2)
    csrf = await sign_in(app_client, admin.email)

    chosen = await app_client.post(f"/rfps/{rfp_id}/items/{first}/assign", allow_redirects=False, data={
        "csrf_token": csrf, "assignee_id": "choose", "back": "?assignee=me&page=1"})
    assert chosen.status == 303
    location = chosen.headers["Location"]
    assert urlsplit(location).path == f"/rfps/{rfp_id}/items/{first}/assign"
    assert parse_qs(urlsplit(location).query) == {"back": ["?assignee=me&page=1"]}
    assert await conn.fetchval("SELECT assignee_id FROM rfp_items WHERE id = $1", first) is None

    page = await (await app_client.get(location)).text()
    options = select_of(page, first)
    assert f'<option value="{admin.user_id}">' in options and f'<option value="{writer.user_id}">' in options
    assert f'value="{viewer.user_id}"' not in options and '"choose"' not in options
    assert field(page, "back") == "?assignee=me&amp;page=1" and "Question 1?" in page
    assert f'href="/rfps/{rfp_id}?assignee=me&amp;page=1#item-{first}" id="cancel"' in page
    assigned = await app_client.post(f"/rfps/{rfp_id}/items/{first}/assign", allow_redirects=False, data={
        "csrf_token": csrf, "assignee_id": str(writer.user_id), "back": "?assignee=me&page=1"})
    assert assigned.headers["Location"] == (f"/rfps/{rfp_id}?assignee=me&page=1"
                                            f"&done=assign&done_item={first}#item-{first}")
    assert await conn.fetchval("SELECT assignee_id FROM rfp_items WHERE id = $1", first) == writer.user_id
    again = await (await app_client.get(f"/rfps/{rfp_id}/items/{first}/assign")).text()
    assert f'<option value="{writer.user_id}" selected>' in select_of(again, first)
    assert field(again, "back") == ""

    # Only a way back to this page; another item or RFP is the 404 page; a viewer may not.
    odd = await (await app_client.get(f"/rfps/{rfp_id}/items/{first}/assign?back=https://elsewhere.example")).text()
    assert field(odd, "back") == "" and "elsewhere" not in odd
    assert (await app_client.get(f"/rfps/{rfp_id}/items/item_none/assign")).status == 404
    await app_client.post("/signout", data={"csrf_token": csrf})
    await sign_in(app_client, viewer.email)
    assert (await app_client.get(f"/rfps/{rfp_id}/items/{first}/assign")).status == 403


async def test_forms__a_way_back_longer_than_the_page_s_own_is_dropped(
    app_client, admin, make_rfp, conn,
):
    """A form's `back` went into the redirect whatever its length (the assign page's ?back= is held
    to 200 characters): a 1 MB one was a 1 MB Location header, past what proxies and browsers take."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    [first] = await items(conn, rfp_id, 1)
    csrf = await sign_in(app_client, admin.email)
    long = "?page=1&" + "x" * 100_000
    for fields in ({"assignee_id": str(admin.user_id)}, {"assignee_id": "choose"},
                   {"action": "save", "answer": "Yes."}):
        action = f"/rfps/{rfp_id}/items/{first}" + ("/assign" if "assignee_id" in fields else "")
        sent = await app_client.post(action, allow_redirects=False,
                                     data={"csrf_token": csrf, "back": long} | fields)
        assert sent.status == 303, await sent.text()
        assert len(sent.headers["Location"]) < 200, (fields, len(sent.headers["Location"]))
    kept = await app_client.post(f"/rfps/{rfp_id}/items/{first}/assign", allow_redirects=False,
                                 data={"csrf_token": csrf, "back": "?page=1", "assignee_id": ""})
    assert kept.headers["Location"] == f"/rfps/{rfp_id}?page=1&done=assign&done_item={first}#item-{first}"


async def test_assign_select__writers_of_one_name_are_told_apart_by_their_addresses(
    app_client, admin, make_member, make_rfp, conn,
):
    """A name is its member's to choose: one who took a colleague's made two options alike, and
    whoever picked the wrong one assigned the item (and mailed it) to them. The address is what
    tells members apart, beside every name."""
    impostor = await make_member(admin.account_id, "member")
    other = await make_member(admin.account_id, "member")
    for user_id, first, last in ((admin.user_id, "Grace", "Hopper"), (impostor.user_id, "GRACE", "hopper"),
                                 (other.user_id, "Alan", "Turing")):
        await conn.execute("UPDATE users SET first_name = $2, last_name = $3 WHERE id = $1",
                           user_id, first, last)
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    [first_item] = await items(conn, rfp_id, 1)
    await sign_in(app_client, admin.email)

    listed = assignable_of(await (await app_client.get(f"/rfps/{rfp_id}")).text())
    chooser = select_of(await (await app_client.get(f"/rfps/{rfp_id}/items/{first_item}/assign")).text(),
                        first_item)
    for options in (listed, chooser):
        assert f'<option value="{admin.user_id}">Grace Hopper ({admin.email})</option>' in options
        assert f'<option value="{impostor.user_id}">GRACE hopper ({impostor.email})</option>' in options
        assert f'<option value="{other.user_id}">Alan Turing ({other.email})</option>' in options

    # Every name has its address beside it: only a name another writer bore too had, so one who
    # took a colleague's name and address as theirs ("Grace Hopper (grace@…)", or the name with
    # an invisible character in it) bore a name of their own, and theirs was the option that
    # looked told apart, the colleague's bare.
    for pretended in (f"Grace Hopper ({admin.email})", "Gra\u200bce Hopper"):
        await conn.execute("UPDATE users SET first_name = $2, last_name = '' WHERE id = $1",
                           impostor.user_id, pretended)
        listed = assignable_of(await (await app_client.get(f"/rfps/{rfp_id}")).text())
        assert f'<option value="{admin.user_id}">Grace Hopper ({admin.email})</option>' in listed
        assert f'<option value="{impostor.user_id}">{escape(pretended)} ({impostor.email})</option>' in listed

    # The item's current assignee, the one option of the item's own select before the script
    # fills it, has its address beside the name too.
    await conn.execute("UPDATE rfp_items SET assignee_id = $2 WHERE id = $1", first_item, impostor.user_id)
    own = select_of(await (await app_client.get(f"/rfps/{rfp_id}")).text(), first_item)
    shown = f"{escape(pretended)} ({impostor.email})"
    assert f'<option value="{impostor.user_id}" selected>{shown}</option>' in own


async def test_assign__someone_else_opens_only_an_item_of_the_account(
    app_client, admin, make_account, make_rfp, conn,
):
    """"someone else…" redirected to the assign page of whatever the path named, unchecked and
    unquoted: ids with ../ and ? in them (percent-encoded) made a way to any page of the site."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    [first] = await items(conn, rfp_id, 1)
    elsewhere = await make_account()
    theirs = await make_rfp(elsewhere, "Theirs")
    [their_item] = await items(conn, theirs, 1)
    csrf = await sign_in(app_client, admin.email)
    for path in (f"/rfps/{rfp_id}/items/..%2F..%2F..%2Fsignout%3F/assign",
                 f"/rfps/{theirs}/items/{their_item}/assign", f"/rfps/{rfp_id}/items/{their_item}/assign"):
        sent = await app_client.post(path, allow_redirects=False,
                                     data={"csrf_token": csrf, "assignee_id": "choose"})
        assert sent.status == 404, (path, sent.status, sent.headers.get("Location"))
    sent = await app_client.post(f"/rfps/{rfp_id}/items/{first}/assign", allow_redirects=False,
                                 data={"csrf_token": csrf, "assignee_id": "choose"})
    assert sent.headers["Location"] == f"/rfps/{rfp_id}/items/{first}/assign"


async def test_assign_page__a_question_cut_short_says_so_whatever_its_spacing(
    app_client, admin, make_rfp, conn,
):
    """The page read the question's first 501 characters and marked it cut only when they held
    more than 500 once their spaces were collapsed: a question whose spaces filled them showed
    its first words as the whole of it."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    [first] = await items(conn, rfp_id, 1)
    await conn.execute("UPDATE rfp_items SET question = $2 WHERE id = $1",
                       first, "Do you encrypt" + " " * 600 + "backups at rest?")
    await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}/items/{first}/assign")).text()
    assert "<p>Do you encrypt backups at rest?</p>" in page
