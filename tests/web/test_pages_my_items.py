"""The web app's "My items" page (/items): the signed-in member's items across the account's
RFPs, grouped by RFP, with the RFP page's state filters and the pager."""

from __future__ import annotations

import re
from html import unescape

from conftest import with_config
from helpers_items import add_items, deadline_rfp

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, field, set_password  # noqa: F401
from test_pages_assignee import links_of, sign_in

from service.domain import accounts
from service.web.app import create_app


def shown_items(page: str) -> list[str]:
    return re.findall(r'<li class="item item-\w+" id="item-([^"]+)">', page)


async def test_my_items__the_member_s_items_grouped_by_rfp_with_links(
    app_client, conn, admin, make_account, make_member, make_rfp,
):
    writer = await make_member(admin.account_id, "member")
    await set_password(conn, writer.email)
    undated = await deadline_rfp(conn, make_rfp, admin, "Undated <review>", None)
    soon = await deadline_rfp(conn, make_rfp, admin, "Acme & co", "2031-03-01")
    w = writer.user_id
    undated_ids = await add_items(conn, undated, (4, w, "pending"), (1, admin.user_id, "pending"))
    soon_ids = await add_items(conn, soon, (7, w, "auto_answered"), (2, w, "needs_input"),
                               (3, None, "approved"))
    # The same person in another account, an item assigned there: not on this account's page.
    other = await make_account(name="Other")
    await accounts.add_member(conn, other.account_id, writer.email, "member")
    elsewhere = await add_items(conn, await make_rfp(other, "Elsewhere"), (1, w, "pending"))
    await sign_in(app_client, writer.email)

    page = await (await app_client.get("/items")).text()
    assert '<a href="/items" aria-current="page">My items</a>' in page
    # The nearest deadline first, then the RFP without one; each RFP's items in order.
    assert shown_items(page) == [soon_ids[1], soon_ids[0], undated_ids[0]]
    assert elsewhere[0] not in page and "Elsewhere" not in page and undated_ids[1] not in page
    assert page.index("Acme &amp; co") < page.index("Undated &lt;review&gt;")
    assert f'<h2 id="rfp-{soon}"><a href="/rfps/{soon}">Acme &amp; co</a></h2>' in page
    assert "Deadline: 2031-03-01" in page and "Deadline: none" in page
    assert "3 items assigned to you across the RFPs" in page
    item = re.search(rf'<li class="item item-auto_answered" id="item-{soon_ids[0]}">(.*?)</li>', page, re.S)
    assert item, page
    assert '<span class="pos">7.</span>' in item.group(1)
    link = f'href="/rfps/{soon}?from=items&amp;item={soon_ids[0]}">Question 7 of {soon[-8:]}?</a>'
    assert link in item.group(1)
    assert 'class="state state-auto_answered">auto answered</span>' in item.group(1)
    assert re.search(r'class="band band-\w+">[^<]+ · 95 %</span>', item.group(1)), item.group(1)

    # Each item's link opens the item alone on its RFP's page, which leads back to "My items",
    # and so does its review form's way back.
    for href in [unescape(h) for h, _ in links_of(page).links if "item=" in h]:
        alone = await app_client.get(href)
        assert alone.status == 200, href
        item_id = href.rsplit("=", 1)[1]
        text = await alone.text()
        assert f'id="item-{item_id}"' in text, href
        assert f'<a href="/items#item-{item_id}" id="my-items">My items</a>' in text, href
    rfp_page = await (await app_client.get(f"/rfps/{soon}?from=items&item={soon_ids[0]}")).text()
    reviewed = await app_client.post(
        f"/rfps/{soon}/items/{soon_ids[0]}", allow_redirects=False,
        data={"csrf_token": field(rfp_page, "csrf_token"), "action": "save", "answer": "Edited.",
              "back": unescape(field(rfp_page, "back"))})
    assert reviewed.status == 303
    back = await app_client.get(reviewed.headers["Location"])
    assert 'id="my-items">My items</a>' in await back.text()
    # Opened from the RFP itself, the item alone has no such link.
    assert 'id="my-items"' not in await (await app_client.get(f"/rfps/{soon}?item={soon_ids[0]}")).text()


async def signed_in(aiohttp_client, config, conn, member, **web):
    """A client of an app with these [web] settings, signed in as `member`."""
    await set_password(conn, member.email)
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, web=web)))
    await sign_in(client, member.email)
    return client


async def test_my_items__state_filters_and_the_pager_keep_each_other(
    aiohttp_client, config, conn, admin, make_rfp,
):
    client = await signed_in(aiohttp_client, config, conn, admin, items_per_page=2)
    rfp_id = await make_rfp(admin, "Acme")
    me = admin.user_id
    ids = await add_items(conn, rfp_id, (1, me, "auto_answered"), (2, me, "approved"),
                          (3, me, "auto_answered"), (4, me, "auto_answered"), (5, me, "pending"))

    everything = await (await client.get("/items")).text()
    assert shown_items(everything) == ids[:2]
    assert 'href="?page=2" rel="next"' in everything
    assert '<a href="/items" aria-current="true">All</a>' in everything
    review = await (await client.get("/items?state=review")).text()
    assert '<a href="/items?state=review" aria-current="true">Review</a>' in review
    assert shown_items(review) == [ids[0], ids[2]]
    assert 'href="?state=review&amp;page=2" rel="next"' in review
    assert shown_items(await (await client.get("/items?state=review&page=2")).text()) == [ids[3]]
    empty = await (await client.get("/items?state=needs_input")).text()
    assert shown_items(empty) == [] and "No items assigned to you in this filter." in empty
    past = await (await client.get("/items?page=9")).text()
    assert shown_items(past) == [] and "No items on this page." in past

    bad = await client.get("/items?state=auto_answered")
    assert bad.status == 400 and "The filter must be Needs input, Review or Approved" in await bad.text()
    assert (await client.get("/items?page=0")).status == 400


