"""The web app's import reports as a browser reloads them: a reload repeats the request that
produced the page on screen, the POST itself when the report was its response (measured: the
knowledge base's 3 entries and 1 audit event became 5 and 2, the CSV imported again), a GET of
the report's page now that the POST answers 303 to it (migration 0045, domain/import_reports.py)."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import FormData
from aiohttp.test_utils import TestClient
from conftest import with_config

# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, set_password, sign_in  # noqa: F401
from page_client import upload_form as page_upload_form

from service.web.app import create_app

# Two rows without an id (created on each import that reads them) and one with an id (updated).
CSV = (b"question,answer,id\nIs there a DPO?,Yes.,\nDo you encrypt backups?,Yes: AES-256.,\n"
       b"Is MFA enforced?,Yes.,policy-mfa\nNo answer here,,\n")
QUESTIONS = b"Question\nDo you encrypt backups?\nIs MFA enforced?\n"
SUMMARY = "3 rows imported (3 new, 0 updated); 1 rejected"


def upload_form(csrf: str, body: bytes = CSV, **fields: str) -> FormData:
    return page_upload_form(csrf, body, **fields)


async def reload(client: TestClient, shown: Any, form: FormData):
    """What a browser's reload (F5, or Back then Forward) of the page `shown` sends."""
    if shown.method == "POST":
        return await client.post(shown.url.path_qs, data=form)
    return await client.get(shown.url.path_qs)


async def counts(conn, account_id: str) -> tuple[int, int]:
    entries = await conn.fetchval("SELECT count(*) FROM knowledge_items WHERE account_id = $1", account_id)
    imports = await conn.fetchval(
        "SELECT count(*) FROM audit_events WHERE account_id = $1 AND action = $2",
        account_id, "knowledge_base_items.imported")
    return entries, imports


async def signed_in_client(aiohttp_client: Any, config: Any, conn, email: str) -> TestClient:
    client = await aiohttp_client(create_app(with_config(config, server={"web_base_url": "http://localhost"})))
    await set_password(conn, email)
    await sign_in(client, email)
    return client


def not_found(text: str) -> str:
    """The 404 page's main part without its request id (each request's own)."""
    assert "<h1>Page not found</h1>" in text
    main = text[text.index("<main"):text.index("</main>")]
    return re.sub(r"Request id: <code>[^<]*</code>", "", main)


async def test_kb_import__reloading_its_report_imports_nothing_again(app_client, admin, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    shown = await app_client.post("/kb/import", data=upload_form(csrf))  # as a browser, redirects followed
    text = await shown.text()
    assert shown.status == 200 and SUMMARY in text, text
    assert "<h1>CSV imported</h1>" in text and "<h2>Rejected rows</h2>" in text
    assert await counts(conn, admin.account_id) == (3, 1)

    again = await reload(app_client, shown, upload_form(csrf))
    # Measured when the report was the POST's response: (5, 2), the report saying "3 rows imported
    # (2 new, 1 updated)": the rows without an id created twice, the one with an id updated again.
    assert await counts(conn, admin.account_id) == (3, 1)
    assert [r.status for r in shown.history] == [303]
    assert re.fullmatch(r"/kb/imports/imp_[0-9A-Za-z]{22}", shown.url.path) and again.method == "GET"
    text = await again.text()
    assert again.status == 200 and SUMMARY in text, text
    # The report kept says who imported, and is the page's (what the import answered).
    kept = await conn.fetchrow("SELECT member_id, rfp_id, report FROM import_reports")
    assert (kept["member_id"], kept["rfp_id"]) == (admin.member_id, None)


async def test_kb_import_report__read_within_its_account_only_else_the_same_404(
    app_client, aiohttp_client, config, admin, make_account, make_member, make_rfp, conn,
):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    report = (await app_client.post("/kb/import", data=upload_form(csrf), allow_redirects=False)
              ).headers["Location"]
    # A viewer of the account reads it as they read the knowledge base (they cannot import).
    viewer = await make_member(admin.account_id, role="viewer")
    as_viewer = await signed_in_client(aiohttp_client, config, conn, viewer.email)
    read = await as_viewer.get(report)
    assert read.status == 200 and SUMMARY in await read.text()

    other = await signed_in_client(aiohttp_client, config, conn, (await make_account("Other")).email)
    theirs = await other.get(report)
    unknown = await other.get("/kb/imports/imp_" + "A" * 22)
    missing = [not_found(await theirs.text()), not_found(await unknown.text())]
    assert (theirs.status, unknown.status) == (404, 404) and missing[0] == missing[1]
    for malformed in ("/kb/imports/" + "x" * 300, "/kb/imports/imp_%27%3B%20--", "/kb/imports/%C3%A9"):
        page = await app_client.get(malformed)
        assert page.status == 404 and not_found(await page.text()) == missing[0], malformed
    # (A NUL in a path is the front door's 400, before any page: tests/web/test_errors.py.)
    # A questionnaire's report is not the knowledge base's, nor the other way round.
    rfp_id = await make_rfp(admin, "Acme")
    report_id = report.rsplit("/", 1)[1]
    assert (await app_client.get(f"/rfps/{rfp_id}/imports/{report_id}")).status == 404
    assert await counts(conn, admin.account_id) == (3, 1)


async def test_questionnaire_upload__reloading_its_report_imports_nothing_again(
    app_client, aiohttp_client, config, admin, make_account, make_rfp, conn,
):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    shown = await app_client.post(f"/rfps/{rfp_id}/import", data=upload_form(csrf, QUESTIONS, items_seen="0"))
    assert shown.status == 200 and "2 items added" in await shown.text()
    again = await reload(app_client, shown, upload_form(csrf, QUESTIONS, items_seen="0"))
    # (When the report was the POST's response, the reload was refused by items_seen: a 409.)
    assert again.status == 200 and "2 items added, starting at position 1" in await again.text()
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE rfp_id = $1", rfp_id) == 2
    location = shown.url.path
    assert [r.status for r in shown.history] == [303]
    assert re.fullmatch(rf"/rfps/{rfp_id}/imports/imp_[0-9A-Za-z]{{22}}", location)

    # Another RFP's address, another account's, an unknown id: the 404 page alike.
    report_id = location.rsplit("/", 1)[1]
    other_rfp = await make_rfp(admin, "Beta")
    assert (await app_client.get(f"/rfps/{other_rfp}/imports/{report_id}")).status == 404
    assert (await app_client.get(f"/kb/imports/{report_id}")).status == 404
    assert (await app_client.get(f"/rfps/{rfp_id}/imports/{'x' * 300}")).status == 404
    other = await signed_in_client(aiohttp_client, config, conn, (await make_account("Other")).email)
    assert (await other.get(location)).status == 404
