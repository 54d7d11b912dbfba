"""The web app's pages (service/web/pages) over real HTTP against a real PostgreSQL: sessions,
CSRF, roles, the RFP list and page, review actions, import, export, the knowledge base, asking
and members. The browser tests (tests/web/test_browser.py) drive the same pages in Chromium."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient
from conftest import CONNECT, item_updates_failing, with_config
from helpers_questions import wait_all_complete
from markupsafe import escape

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import (  # noqa: F401
    PASSWORD,
    aiohttp_client_cls,
    app_client,
    field,
    set_password,
    sign_in,
)

from service.answering.engines.local import SENTENCES
from service.domain import housekeeping
from service.web.app import create_app


def post_actions(html: str) -> list[str]:
    return re.findall(r'<form[^>]*\bmethod="post"[^>]*\baction="([^"]+)"', html)


async def test_sign_in__session_cookie_flags_and_sign_out_ends_it_on_the_server(app_client, admin, conn):
    await set_password(conn, admin.email)
    form = await app_client.get("/signin")
    token = field(await form.text(), "sign_in_token")
    response = await app_client.post(
        "/signin", data={"email": admin.email, "password": PASSWORD, "sign_in_token": token},
        allow_redirects=False,
    )
    assert response.status == 303
    cookie = response.headers.getall("Set-Cookie")
    session_cookie = next(c for c in cookie if c.startswith("rfp_session="))
    assert "HttpOnly" in session_cookie and "SameSite=Lax" in session_cookie
    assert "Secure" not in session_cookie  # served over http
    value = session_cookie.split(";")[0].split("=", 1)[1]
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 1
    page = await app_client.get("/rfps")
    csrf = field(await page.text(), "csrf_token")
    out = await app_client.post("/signout", data={"csrf_token": csrf}, allow_redirects=False)
    assert out.status == 303 and out.headers["Location"] == "/signin?done=signed_out"
    signed_out = await (await app_client.get(out.headers["Location"])).text()
    assert '<p class="notice ok" role="status" id="signin-notice">You are signed out.</p>' in signed_out
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 0
    # The old cookie, replayed, no longer works: the server ended the session.
    app_client.session.cookie_jar.clear()
    replay = await app_client.get("/rfps", cookies={"rfp_session": value}, allow_redirects=False)
    assert replay.status == 303 and replay.headers["Location"].startswith("/signin")


async def test_sign_out__ends_its_session_and_leaves_old_ones_to_housekeeping(
    app_client, admin, conn, database_url
):
    """Sign-out ends its own session at once, in one statement; deleting every session ended a
    day ago is the hourly sweep's (it also ran at each sign-out)."""
    await conn.execute(
        "INSERT INTO web_sessions (token_hash, member_id, csrf_token, expires_at, revoked_at) VALUES"
        " ('\\x02', $1, 'b', now() + interval '1 hour', now() - interval '3 days')", admin.member_id)
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    out = await app_client.post("/signout", data={"csrf_token": csrf}, allow_redirects=False)
    assert out.status == 303
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 0
    assert (await app_client.get("/rfps", allow_redirects=False)).status == 303  # signed out
    assert await conn.fetchval("SELECT count(*) FROM web_sessions") == 2  # the old one waits
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1, **CONNECT)
    try:
        assert await housekeeping.prune_sessions(pool) == 1  # the old one
        await conn.execute("UPDATE web_sessions SET revoked_at = now() - interval '2 days'")
        assert await housekeeping.prune_sessions(pool) == 1  # the signed-out one, a day on
    finally:
        await pool.close()
    assert await conn.fetchval("SELECT count(*) FROM web_sessions") == 0


async def test_sign_out__of_a_session_already_over_removes_its_cookie(app_client, admin, conn):
    """It was a 401 page that left the dead cookie in the browser."""
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    await conn.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
    out = await app_client.post("/signout", data={"csrf_token": csrf}, allow_redirects=False)
    assert out.status == 303 and out.headers["Location"] == "/signin?done=signed_out"
    assert any(c.startswith("rfp_session=") and "Max-Age=0" in c for c in out.headers.getall("Set-Cookie"))
    # A live session's sign-out still needs its form token.
    csrf = await sign_in(app_client, admin.email)
    refused = await app_client.post("/signout", data={"csrf_token": "stale"}, allow_redirects=False)
    assert refused.status == 403
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL"
                               " AND expires_at > now()") == 1


async def test_sign_in__wrong_password_unconfirmed_and_throttled_as_the_api(
    app_client, admin, conn, config
):
    await set_password(conn, admin.email)
    form = await app_client.get("/signin")
    token = field(await form.text(), "sign_in_token")
    wrong = await app_client.post(
        "/signin", data={"email": admin.email, "password": "not the password", "sign_in_token": token}
    )
    assert wrong.status == 401
    assert "wrong e-mail address or password" in await wrong.text()
    await conn.execute("UPDATE users SET confirmed_at = NULL WHERE lower(email) = lower($1)", admin.email)
    token = field(await wrong.text(), "sign_in_token")
    unconfirmed = await app_client.post(
        "/signin", data={"email": admin.email, "password": PASSWORD, "sign_in_token": token}
    )
    assert unconfirmed.status == 403 and "confirm your e-mail address" in await unconfirmed.text()
    # The API's per-address bucket (members.sign_in_per_email): the page's failures count in it.
    limit = config.members.sign_in_per_email.limit
    for _ in range(limit):
        token = field(await (await app_client.get("/signin")).text(), "sign_in_token")
        await app_client.post(
            "/signin", data={"email": admin.email, "password": "nope", "sign_in_token": token}
        )
    api = await app_client.post("/api/v1/tokens", json={"email": admin.email, "password": "nope"})
    assert api.status == 429


async def test_sign_in__without_the_form_token_is_refused(app_client, admin, conn):
    await set_password(conn, admin.email)
    response = await app_client.post("/signin", data={"email": admin.email, "password": PASSWORD})
    assert response.status == 403
    assert await conn.fetchval("SELECT count(*) FROM web_sessions") == 0


async def test_sign_in_page__signed_in_already_goes_where_next_says(app_client, admin, conn):
    """A signed-in user sent to /signin?next=… (a tab whose session had ended, signed in again in
    another) got the form again: the check for a session read a key the page never sets."""
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    for asked, lands in (("/kb?q=backups", "/kb?q=backups"), ("//evil.example/x", "/rfps")):
        response = await app_client.get("/signin", params={"next": asked}, allow_redirects=False)
        assert (response.status, response.headers.get("Location")) == (303, lands), asked
    form = await app_client.get("/signin", allow_redirects=False)  # to sign in as someone else
    assert form.status == 200 and field(await form.text(), "sign_in_token")