async def test_my_items__a_long_question_is_cut_as_the_rfp_page_cuts_it(
    aiohttp_client, config, conn, admin, make_rfp,
):
    client = await signed_in(aiohttp_client, config, conn, admin, item_chars_shown=40)
    rfp_id = await make_rfp(admin, "Acme")
    [item_id] = await add_items(conn, rfp_id, (1, admin.user_id, "pending"))
    await conn.execute("UPDATE rfp_items SET question = repeat('Long question? ', 20) WHERE id = $1", item_id)

    page = await (await client.get("/items")).text()
    cut = ("Long question? " * 20)[:40]
    assert f'href="/rfps/{rfp_id}?from=items&amp;item={item_id}">{cut}…</a>' in page
    assert "Long question? " * 3 not in page


async def test_my_items__an_empty_list_says_how_items_get_assigned(
    app_client, conn, admin, make_member, make_rfp,
):
    viewer = await make_member(admin.account_id, "viewer")
    await set_password(conn, admin.email)
    await set_password(conn, viewer.email)
    rfp_id = await make_rfp(admin, "Acme")
    await add_items(conn, rfp_id, (1, None, "pending"))

    csrf = await sign_in(app_client, admin.email)
    page = await (await app_client.get("/items")).text()
    assert shown_items(page) == [] and "0 items assigned to you" in page
    assert "No items are assigned to you." in page and "An item is assigned on its RFP's page" in page
    await app_client.post("/signout", data={"csrf_token": csrf})

    await sign_in(app_client, viewer.email)
    page = await (await app_client.get("/items")).text()
    assert "No items are assigned to you." in page
    assert "Items are assigned to admins and members" in page


async def test_my_items__signed_out_goes_to_sign_in_and_back(app_client):
    response = await app_client.get("/items?state=review", allow_redirects=False)
    assert response.status == 303
    assert response.headers["Location"].startswith("/signin?next=")
    assert response.headers["Location"].startswith("/signin?next=/items?state")


async def test_my_items__an_item_opened_from_a_filter_s_page_leads_back_to_that_page(
    aiohttp_client, config, conn, admin, make_rfp,
):
    """Opened from page 2 of "Needs input", an item alone's "My items" link, and its forms' way
    back, led to /items: page 1 of every item, where the item may not be (helper-90's walk, 124
    items needing input). They now return to the filter and page it was opened from."""
    client = await signed_in(aiohttp_client, config, conn, admin, items_per_page=2)
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, *[(n, admin.user_id, "needs_input") for n in range(1, 4)],
                          (4, admin.user_id, "approved"))
    page = await (await client.get("/items?state=needs_input&page=2")).text()
    assert shown_items(page) == [ids[2]]
    href = unescape(re.search(rf'href="([^"]*item={ids[2]})"', page).group(1))
    assert href == f"/rfps/{rfp_id}?from=items%3Fstate%3Dneeds_input%26page%3D2&item={ids[2]}"
    alone = await (await client.get(href)).text()
    way = f'<a href="/items?state=needs_input&amp;page=2#item-{ids[2]}" id="my-items">My items</a>'
    assert way in alone
    saved = await client.post(f"/rfps/{rfp_id}/items/{ids[2]}", allow_redirects=False, data={
        "csrf_token": field(alone, "csrf_token"), "action": "save", "answer": "Edited.",
        "back": unescape(field(alone, "back"))})
    assert saved.status == 303
    after = await client.get(saved.headers["Location"])
    assert way in await after.text() and "Answer saved." in await after.text()
    # Page 1 of every item: the plain link, as before; a filter or page it names is the list's own.
    page = await (await client.get("/items")).text()
    assert f'href="/rfps/{rfp_id}?from=items&amp;item={ids[0]}"' in page
    refused = await client.get(f"/rfps/{rfp_id}?from=items%3Fstate%3Dnope&item={ids[0]}")
    assert refused.status == 400 and "The filter must be Needs input" in await refused.text()
    refused = await client.get(f"/rfps/{rfp_id}?from=items%3Fpage%3D0&item={ids[0]}")
    assert refused.status == 400
    # Any other "from" is no way back to "My items" (as before).
    other = await (await client.get(f"/rfps/{rfp_id}?from=elsewhere&item={ids[0]}")).text()
    assert 'id="my-items"' not in other
    other = await (await client.get(f"/rfps/{rfp_id}?from=items%3Fnext%3D%2F%2Fevil&item={ids[0]}")).text()
    assert 'id="my-items"' not in other
