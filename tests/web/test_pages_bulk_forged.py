"""Probes of the RFP page's bulk approval (service/web/pages/rfp_bulk.py) as a hostile or merely
unlucky reviewer sends it: a forged page time, and "Approve selected" pressed on a page shown
before an item's answer changed. Over real HTTP against a real PostgreSQL."""

from __future__ import annotations

from html import unescape

import asyncpg

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password, sign_in  # noqa: F401
from test_pages_review_bulk import add_items, band_form, picks

from service import db


async def test_bulk_approve__a_page_time_past_what_a_timestamp_holds_is_refused_in_words(
    app_client, admin, make_rfp, conn,
):
    """`seen` is read with datetime.fromisoformat, which takes year 1 at +01:00 or year 9999 at
    -01:00: a time before year 1 or after 9999 in UTC, which the driver cannot send (OverflowError
    while encoding the band's query), so the forged form was the 500 page."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    ids = await add_items(conn, rfp_id, [("Do you encrypt backups?", "auto_answered", "Yes.", 0.95)])
    csrf = await sign_in(app_client, admin.email)
    for seen in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        for scope in ("band", "selected"):
            refused = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
                ("csrf_token", csrf), ("scope", scope), ("item", ids[0]), ("seen", seen)])
            assert refused.status == 422, (seen, scope, refused.status)
            assert "reload the page" in unescape(await refused.text())
    assert await conn.fetchval("SELECT state::text FROM rfp_items WHERE id = $1", ids[0]) == "auto_answered"


async def test_bulk_approve__selected_skips_an_item_changed_after_the_page_was_shown(
    app_client, admin, make_rfp, conn,
):
    """"Approve selected" approved the ticked items as they were when it was pressed, not as the
    page showed them: an answer rewritten meanwhile (another reviewer's edit, a reopened item
    answered again) was approved unseen. The band's button skipped such an item (`seen`), the
    item's own Approve sends the answer shown; now the boxes do as the band does, and a form
    without the page's time (a page shown before this change, a forged one) approves nothing."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    # One in the auto-answer band, one in the review band (no band button for it alone).
    ids = await add_items(conn, rfp_id, [
        ("Do you encrypt backups?", "auto_answered", "Yes, with AES-256.", 0.95),
        ("Is data encrypted at rest?", "needs_input", "Partly: the database is.", 0.6),
        ("Is MFA enforced?", "auto_answered", "Yes.", 0.95)])
    csrf = await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert picks(page) == ids
    form = [(name, value) for name, value in band_form(page) if name in ("seen", "back")]
    assert [name for name, _ in form] == ["back", "seen"]
    # Both shown answers rewritten after the page was shown (the item's updated_at, as a review
    # or an answer writes it).
    await conn.execute("UPDATE rfp_items SET answer = 'No, never.', updated_at = now()"
                       " WHERE id = ANY($1::text[])", ids[:2])
    response = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("scope", "selected"), *form, *(("item", i) for i in ids)])
    assert response.status == 303
    assert response.headers["Location"] == f"/rfps/{rfp_id}?page=1&bulk=1,0,0,0,0,2#bulk-done"
    states = dict(await conn.fetch("SELECT id, state::text FROM rfp_items WHERE rfp_id = $1", rfp_id))
    assert [states[i] for i in ids] == ["auto_answered", "needs_input", "approved"]
    page = await (await app_client.get(response.headers["Location"])).text()
    assert "Skipped 2: 2 changed since the page was shown." in unescape(page)

    # The review band's item alone on the page: the form still carries the page's time.
    await conn.execute("UPDATE rfp_items SET state = 'discarded' WHERE id = $1", ids[0])
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert picks(page) == [ids[1]] and 'id="approve-band"' not in page
    seen = field(page, "seen")
    response = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("scope", "selected"), ("seen", unescape(seen)), ("item", ids[1])])
    assert response.headers["Location"] == f"/rfps/{rfp_id}?bulk=1,0,0,0,0,0#bulk-done"

    # Without the page's time: refused in words, nothing approved.
    await conn.execute("UPDATE rfp_items SET state = 'auto_answered' WHERE id = $1", ids[0])
    refused = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("scope", "selected"), ("item", ids[0])])
    assert refused.status == 422 and "reload the page" in unescape(await refused.text())
    assert await conn.fetchval("SELECT state::text FROM rfp_items WHERE id = $1", ids[0]) == "auto_answered"



async def _pressed_after_a_write_beside_the_page(app_client, admin, make_rfp, conn, database_url,
                                                write_before, write_after) -> str:
    """One auto-answer item ("Yes."); a writer's transaction open while the RFP page is read runs
    `write_before` before that read and `write_after` after it (each given the writer and the
    item's id), then commits; the band's button is pressed with that page. The item's state."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    [item_id] = await add_items(conn, rfp_id, [("Do you encrypt backups?", "auto_answered", "Yes.", 0.95)])
    csrf = await sign_in(app_client, admin.email)
    writer = await asyncpg.connect(database_url)
    try:
        async with writer.transaction():
            await write_before(writer, item_id)
            page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
            assert "No, never." not in page and "Yes." in page  # the old answer is what was shown
            await write_after(writer, item_id)
    finally:
        await writer.close()
    response = await app_client.post(f"/rfps/{rfp_id}/approve", allow_redirects=False, data=[
        ("csrf_token", csrf), ("scope", "band"), *band_form(page)])
    assert response.status == 303
    return await conn.fetchval("SELECT state::text FROM rfp_items WHERE id = $1", item_id)


async def _nothing(_writer, _item_id) -> None:
    pass


async def test_bulk_approve__a_write_committed_after_the_page_was_shown_is_not_approved_unseen(
    app_client, admin, make_rfp, conn, database_url,
):
    """`seen` is when the page's statement ran; an item counts as unchanged when its updated_at is
    not later. But updated_at = now() is when the writing transaction began: a long one (an
    import rewriting answers) that began before the page and committed after it leaves the page
    showing the old answer while the item reads as unchanged, and the band approves the new one."""
    async def rewrite(writer, item_id) -> None:
        await writer.execute("UPDATE rfp_items SET answer = 'No, never.', updated_at = now()"
                             " WHERE id = $1", item_id)

    assert await _pressed_after_a_write_beside_the_page(
        app_client, admin, make_rfp, conn, database_url, rewrite, _nothing) != "approved"


async def test_bulk_approve__written_after_the_page_by_a_transaction_begun_before_is_not_approved(
    app_client, admin, make_rfp, conn, database_url,
):
    """The case the page's hold-back cannot see: a transaction that began before the page (a
    review waiting for the RFP's lock) but writes only after the page was read has no xid while
    the page runs, and its now() is before the page's time. The item's writes stamp the time of
    the write (clock_timestamp()), which is after the page's."""
    async def begin(writer, _item_id) -> None:
        await writer.fetchval("SELECT 1")  # begun: now() is fixed, no xid yet

    async def review(writer, item_id) -> None:
        await writer.fetchrow(db.query("review_rfp_item"), item_id, "Do you encrypt backups?", None,
                              "No, never.", "auto_answered", None)

    assert await _pressed_after_a_write_beside_the_page(
        app_client, admin, make_rfp, conn, database_url, begin, review) != "approved"