async def test_pages__need_a_session(app_client, admin, make_rfp):
    rfp_id = await make_rfp(admin)
    for path in ("/rfps", f"/rfps/{rfp_id}", "/items", "/kb", "/ask", "/members"):
        response = await app_client.get(path, allow_redirects=False)
        assert response.status == 303, path
        assert response.headers["Location"].startswith("/signin?next=")
    refused = await app_client.post(f"/rfps/{rfp_id}/answer", allow_redirects=False)
    assert refused.status == 401 and "text/html" in refused.headers["Content-Type"]


async def test_csrf__a_post_without_the_token_or_from_another_site_is_refused(app_client, admin, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    missing = await app_client.post("/rfps", data={"title": "Forged"})
    assert missing.status == 403
    stale = await app_client.post("/rfps", data={"title": "Forged", "csrf_token": "x" * 43})
    assert stale.status == 403
    cross = await app_client.post(
        "/rfps", data={"title": "Forged", "csrf_token": csrf}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status == 403
    assert await conn.fetchval("SELECT count(*) FROM rfps") == 0
    made = await app_client.post("/rfps", data={"title": "Real", "csrf_token": csrf}, allow_redirects=False)
    assert made.status == 303 and made.headers["Location"].startswith("/rfps/rfp_")


async def test_viewer__sees_no_write_control_and_a_forged_post_is_refused(
    app_client, admin, make_member, make_rfp, conn
):
    viewer = await make_member(admin.account_id, role="viewer")
    await set_password(conn, viewer.email)
    rfp_id = await make_rfp(admin, "Acme review")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer) "
        "VALUES ('item_v1', $1, 'Do you encrypt?', 1, 'auto_answered', 'Yes.')", rfp_id,
    )
    csrf = await sign_in(app_client, viewer.email)
    listing = await (await app_client.get("/rfps")).text()
    assert "Create RFP" not in listing
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert "Do you encrypt?" in page
    # No form posts anywhere but sign-out; no answer box, no item buttons.
    assert post_actions(page) == ["/signout"]
    assert "<textarea" not in page and 'name="action"' not in page
    forged = await app_client.post(
        f"/rfps/{rfp_id}/items/item_v1", data={"csrf_token": csrf, "action": "approve", "answer": "Yes."}
    )
    assert forged.status == 403
    assert await conn.fetchval("SELECT state::text FROM rfp_items WHERE id = 'item_v1'") == "auto_answered"
    for path in ("/rfps", "/items", "/kb", "/members"):
        assert post_actions(await (await app_client.get(path)).text()) == ["/signout"], path


async def test_answer_all_button__an_inactive_account_is_refused_with_nothing_pending(
    app_client, admin, make_rfp, conn
):
    """It redirected with "0 started" as if the account could answer."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Nothing pending")
    csrf = await sign_in(app_client, admin.email)
    await conn.execute("UPDATE accounts SET subscription_status = 'inactive' WHERE id = $1",
                       admin.account_id)
    refused = await app_client.post(f"/rfps/{rfp_id}/answer", data={"csrf_token": csrf},
                                    allow_redirects=False)
    assert refused.status == 403
    assert "no active subscription; items cannot be answered" in await refused.text()


async def _three_items_two_credits(
    client: TestClient, make_account: Any, make_rfp: Any, conn: Any, tag: str
) -> tuple[str, str]:
    """An account of 2 credits signed in, its RFP of 3 pending items (item_<tag>1 … 3): the RFP's
    id and the session's CSRF token."""
    admin = await make_account(credits=2)
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.executemany("INSERT INTO rfp_items (id, rfp_id, question, position) VALUES ($1, $2, $3, $4)",
                           [(f"item_{tag}{n}", rfp_id, f"Question {n}?", n) for n in (1, 2, 3)])
    return rfp_id, await sign_in(client, admin.email)


async def test_answer_all_button__short_of_credits_offers_the_first_items_they_pay_for(
    app_client, make_account, make_rfp, conn
):
    """"Answer all" was all or nothing: with 2 credits and 3 pending items, an error page and no
    way to answer any. The page now says what it costs and offers the first two."""
    rfp_id, csrf = await _three_items_two_credits(app_client, make_account, make_rfp, conn, "c")
    refused = await app_client.post(f"/rfps/{rfp_id}/answer", allow_redirects=False,
                                    data={"csrf_token": csrf, "back": "?state=needs_input&page=1"})
    assert refused.status == 303
    assert refused.headers["Location"] == f"/rfps/{rfp_id}?state=needs_input&page=1&short=1#answer-short"
    shown = await app_client.get(refused.headers["Location"])
    text = await shown.text()
    assert shown.status == 200, text[-1500:]
    assert "Answering all 3 pending items costs 3 credits; the account has 2." in text
    assert field(text, "max_items") == "2"
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0
    sent = await app_client.post(f"/rfps/{rfp_id}/answer", allow_redirects=False,
                                 data={"csrf_token": csrf, "back": "?page=1", "max_items": "2"})
    assert sent.status == 303 and "answering=2" in sent.headers["Location"]
    started = await conn.fetch("SELECT id FROM rfp_items WHERE question_id IS NOT NULL ORDER BY position")
    assert [r["id"] for r in started] == ["item_c1", "item_c2"]
    broke = await (await app_client.get(f"/rfps/{rfp_id}?short=1")).text()
    assert "the account has 0" in broke and "Ask the service's operator for more credits." in broke
    for bad in ("0", "x", "9" * 40):
        invalid = await app_client.post(f"/rfps/{rfp_id}/answer", data={"csrf_token": csrf, "max_items": bad})
        said = await invalid.text()
        assert invalid.status == 422 and "The number of items to answer:" in said, bad


async def test_answer_first_items__the_page_says_what_they_left_pending_once_answered(
    app_client, make_account, make_rfp, conn
):
    """"Answer the first 2 pending items" ended on the page as it was, 3 items counted as
    "0 to review · 2 need input · 0 approved": nothing said the third was still pending, nor why."""
    rfp_id, csrf = await _three_items_two_credits(app_client, make_account, make_rfp, conn, "f")
    sent = await app_client.post(f"/rfps/{rfp_id}/answer", allow_redirects=False,
                                 data={"csrf_token": csrf, "back": "?page=1", "max_items": "2"})
    assert sent.headers["Location"] == f"/rfps/{rfp_id}?page=1&first=2&answering=2#progress"
    # The workers may have answered both already; the page is read with both still in flight.
    await wait_all_complete(conn, 15)
    await conn.execute("UPDATE rfp_items SET state = 'pending' WHERE question_id IS NOT NULL")
    running = await (await app_client.get(sent.headers["Location"])).text()
    assert 'id="answered-first"' not in running  # said once they are answered, not before
    await conn.execute("UPDATE rfp_items SET question_id = NULL, state = 'needs_input', answer = 'x'"
                       " WHERE question_id IS NOT NULL")
    # The script's reload when the progress ends drops answering=, keeping first=.
    done = await (await app_client.get(f"/rfps/{rfp_id}?page=1&first=2")).text()
    assert ("Answered the first 2 pending items. 1 item is still pending: answering it costs"
            " 1 credit, and the account has 0. Ask the service's operator for more credits.") in done
    plain = await (await app_client.get(f"/rfps/{rfp_id}?first=²")).text()
    assert 'id="answered-first"' not in plain


