"""A list's page past its last (an old link or bookmark, records deleted since): a walk through
the web app (helper-90) found /rfps saying "2 RFPs, newest first." over "No RFPs.", /kb a bare
count of entries, /members an empty table and the care page's list nothing, where the RFP page,
"My items" and /accounts say "No … on this page" with a link to the first; and the pager's
"← Previous" of page 9 of 2 led to page 8, as empty (one click a page back to the last)."""

from __future__ import annotations

from conftest import with_config

# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, set_password, sign_in  # noqa: F401

from service.web.app import create_app


async def test_lists__a_page_past_the_last_says_so_and_leads_to_the_first(
    app_client, admin, make_rfp, conn,
):
    await set_password(conn, admin.email)
    await make_rfp(admin, "Acme security review")
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer, title, review_by) VALUES"
        " ('kb_p1', $1, 'Backups?', 'Nightly.', 'Backup policy', current_date - 1)", admin.account_id)
    await sign_in(app_client, admin.email)
    missing = []
    for path, said in (
        ("/rfps?page=9", '<p id="past-the-end">No RFPs on this page. <a href="/rfps">First page</a></p>'),
        ("/rfps?q=security&page=9",
         '<p id="past-the-end">No RFPs on this page. <a href="/rfps?q=security">First page</a></p>'),
        ("/kb?page=9", '<p id="past-the-end">No entries on this page. <a href="/kb">First page</a></p>'),
        ("/kb?q=Backup&page=9",
         '<p id="past-the-end">No entries on this page. <a href="/kb?q=Backup">First page</a></p>'),
        ("/members?page=9",
         '<p id="members-past-the-end">No member on this page. <a href="/members">First page</a></p>'),
        ("/kb/care?page=9",
         '<p id="stale-past-the-end">No entry on this page. <a href="/kb/care">First page</a></p>'),
    ):
        page = await (await app_client.get(path)).text()
        if said not in page or "No RFPs.</p>" in page or '<th scope="col">Since</th>' in page:
            missing.append(path)  # not said, or said "No RFPs." under the count, or an empty table
    assert missing == []
    # Page 1 of each, and an empty search, say as before.
    assert "past-the-end" not in await (await app_client.get("/rfps")).text()
    assert "No RFPs match." in await (await app_client.get("/rfps?q=nothing")).text()
    assert "past-the-end" not in await (await app_client.get("/kb?q=nothing")).text()
    assert "past-the-end" not in await (await app_client.get("/members")).text()
    assert "past-the-end" not in await (await app_client.get("/kb/care")).text()


async def test_pager__previous_past_the_last_page_is_the_last_page(
    aiohttp_client, config, admin, make_rfp, conn,
):
    await set_password(conn, admin.email)
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, web={"items_per_page": 2})))
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, assignee_id)"
        " SELECT 'item_n' || n, $1, 'Question ' || n || '?', n, 'pending', $2"
        " FROM generate_series(1, 3) AS n", rfp_id, admin.user_id)
    await sign_in(client, admin.email)
    past = await (await client.get(f"/rfps/{rfp_id}?page=9")).text()
    assert '<a href="?page=2" rel="prev">← Previous</a>' in past
    mine = await (await client.get("/items?state=needs_input&page=9")).text()
    assert "rel=\"prev\"" not in mine  # one page, none of it in the filter: no pager
    mine = await (await client.get("/items?page=9")).text()
    assert '<a href="?page=2" rel="prev">← Previous</a>' in mine
    # Within the pages, "Previous" is the page before.
    assert '<a href="?page=1" rel="prev">← Previous</a>' in await (
        await client.get(f"/rfps/{rfp_id}?page=2")).text()
