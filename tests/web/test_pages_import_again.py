"""A questionnaire's import report was the upload's own response: reloading it (F5, or the
browser's "Confirm Form Resubmission") sent the upload again, and imported the questionnaire a
second time, every question twice (helper-90's walk in Chromium: an RFP of 2 items had 7 after
the upload, 12 after a reload of its report). The upload form says how many items the RFP had
when it was shown, and an upload sent again once they changed is refused, saying why. (The report
is now a page of its own that a reload reads again, tests/web/test_pages_kb_import_reload.py; the
guard stays for the same form sent again: a report page shown before that, another tab.)"""

from __future__ import annotations

import asyncio

import asyncpg
from aiohttp import FormData

# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, field, set_password, sign_in  # noqa: F401

from tests.conftest import CONNECT, lock_waiters

QUESTIONS = b"Question\nDo you encrypt backups?\nIs MFA enforced?\n"


def upload(csrf: str, items_seen: str | None) -> FormData:
    form = FormData()
    form.add_field("csrf_token", csrf)
    if items_seen is not None:
        form.add_field("items_seen", items_seen)
    form.add_field("file", QUESTIONS, filename="questions.csv", content_type="text/csv")
    return form


async def test_upload__sent_again_from_its_report_is_refused_not_imported_twice(
    app_client, admin, make_rfp, conn,
):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert field(page, "items_seen") == "0"

    first = await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "0"))
    assert first.status == 200 and "2 items added" in await first.text()
    again = await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "0"))  # sent again
    text = await again.text()
    assert again.status == 409, text
    assert "Not imported: this upload form was shown when the RFP had 0 items, and it has 2 now" in text
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE rfp_id = $1", rfp_id) == 2

    # From the RFP's page as it is now, the same file is imported again: that is asked for.
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert field(page, "items_seen") == "2"
    fresh = await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "2"))
    assert fresh.status == 200 and "starting at position 3" in await fresh.text()
    # A form without the field (a page from before it) imports as before; a forged value is refused.
    older = await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, None))
    assert older.status == 200
    forged = await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "lots"))
    assert forged.status == 409
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE rfp_id = $1", rfp_id) == 6


async def test_upload__two_forms_sent_at_once_import_once(app_client, admin, make_rfp, conn, database_url):
    """The form's count was checked before the import's transaction: two uploads of a form shown
    at 0 items, sent at once (a double submit, two tabs), both passed it and both imported. The
    import checks it again under the RFP's lock: one imports, the other is the 409 page."""
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    holder = await asyncpg.connect(database_url, **CONNECT)
    try:
        async with holder.transaction():  # both uploads queue on the RFP's lock behind this
            await holder.execute("SELECT 1 FROM rfps WHERE id = $1 FOR UPDATE", rfp_id)
            sent = [asyncio.create_task(app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "0")))
                    for _ in range(2)]
            await lock_waiters(conn, 2)
    finally:
        await holder.close()
    responses = await asyncio.gather(*sent)
    assert sorted(r.status for r in responses) == [200, 409]
    refused = next(r for r in responses if r.status == 409)
    assert "this upload form was shown when the RFP had 0 items, and it has 2 now" in await refused.text()
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE rfp_id = $1", rfp_id) == 2
    assert await conn.fetchval("SELECT count(*) FROM audit_events WHERE action = 'rfp.items_imported'") == 1


async def test_refused_upload__its_page_says_why_under_a_heading_in_words(app_client, admin, make_rfp, conn):
    """A 409's page was headed with the status's name, "Conflict", over a message in words."""
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    assert (await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "0"))).status == 200
    again = await app_client.post(f"/rfps/{rfp_id}/import", data=upload(csrf, "0"))
    text = await again.text()
    assert again.status == 409 and "<h1>Not possible as things stand</h1>" in text, text
    assert "Conflict" not in text