async def test_rfp_page__counts_the_items_not_answered_and_names_an_untitled_source_by_its_question(
    app_client, admin, make_rfp, conn
):
    """The stats line ("N items · to review · need input · approved") counted no pending item, so
    its numbers did not add up while items waited; "Drawn from:" showed an entry without title or
    external id as its internal id (kb_…)."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    refs = ('[{"kb_item_id": "kb_untitled", "title": null, "external_id": null, "used": true,'
            ' "question": "Do you encrypt backups at rest with keys you manage yourselves?"}]')
    await conn.execute("INSERT INTO questions (id, account_id, user_id, question, state, \"references\")"
                       " VALUES ('q_refs', $1, $2, 'Backups?', 'complete', $3::jsonb)",
                       admin.account_id, admin.user_id, refs)
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, question_id) VALUES"
        " ('item_p1', $1, 'One?', 1, 'pending', NULL, NULL),"
        " ('item_p2', $1, 'Backups?', 2, 'auto_answered', 'Yes.', 'q_refs')", rfp_id)
    await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert '<span data-stat="pending_items">1</span> not answered yet' in page
    assert ">Do you encrypt backups at rest with keys you manage yourselves?</a>" in page
    assert ">kb_untitled</a>" not in page
    progress = await (await app_client.get(f"/rfps/{rfp_id}/progress")).json()
    assert progress["pending_items"] == 1


async def test_rfp_page__another_accounts_rfp_is_the_404_page(
    app_client, admin, make_account, make_rfp, conn
):
    other = await make_account("Other")
    theirs = await make_rfp(other, "Their secret RFP")
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    response = await app_client.get(f"/rfps/{theirs}")
    assert response.status == 404
    text = await response.text()
    assert "Page not found" in text and "Their secret RFP" not in text
    assert (await app_client.get("/rfps/rfp_nope")).status == 404


async def test_sign_in__the_cookie_is_secure_when_served_over_https(aiohttp_client, config, admin, conn):
    client = await aiohttp_client(create_app(config))  # web_base_url https://app.example.test
    await set_password(conn, admin.email)
    form = await client.get("/signin")
    response = await client.post(
        "/signin", allow_redirects=False,
        data={
            "email": admin.email, "password": PASSWORD,
            "sign_in_token": field(await form.text(), "sign_in_token"),
        },
        # the test client speaks http and would not send the form's Secure cookie back: send it
        cookies={"rfp_sign_in": field(await form.text(), "sign_in_token")},
    )
    assert response.status == 303
    cookies = response.headers.getall("Set-Cookie")
    session_cookie = next(c for c in cookies if c.startswith("rfp_session="))
    assert "Secure" in session_cookie and "HttpOnly" in session_cookie
    assert "SameSite=Lax" in session_cookie


def questionnaire_xlsx() -> bytes:
    """A realistic questionnaire: an instructions sheet first, then the questions with sections."""
    from openpyxl import Workbook

    book = Workbook()
    notes = book.active
    notes.title = "Instructions"
    notes.append(["Please answer every question in the Questions sheet."])
    sheet = book.create_sheet("Questions")
    sheet.append(["ID", "Category", "Question", "Vendor response"])
    sheet.append(["AC-1", "Access control", "Do you enforce multi-factor authentication?", ""])
    sheet.append(["AC-2", "", "Are access reviews performed quarterly?", ""])
    sheet.append(["", "", "", ""])
    sheet.append(["DP-1", "Data protection", "Is customer data encrypted at rest?", ""])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


async def upload(client: TestClient, rfp_id: str, csrf: str, body: bytes, name: str) -> Any:
    from aiohttp import FormData

    form = FormData()
    form.add_field("csrf_token", csrf)
    form.add_field("file", body, filename=name)
    return await client.post(f"/rfps/{rfp_id}/import", data=form)


async def test_upload_form__many_fields_before_the_file_are_refused(app_client, admin, conn):
    # The web app's upload form read every part before the file, as many as were sent.
    from aiohttp import FormData

    from service.web.body import MAX_PARTS_BEFORE_FILE

    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    made = await app_client.post("/rfps", data={"title": "Parts", "csrf_token": csrf}, allow_redirects=False)
    rfp_id = made.headers["Location"].rsplit("/", 1)[1]
    form = FormData()
    form.add_field("csrf_token", csrf)
    for i in range(MAX_PARTS_BEFORE_FILE):
        form.add_field(f"x{i}", "v")
    form.add_field("file", questionnaire_xlsx(), filename="acme.xlsx")
    refused = await app_client.post(f"/rfps/{rfp_id}/import", data=form)
    assert refused.status == 400
    assert "fields before its file" in await refused.text()
    accepted = await upload(app_client, rfp_id, csrf, questionnaire_xlsx(), "acme.xlsx")
    assert accepted.status == 200  # the report, its page (303)


async def test_rfp_page__import_answer_review_export(app_client, admin, conn):
    await set_password(conn, admin.email)
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer, title) VALUES "
        "('kb_mfa', $1, 'Do you enforce multi-factor authentication?', "
        "'Yes, MFA is enforced for every account.', 'MFA policy')", admin.account_id,
    )
    csrf = await sign_in(app_client, admin.email)
    made = await app_client.post(
        "/rfps", data={"title": "Acme security review", "deadline": "2030-06-30", "csrf_token": csrf},
        allow_redirects=False,
    )
    rfp_id = made.headers["Location"].rsplit("/", 1)[1]
    forged = await upload(app_client, rfp_id, "not-the-token", questionnaire_xlsx(), "acme.xlsx")
    assert forged.status == 403
    report = await upload(app_client, rfp_id, csrf, questionnaire_xlsx(), "acme.xlsx")
    text = await report.text()
    assert report.status == 200 and "/imports/imp_" in str(report.url), text  # (303 to it)
    assert "3 items added" in text and "Questions" in text
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert page.index("Access control") < page.index("Data protection")
    answered = await app_client.post(
        f"/rfps/{rfp_id}/answer", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert answered.status == 303
    for _ in range(100):
        progress = await (await app_client.get(f"/rfps/{rfp_id}/progress")).json()
        if progress["in_flight"] == 0:
            break
        await asyncio.sleep(0.1)
    assert progress["in_flight"] == 0 and progress["total_items"] == 3
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert 'href="/kb/kb_mfa"' in page  # the reference links to its entry
    # The band in words as well as colour.
    assert re.search(r'class="band band-(auto_answer|review|needs_input)">(Auto-answer|Review|Needs input)',
                     page)
    item_id = await conn.fetchval("SELECT id FROM rfp_items WHERE rfp_id = $1 AND position = 1", rfp_id)
    approved = await app_client.post(
        f"/rfps/{rfp_id}/items/{item_id}", allow_redirects=False,
        data={"csrf_token": csrf, "action": "save_to_kb", "answer": "Yes: MFA everywhere."},
    )
    assert approved.status == 303 and approved.headers["Location"].endswith(f"#item-{item_id}")
    row = await conn.fetchrow(
        "SELECT state::text, answer, knowledge_item_id FROM rfp_items WHERE id = $1", item_id
    )
    assert row["state"] == "approved" and row["answer"] == "Yes: MFA everywhere."
    assert row["knowledge_item_id"] is not None
    approved_only = await (await app_client.get(f"/rfps/{rfp_id}?state=approved")).text()
    assert "Yes: MFA everywhere." in approved_only and "encrypted at rest" not in approved_only
    api = await app_client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)
    assert (await api.json())["stats"]["approved_items"] == 1
    empty = await app_client.post(
        f"/rfps/{rfp_id}/items/{item_id}", data={"csrf_token": csrf, "action": "approve", "answer": " "}
    )
    assert empty.status == 422 and "needs an answer" in await empty.text()
    csv_export = await app_client.get(f"/rfps/{rfp_id}/export?format=csv")
    assert csv_export.status == 200 and "Yes: MFA everywhere." in await csv_export.text()
    xlsx = await app_client.get(f"/rfps/{rfp_id}/export?format=xlsx")
    assert xlsx.status == 200 and (await xlsx.read())[:2] == b"PK"
    assert (await app_client.get(f"/rfps/{rfp_id}/export?format=pdf")).status == 400
    # The imported questionnaire with the approved answer written back into its cells.
    original = await app_client.get(f"/rfps/{rfp_id}/export?format=original")
    assert original.status == 200, await original.text()
    from openpyxl import load_workbook

    book = load_workbook(io.BytesIO(await original.read()))
    assert "Yes: MFA everywhere." in [c.value for row in book["Questions"].iter_rows() for c in row]


async def test_review_form__an_answer_sent_back_unchanged_leaves_an_item_being_answered_alone(
    app_client, admin, make_rfp, conn
):
    """A browser sends a textarea's line breaks as CRLF (HTML's form encoding). Stored as sent,
    an unchanged multi-line answer read as rewritten: saving it took an item still being
    answered over, and its answer came out with CRLF in every export."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Line breaks")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, question_id) VALUES"
        " ('item_lf', $1, 'Describe your backups.', 1, 'pending', E'Nightly.\\nKept 30 days.', 'q_busy')",
        rfp_id,
    )
    csrf = await sign_in(app_client, admin.email)
    saved = await app_client.post(
        f"/rfps/{rfp_id}/items/item_lf", allow_redirects=False,
        data={"csrf_token": csrf, "action": "save", "answer": "Nightly.\r\nKept 30 days."},
    )
    assert saved.status == 303, await saved.text()
    row = await conn.fetchrow("SELECT answer, question_id FROM rfp_items WHERE id = 'item_lf'")
    assert row["answer"] == "Nightly.\nKept 30 days." and row["question_id"] == "q_busy"


async def test_review_form__a_deadlock_is_the_503_page_saying_to_try_again(app_client, admin, make_rfp, conn):
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Deadlock")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position)"
                       " VALUES ('item_dp', $1, 'Is data encrypted?', 1)", rfp_id)
    csrf = await sign_in(app_client, admin.email)
    async with item_updates_failing(conn, "40P01", "deadlock detected"):
        response = await app_client.post(
            f"/rfps/{rfp_id}/items/item_dp", allow_redirects=False,
            data={"csrf_token": csrf, "action": "save", "answer": "A draft."})
    assert response.status == 503
    assert "another change made at the same moment" in await response.text()
    assert await conn.fetchval("SELECT answer FROM rfp_items WHERE id = 'item_dp'") is None


async def test_knowledge_pages__add_search_edit_import_delete(app_client, admin, conn):
    from aiohttp import FormData

    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    added = await app_client.post("/kb", allow_redirects=False, data={
        "csrf_token": csrf, "answer": "Backups run nightly.", "title": "Backups", "tags": "ops; dr",
    })
    assert added.status == 303
    kb_id = added.headers["Location"].split("?")[0].rsplit("/", 1)[1]
    found = await (await app_client.get("/kb?q=nightly")).text()
    assert "Backups" in found
    assert "Backups" not in await (await app_client.get("/kb?q=zzz")).text()
    invalid = await app_client.post(f"/kb/{kb_id}", data={"csrf_token": csrf, "answer": " "})
    assert invalid.status == 422 and "answer" in await invalid.text()
    edited = await app_client.post(f"/kb/{kb_id}", allow_redirects=False, data={
        "csrf_token": csrf, "answer": "Backups run hourly.", "title": "Backups", "yes_no": "yes",
    })
    assert edited.status == 303
    row = await conn.fetchrow("SELECT answer, yes_no, tags FROM knowledge_items WHERE id = $1", kb_id)
    assert row["answer"] == "Backups run hourly." and row["yes_no"] is True and row["tags"] == []
    cleared = await app_client.post(f"/kb/{kb_id}", allow_redirects=False, data={  # as the form sends it
        "csrf_token": csrf, "question": "", "answer": "Backups run hourly.", "title": " ", "source": "",
        "tags": "", "yes_no": "yes",
    })
    assert cleared.status == 303
    assert await conn.fetchval("SELECT title FROM knowledge_items WHERE id = $1", kb_id) is None
    form = FormData()
    form.add_field("csrf_token", csrf)
    form.add_field("file", b"question,answer\nIs there a DPO?,Yes.\nNo answer here,\n", filename="kb.csv")
    report = await app_client.post("/kb/import", data=form)
    text = await report.text()
    assert report.status == 200 and "1 row imported" in text and "1 rejected" in text
    deleted = await app_client.post(
        f"/kb/{kb_id}/delete", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert deleted.status == 303
    assert (await app_client.get(f"/kb/{kb_id}")).status == 404


async def test_ask_page__the_question_reaches_complete(app_client, admin, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    asked = await app_client.post(
        "/ask", data={"csrf_token": csrf, "question": "Do you have a DPO?"}, allow_redirects=False
    )
    assert asked.status == 303
    path = asked.headers["Location"]
    for _ in range(100):
        state = (await (await app_client.get(path + "/state")).json())["state"]
        if state == "complete":
            break
        await asyncio.sleep(0.1)
    assert state == "complete"
    page = await (await app_client.get(path)).text()
    assert 'aria-current="step" class="current">complete' in page
    assert re.search(r'class="band band-[a-z_]+">', page)
    # Asked as through the API: charged, and audited as the signed-in member.
    audited = await conn.fetch("SELECT record_id, actor_id FROM audit_events WHERE action = 'question.asked'")
    assert [(r["record_id"], r["actor_id"]) for r in audited] == [(path.rsplit("/", 1)[1], admin.member_id)]


async def test_ask_page__says_what_each_detail_level_gives(app_client, admin, conn):
    """The Detail select (Low, Normal, High) was explained nowhere; its hint says what the local
    engine keeps at each level (engines/local.py's SENTENCES)."""
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    page = await (await app_client.get("/ask")).text()
    assert 'aria-describedby="detail-hint"' in page
    hint = re.search(r'<p class="muted" id="detail-hint">([^<]*)</p>', page).group(1)
    low, normal, high = SENTENCES
    assert f"Low: {'one' if low == 1 else low} sentence" in hint
    assert f"up to {normal} of an entry's sentences" in hint and f"High: up to {high} sentences" in hint


async def test_ask_page__shares_the_apis_ask_rate_limit(aiohttp_client, config, admin, conn):
    # The form is another door to the same charged asking: it takes from the member's
    # ask_question bucket (a probe asked 30 times in 0.6 s here once the API answered 429).
    limited = with_config(config, server={"web_base_url": "http://localhost"},
                          rate_limits={"ask_question": {"limit": 2, "period_seconds": 3600}})
    client = await aiohttp_client(create_app(limited))
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    api = await client.post("/api/v1/questions", headers=admin.headers,
                            json={"question": {"question": "Do you have a DPO?"}})
    assert api.status == 202
    asked = await client.post("/ask", allow_redirects=False,
                              data={"csrf_token": csrf, "question": "Do you have a DPO?"})
    assert asked.status == 303
    refused = await client.post("/ask", allow_redirects=False,
                                data={"csrf_token": csrf, "question": "Do you have a DPO?"})
    assert refused.status == 429 and "too many requests" in (await refused.text())
    assert "Retry-After" in refused.headers
    api = await client.post("/api/v1/questions", headers=admin.headers,
                            json={"question": {"question": "Do you have a DPO?"}})
    assert api.status == 429
    assert await conn.fetchval("SELECT count(*) FROM questions") == 2


async def test_ask_page__a_detail_level_of_any_digits_is_a_4xx_naming_it(app_client, admin, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    for level in ("9" * 4400, "²", "7"):  # int() refuses the first two; the third is out of range
        asked = await app_client.post("/ask", allow_redirects=False, data={
            "csrf_token": csrf, "question": "Do you have a DPO?", "detail_level": level})
        assert 400 <= asked.status < 500, (level[:5], asked.status)
        assert "detail" in (await asked.text()).lower()
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0


async def test_members_page__admin_invites_a_member_sees_no_invite_form(
    app_client, admin, make_member, conn
):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    invited = await app_client.post(
        "/members/invite", data={"csrf_token": csrf, "email": "grace@example.test", "role": "viewer"}
    )  # followed to /members (POST/redirect/GET: a reload sends nothing again)
    assert invited.status == 200 and "Invitation sent." in await invited.text()
    assert invited.url.path_qs == "/members?done=invited"
    role = await conn.fetchval("SELECT role::text FROM invitations WHERE email = 'grace@example.test'")
    assert role == "viewer"
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox") == 1
    member = await make_member(admin.account_id, role="member")
    await set_password(conn, member.email)
    await app_client.post("/signout", data={"csrf_token": csrf})
    member_csrf = await sign_in(app_client, member.email)
    page = await (await app_client.get("/members")).text()
    assert member.email in page and "/members/invite" not in page
    refused = await app_client.post(
        "/members/invite", data={"csrf_token": member_csrf, "email": "x@example.test"}
    )
    assert refused.status == 403


@pytest.mark.parametrize(("setting", "second"), [
    ("account_mails_per_hour", "b@example.test"),  # the account's e-mails of the hour
    ("invitation_mails_per_hour", "A@example.test"),  # those to one address, in any case
])
async def test_members_page__an_invitation_past_a_mail_bound_is_a_429_page(
    aiohttp_client, config, admin, conn, setting, second,
):
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, mail={setting: 1})))
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    invited = await client.post("/members/invite", data={"csrf_token": csrf, "email": "a@example.test"})
    assert invited.status == 200 and "Invitation sent." in await invited.text()
    refused = await client.post("/members/invite", data={"csrf_token": csrf, "email": second})
    assert refused.status == 429
    assert f"mail.{setting}" in await refused.text()
    assert 3590 <= int(refused.headers["Retry-After"]) <= 3600
    assert await conn.fetchval("SELECT count(*) FROM invitations") == 1


async def test_unknown_page__is_the_404_page_for_a_browser_and_json_for_the_api(app_client):
    page = await app_client.get("/no/such/page", headers={"Accept": "text/html"})
    assert page.status == 404 and "Page not found" in await page.text()
    api = await app_client.get("/api/v1/nothing", headers={"Accept": "text/html"})
    assert api.status == 404 and (await api.json())["error"]["code"] == "not_found"


async def test_form_address__opened_in_a_browser_is_a_page_saying_so(app_client, admin, make_rfp, conn):
    """The import's report is shown at the address the form was sent to (/rfps/{id}/import);
    opened again from the address bar or the history, a GET there was the API's JSON ("GET is not
    allowed here; allowed: POST"). A browser now gets a page in the app's look, in words, still
    405 with Allow; the API's 405, and one not asked for HTML, stay JSON."""
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    rfp = await make_rfp(admin)
    html = {"Accept": "text/html"}
    for path, allowed in ((f"/rfps/{rfp}/import", "POST"), ("/kb/import", "POST"),
                          ("/members/invite", "POST")):
        page = await app_client.get(path, headers=html)
        text = await page.text()
        assert (page.status, page.headers["Allow"]) == (405, allowed), path
        assert page.content_type == "text/html" and "form-action 'self'" in page.headers[
            "Content-Security-Policy"]
        assert "This address is where a form is sent" in text and "allowed: POST" not in text
        assert 'action="/signout"' in text  # the signed-in navigation
    api = await app_client.get("/api/v1/rfps", headers=html)
    assert api.status == 405 and (await api.json())["error"]["code"] == "method_not_allowed"
    bare = await app_client.get(f"/rfps/{rfp}/import")
    assert bare.status == 405 and (await bare.json())["error"]["code"] == "method_not_allowed"


async def test_members_page__admin_changes_a_role_and_removes_a_member_whose_session_ends(
    aiohttp_client, config, admin, make_member, conn
):
    plain = with_config(config, server={"web_base_url": "http://localhost"})
    admin_client = await aiohttp_client(create_app(plain))
    member_client = await aiohttp_client(create_app(plain))
    member = await make_member(admin.account_id, role="member")
    for who in (admin, member):
        await set_password(conn, who.email)
    csrf = await sign_in(admin_client, admin.email)
    await sign_in(member_client, member.email)
    page = await (await admin_client.get("/members")).text()
    assert f'/members/{member.member_id}/role' in page and f'/members/{admin.member_id}/remove' not in page
    changed = await admin_client.post(
        f"/members/{member.member_id}/role", data={"csrf_token": csrf, "role": "viewer"},
        allow_redirects=False,
    )
    assert changed.status == 303
    assert changed.headers["Location"] == f"/members?done=role#member-{member.member_id}"
    assert "Role changed." in await (await admin_client.get("/members?done=role")).text()
    # The member's open session has the new role at once: no write control any more.
    assert post_actions(await (await member_client.get("/rfps")).text()) == ["/signout"]
    owner = await admin_client.post(
        f"/members/{admin.member_id}/role", data={"csrf_token": csrf, "role": "viewer"}
    )
    assert owner.status == 403  # the owner keeps the admin role (members.change_role)
    removed = await admin_client.post(
        f"/members/{member.member_id}/remove", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert removed.status == 303 and removed.headers["Location"] == "/members?done=removed"
    assert "Member removed." in await (await admin_client.get("/members?done=removed")).text()
    gone = await member_client.get("/rfps", allow_redirects=False)
    assert gone.status == 303 and gone.headers["Location"].startswith("/signin")


def test_sign_in__goes_back_only_to_a_page_of_this_site():
    from service.web.pages.account import _safe_next

    assert _safe_next("/rfps/rfp_1?state=review") == "/rfps/rfp_1?state=review"
    for unsafe in ("https://evil.example/", "//evil.example", "/\\evil.example", "/\t/evil.example",
                   "/\n/evil.example", "", None, "rfps"):
        assert _safe_next(unsafe) == "/rfps", unsafe


async def test_csrf__every_post_route_refuses_a_request_without_the_token(app_client, admin, conn, make_rfp):
    """Every state-changing page route (service/web/pages/routes.py), as a signed-in admin who
    may do all of them, refuses the request without the session's CSRF token."""
    from service.web.pages.routes import routes

    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    rfp_id = await make_rfp(admin, "Target")
    ids = {"id": rfp_id, "item_id": "item_x"}
    before = await conn.fetchval("SELECT count(*) FROM rfps")
    # The forms sent without a session have a token of their own (test_pages_accounts.py).
    signed_out = (
        "/signin", "/invitations/{token}", "/confirm", "/password/forgot", "/password/reset")
    posts = [r for r in routes() if r.method == "POST" and r.path not in signed_out]
    assert len(posts) >= 12
    for route in posts:
        path = route.path.format(**ids)
        plain = await app_client.post(path, data={"title": "x", "answer": "x", "action": "approve"})
        assert plain.status == 403, path
        from aiohttp import FormData

        form = FormData()
        form.add_field("file", b"question\nIs it?\n", filename="q.csv")
        upload = await app_client.post(path, data=form)
        assert upload.status == 403, path
    assert await conn.fetchval("SELECT count(*) FROM rfps") == before
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 1


async def test_csrf__every_form_of_every_page_carries_the_token(app_client, admin, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    made = await app_client.post("/rfps", data={"title": "Forms", "csrf_token": csrf}, allow_redirects=False)
    rfp_path = made.headers["Location"]
    rfp_id = rfp_path.rsplit("/", 1)[1]
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer) VALUES "
        "('item_f1', $1, 'Q1?', 1, 'auto_answered', 'A1'), ('item_f2', $1, 'Q2?', 2, 'discarded', 'A2')",
        rfp_id,
    )
    kb = await app_client.post("/kb", data={"csrf_token": csrf, "answer": "A"}, allow_redirects=False)
    pages = ["/rfps", rfp_path, "/items", "/kb", kb.headers["Location"], "/ask", "/members"]
    for path in pages:
        html = await (await app_client.get(path)).text()
        forms = re.findall(r"<form[^>]*method=\"post\"[^>]*>.*?</form>", html, re.S)
        assert forms, path
        for form in forms:
            assert f'name="csrf_token" value="{csrf}"' in form, (path, form[:200])


async def test_pages__writes_are_audited_as_the_apis_are(app_client, admin, conn):
    """The pages go through the API's steps: the same audit events for the same changes."""
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    made = await app_client.post(
        "/rfps", data={"title": "Audited", "csrf_token": csrf}, allow_redirects=False
    )
    rfp_id = made.headers["Location"].rsplit("/", 1)[1]
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer) "
        "VALUES ('item_a1', $1, 'Q?', 1, 'auto_answered', 'A.')", rfp_id,
    )
    await app_client.post(f"/rfps/{rfp_id}/items/item_a1", data={"csrf_token": csrf, "action": "approve",
                                                                 "answer": "A."})
    kb = await app_client.post("/kb", data={"csrf_token": csrf, "answer": "B."}, allow_redirects=False)
    kb_id = kb.headers["Location"].split("?")[0].rsplit("/", 1)[1]
    await app_client.post(f"/kb/{kb_id}/delete", data={"csrf_token": csrf})
    actions = {r["action"] for r in await conn.fetch("SELECT action FROM audit_events")}
    assert {"auth.signed_in", "rfp.created", "rfp_item.updated", "rfp_item.approved", "rfp.approved",
            "knowledge_base_item.created", "knowledge_base_item.deleted"} <= actions


async def test_library_care_page__stale_entries_marked_reviewed_and_duplicates_listed(
    app_client, admin, make_member, conn
):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES"
        " ('kb_old', $1, 'Is there a retention policy?', 'Logs are kept 30 days.'),"
        " ('kb_new', $1, 'Is there a retention policy for logs?', 'Logs are kept 90 days.')",
        admin.account_id,
    )
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 10 WHERE id = 'kb_old'")
    page = await (await app_client.get("/kb/care")).text()
    assert "1 entry past its review date" in page and 'href="/kb/kb_old"' in page
    assert 'action="/kb/kb_old/reviewed"' in page and f'value="{csrf}"' in page
    assert "Library care" in await (await app_client.get("/kb")).text()  # linked from the list

    done = await app_client.post("/kb/kb_old/reviewed", data={"csrf_token": csrf}, allow_redirects=False)
    assert done.status == 303
    assert await conn.fetchval("SELECT review_by > current_date FROM knowledge_items WHERE id = 'kb_old'")
    assert "0 entries past their review date" in await (await app_client.get("/kb/care")).text()

    # The duplicate run the first visit started: the two retention entries disagree (30 vs 90 days).
    for _ in range(50):
        page = await (await app_client.get("/kb/care")).text()
        if "Being computed" not in page and "kb_new" in page:
            break
        await asyncio.sleep(0.2)
    assert 'href="/kb/kb_new"' in page and 'href="/kb/kb_old"' in page

    viewer = await make_member(admin.account_id, role="viewer")
    await set_password(conn, viewer.email)
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 1 WHERE id = 'kb_old'")
    viewer_csrf = await sign_in(app_client, viewer.email)
    assert post_actions(await (await app_client.get("/kb/care")).text()) == ["/signout"]
    forged = await app_client.post("/kb/kb_old/reviewed", data={"csrf_token": viewer_csrf})
    assert forged.status == 403


async def test_review_page__a_long_item_is_cut_and_reviewed_alone_whole(
    app_client, admin, make_rfp, conn
):
    """A page of 100 items of 100,000 characters was a 62 MB page that held the event loop for
    0.3 s a request. A question or answer over web.item_chars_shown (10,000) is cut on the pages
    of items, with a link to the item alone, where it is whole and reviewed as any other."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Long answers")
    question = "Describe <your> \"controls\" & more. " * 1_000  # 35,000 characters
    answer = "We <do> & \"we\" document it. " * 2_000  # 56,000 characters
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, answer, position, state) VALUES"
        " ('item_short', $1, 'Is data encrypted?', 'Yes, AES-256.', 1, 'auto_answered'),"
        " ('item_long', $1, $2, $3, 2, 'auto_answered')",
        rfp_id, question, answer,
    )
    other_rfp = await make_rfp(admin, "Another RFP")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position)"
                       " VALUES ('item_elsewhere', $1, 'Elsewhere?', 1)", other_rfp)
    csrf = await sign_in(app_client, admin.email)

    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert len(page) < 60_000  # both texts whole, escaped: 151,517 characters
    assert str(escape(question[:10_000])) + "…" in page
    assert str(escape(answer[:10_000])) + "…" in page and str(escape(answer[:10_001])) not in page
    assert 'href="?item=item_long"' in page and "91,000 characters" in page
    assert 'id="a-item_short"' in page and 'id="a-item_long"' not in page  # no edit box for a cut answer

    alone = await (await app_client.get(f"/rfps/{rfp_id}?item=item_long&page=7&state=approved")).text()
    assert str(escape(question)) in alone
    assert f'<textarea id="a-item_long" name="answer" rows="3">{escape(answer)}</textarea>' in alone
    # Alone whatever the filters and page, and they are kept for the way back to the list.
    assert "item_short" not in alone
    assert f'href="/rfps/{rfp_id}?state=approved&amp;page=7#item-item_long"' in alone
    assert field(alone, "back") == "?state=approved&amp;page=7&amp;item=item_long"
    unfiltered = await (await app_client.get(f"/rfps/{rfp_id}?item=item_long")).text()
    assert f'href="/rfps/{rfp_id}#item-item_long"' in unfiltered
    assert field(unfiltered, "back") == "?item=item_long"
    saved = await app_client.post(
        f"/rfps/{rfp_id}/items/item_long", allow_redirects=False,
        data={"csrf_token": csrf, "action": "approve", "answer": answer + "Reviewed.",
              "back": "?item=item_long"},
    )
    assert saved.status == 303
    assert saved.headers["Location"] == (f"/rfps/{rfp_id}?item=item_long"
                                         "&done=approve&done_item=item_long#item-item_long")
    row = await conn.fetchrow("SELECT state::text, answer FROM rfp_items WHERE id = 'item_long'")
    assert row["state"] == "approved" and row["answer"] == answer + "Reviewed."

    for stranger in ("item_elsewhere", "item_none"):
        missing = await app_client.get(f"/rfps/{rfp_id}?item={stranger}")
        assert missing.status == 404 and "Elsewhere?" not in await missing.text()


async def test_error_page__leads_back_to_the_form_it_came_from(app_client, admin, make_rfp, conn):
    """A refused form's page led to "Your RFPs" only: the form to correct was a search away."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position) VALUES"
                       " ('item_e1', $1, 'Do you encrypt backups?', 1)", rfp_id)
    csrf = await sign_in(app_client, admin.email)
    form_page = f"/rfps/{rfp_id}?state=review&page=1"
    empty = {"csrf_token": csrf, "action": "approve", "answer": " "}
    refused = await app_client.post(f"/rfps/{rfp_id}/items/item_e1", data=empty,
                                    headers={"Referer": str(app_client.make_url(form_page))})
    assert refused.status == 422
    text = await refused.text()
    assert f'<a href="{escape(form_page)}" id="go-back" data-back>' in text
    assert '<a href="/rfps" id="way-on">Your RFPs</a>' in text
    # Another site's page, or none, is no way back.
    for headers in ({"Referer": f"https://evil.example{form_page}"}, {}):
        text = await (await app_client.get("/rfps?page=0", headers=headers)).text()
        assert "go-back" not in text and "Your RFPs" in text
    # A page number refused, from the list: back to the list. (A search term too short to run is
    # no error page: the list says so beside its box, test_search_limits_pages.py.)
    from_list = {"Referer": str(app_client.make_url("/rfps"))}
    text = await (await app_client.get("/rfps?page=0", headers=from_list)).text()
    assert '<a href="/rfps" id="go-back" data-back>' in text


async def test_error_page__of_a_session_that_ended_signs_in_back_to_the_form(
    app_client, admin, make_rfp, conn
):
    """A form sent after the session ended: signing in led to the RFP list, not back to the form."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    csrf = await sign_in(app_client, admin.email)
    await conn.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
    form_page = f"/rfps/{rfp_id}?page=2"
    refused = await app_client.post(f"/rfps/{rfp_id}/answer", data={"csrf_token": csrf},
                                    headers={"Referer": str(app_client.make_url(form_page))})
    assert refused.status == 401
    text = await refused.text()
    link = f"/signin?next=/rfps/{rfp_id}%3Fpage%3D2"
    assert f'<a href="{link}" id="way-on">Sign in</a>' in text
    assert "go-back" not in text
    # The sign-in form it opens goes on to the form's page.
    assert field(await (await app_client.get(link)).text(), "next") == form_page


async def test_rfp_page__past_its_last_page_leads_to_the_first(app_client, admin, make_rfp, conn):
    """A page past the last (the way back of a form whose item left the filter: the last item
    of page 2 of "review", approved) said "No items in this filter", or "No items. Upload a
    questionnaire to add them." of an RFP holding items."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position, state, answer) VALUES"
                       " ('item_p1', $1, 'Do you encrypt backups?', 1, 'auto_answered', 'Yes.')", rfp_id)
    await sign_in(app_client, admin.email)
    for query, first in (("page=2", f"/rfps/{rfp_id}"), ("state=review&assignee=me&page=3",
                                                           "?state=review&amp;assignee=me")):
        text = await (await app_client.get(f"/rfps/{rfp_id}?{query}")).text()
        assert f'<p id="past-the-end">No items on this page. <a href="{first}">First page</a></p>' in text
        assert "Upload a questionnaire to add them" not in text and "in this filter" not in text
    # Page 1 of an empty filter, or of an RFP without items, says so as before.
    text = await (await app_client.get(f"/rfps/{rfp_id}?state=approved")).text()
    assert "No items in this filter." in text and "past-the-end" not in text


async def test_review_forms__say_what_they_did_at_the_item(app_client, admin, make_rfp, conn):
    """After an item's form the page came back at the item with nothing said: an answer saved
    looked as before, and an item approved in the "review" filter was simply gone."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer) VALUES"
        " ('item_f1', $1, 'Do you encrypt backups?', 1, 'auto_answered', 'Yes.'),"
        " ('item_f2', $1, 'Is MFA enforced?', 2, 'auto_answered', 'Yes.')", rfp_id)
    csrf = await sign_in(app_client, admin.email)

    def notice(text: str) -> str | None:
        found = re.search(r'<p class="notice ok" role="status" id="done">(.*?)</p>', text)
        return found and found.group(1)

    async def send(path: str, back: str, **fields: str) -> tuple[str, str]:
        sent = await app_client.post(path, data={"csrf_token": csrf, "back": back, **fields},
                                     allow_redirects=False)
        assert sent.status == 303, await sent.text()
        text = await (await app_client.get(sent.headers["Location"])).text()
        return sent.headers["Location"], text

    location, text = await send(f"/rfps/{rfp_id}/items/item_f1", "?page=1", action="save", answer="Yes, AES.")
    assert location == f"/rfps/{rfp_id}?page=1&done=save&done_item=item_f1#item-item_f1"
    article = text[text.index('id="item-item_f1"'):text.index('id="item-item_f2"')]
    assert notice(article) == "Answer saved."
    # Approved from the "review" filter, the item leaves the list: said at the top of it.
    _, text = await send(f"/rfps/{rfp_id}/items/item_f1", "?state=review&page=1", action="approve",
                         answer="Yes, AES.")
    assert 'id="item-item_f1"' not in text
    assert notice(text) == "Approved. The item is no longer in this view."
    _, text = await send(f"/rfps/{rfp_id}/items/item_f2/assign", "", assignee_id=str(admin.user_id))
    name = await conn.fetchval("SELECT display_name(first_name, last_name, email) FROM users"
                               " WHERE id = $1", admin.user_id)
    assert notice(text) == f"Assigned to {escape(name)}."
    _, text = await send(f"/rfps/{rfp_id}/items/item_f2/assign", "", assignee_id="")
    assert notice(text) == "Unassigned: assigned to nobody."
    # Only the page's own words: another `done` says nothing.
    text = await (await app_client.get(f"/rfps/{rfp_id}?done=<b>hacked</b>&done_item=item_f2")).text()
    assert notice(text) is None and "hacked" not in text


async def test_upload_form__names_the_answer_column_and_the_report_says_where_answers_go(
    app_client, admin, make_rfp, conn
):
    """The upload form had no answer column: a questionnaire whose answer column was not found
    could not be written back from the web app, and its report did not say so (the export's
    422 said to name `answer_column`, a field no page had)."""
    from aiohttp import FormData
    from openpyxl import Workbook

    book = Workbook()
    book.active.append(["Ref", "Question", "Supplier comments"])
    book.active.append(["1", "Do you encrypt backups?", ""])
    body = io.BytesIO()
    book.save(body)
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{await make_rfp(admin, 'Form')}")).text()
    assert '<input id="answer_column" name="answer_column"' in page

    async def imported(answer_column: str) -> tuple[str, str]:
        rfp_id = await make_rfp(admin, "Acme")
        form = FormData()
        form.add_field("csrf_token", csrf)
        form.add_field("answer_column", answer_column)
        form.add_field("file", body.getvalue(), filename="acme.xlsx")
        report = await app_client.post(f"/rfps/{rfp_id}/import", data=form)
        assert report.status == 200, await report.text()  # the report, its page (303)
        return rfp_id, await report.text()

    rfp_id, text = await imported("")
    assert '<dd id="answer-column">none found</dd>' in text
    assert "No answer column was found" in text
    assert (await app_client.get(f"/rfps/{rfp_id}/export?format=original")).status == 422
    rfp_id, text = await imported("Supplier comments")
    assert '<dd id="answer-column">Supplier comments</dd>' in text
    assert "writes the approved answers into this file's column “Supplier comments”" in text
    assert (await app_client.get(f"/rfps/{rfp_id}/export?format=original")).status == 200


async def test_answer_all_button__with_nothing_pending_says_so(app_client, admin, make_rfp, conn):
    """It came back to the page with nothing said when no item was pending (all answered, or
    none yet): the button seemed to do nothing."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position, state, answer) VALUES"
                       " ('item_n1', $1, 'Do you encrypt backups?', 1, 'approved', 'Yes.')", rfp_id)
    csrf = await sign_in(app_client, admin.email)
    sent = await app_client.post(f"/rfps/{rfp_id}/answer", data={"csrf_token": csrf, "back": "?page=1"},
                                 allow_redirects=False)
    assert sent.status == 303 and "answering=0" in sent.headers["Location"]
    text = await (await app_client.get(sent.headers["Location"])).text()
    assert '<p class="notice ok" role="status" id="nothing-pending">No item was waiting' in text
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0
    # Items started: the progress says it, not this.
    assert "nothing-pending" not in await (await app_client.get(f"/rfps/{rfp_id}?answering=2")).text()
