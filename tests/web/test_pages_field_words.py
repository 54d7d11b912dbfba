"""Each form of the web app, sent with bad input: its refusal names the fields in words, as the
form's labels do ("The title: must not be blank"), never with the API's names ("rfp.title: …").
The RFP page's item forms said theirs in words already (test_pages_review_bulk.py)."""

from __future__ import annotations

import html
import re
from typing import Any

from aiohttp import FormData
from conftest import with_config

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, field, set_password, sign_in, upload_form  # noqa: F401

from service import db
from service.domain.ids import new_id
from service.domain.members import new_link_token
from service.domain.tokens import hash_token
from service.web.app import create_app

# A detail that starts with an API field's name: `rfp.title:`, `password:`, `tags[0]:`.
API_NAME = re.compile(r"^[a-z_]+(\.[a-z_]+)*(\[\d+\])*: ")


def details(page: str) -> list[str]:
    listed = re.search(r'<ul class="details">(.*?)</ul>', page, re.S)
    assert listed, page[:2000]
    return [html.unescape(item).strip() for item in re.findall(r"<li>(.*?)</li>", listed[1], re.S)]


def upload(csrf: str, content: bytes, **fields: str) -> FormData:
    return upload_form(csrf, content, "questions.csv", **fields)


async def test_forms__refusals_say_the_fields_in_words(app_client, admin, make_member, make_rfp, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp = await make_rfp(admin)
    member = await make_member(admin.account_id)
    entry = await app_client.post("/kb", data={"csrf_token": csrf, "question": "Q?", "answer": "A."})
    entry_path = entry.url.path
    csv = b"Question,Answer\nWho?,Us.\n"
    sent: list[tuple[str, Any, list[str]]] = [
        ("/rfps", {"title": "", "deadline": "tomorrow", "framework": "iso", "portal_url": "ftp://x"},
         ["The title", "The deadline", "The framework", "The portal link"]),
        ("/kb", {"question": "q" * 10_001, "answer": "", "title": "t" * 501},
         ["The answer", "The question", "The title"]),
        (entry_path, {"answer": "", "source": "s" * 501}, ["The answer", "The source"]),
        ("/ask", {"question": " ", "detail_level": "9"}, ["The question", "The detail"]),
        ("/members/invite", {"email": "not an address", "role": "boss"},
         ["The e-mail address", "The role"]),
        (f"/members/{member.member_id}/role", {"role": "boss"}, ["The role"]),
        (f"/rfps/{rfp}/answer", {"max_items": "some"}, ["The number of items to answer"]),
        (f"/rfps/{rfp}/import", upload(csrf, b""), ["The file"]),
        (f"/rfps/{rfp}/import", upload(csrf, csv, question_column="Nope"), ["The question column"]),
        (f"/rfps/{rfp}/import", upload(csrf, csv, sheet="First"), ["The sheet"]),
        ("/kb/import", upload(csrf, b"title\nx\n"), ["The CSV file"]),
    ]
    for path, data, words in sent:
        if isinstance(data, dict):
            data = {"csrf_token": csrf, **data}
        refused = await app_client.post(path, data=data)
        said = details(await refused.text())
        assert refused.status == 422, (path, refused.status)
        assert not [d for d in said if API_NAME.match(d)], (path, said)
        assert sorted(d.split(":")[0] for d in said) == sorted(words), (path, said)


async def test_invitation_form__refusals_say_the_fields_in_words(app_client, admin, conn):
    token = new_link_token()
    await conn.execute(db.query("insert_invitation"), new_id("inv"), admin.account_id,
                       "grace@example.test", "member", hash_token(token), admin.member_id, 3600)
    path = f"/invitations/{token}"
    form = field(await (await app_client.get(path)).text(), "sign_in_token")
    refused = await app_client.post(path, data={
        "sign_in_token": form, "password": "short", "first_name": "x" * 300})
    said = details(await refused.text())
    assert refused.status == 422
    assert sorted(d.split(":")[0] for d in said) == [
        "The first name", "The password", "The terms of service"], said


# An API name in running text: snake_case (`question_column`, `invitations_page`, `needs_input`).
SNAKE_NAME = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


def refusal(page: str) -> str:
    """The error page's message and details, as one text."""
    said = re.search(r'<p class="notice error" role="alert">(.*?)</p>', page, re.S)
    assert said, page[:2000]
    listed = re.search(r'<ul class="details">(.*?)</ul>', page, re.S)
    return " ".join([html.unescape(said[1]).strip(), *(details(page) if listed else [])])


async def test_pages__refused_query_parameters_and_upload_layouts_are_said_in_words(
    app_client, admin, make_rfp, conn
):
    """A page's address with a bad query parameter said "invitations_page must be …", "state must
    be one of needs_input, …", "answer_column must be …"; the questionnaire upload said "the
    question_column was not found" and "Name it with question_column". The pages say them in the
    words of their forms and links; the API keeps its names (the next test)."""
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp = await make_rfp(admin)
    csv = b"Question,Answer\nWho?,Us.\n"
    assert (await app_client.post(f"/rfps/{rfp}/import", data=upload(csrf, csv))).status == 200
    export = f"/rfps/{rfp}/export?format="
    sent = [
        ("/rfps?page=x", 400, "The page number must be a positive integer; got 'x'"),
        ("/rfps?page=999999999", 400, "The page number is out of range"),
        ("/kb?page=9999999", 400, "The page number must be at most 500"),
        ("/accounts?page=0", 400, "The page number must be a positive integer; got '0'"),
        ("/members?invitations_page=x", 400,
         "The page number of the invitations must be a positive integer; got 'x'"),
        ("/members?invitations_page=99999999", 400, "The page number of the invitations is out of range"),
        ("/items?state=x", 400, "Needs input, Review or Approved"),
        (f"/rfps/{rfp}?state=x", 400, "Needs input, Review or Approved"),
        (f"/rfps/{rfp}?assignee=x", 400, "Assigned to me or Anyone's"),
        (f"{export}x", 400, "The export format must be csv, xlsx or original; got 'x'"),
        (f"{export}original&answers=x", 400, "The answers to export must be approved or drafted"),
        (f"{export}original&answer_column=ZZZZ", 400, "The answer column must be a column letter"),
        (f"{export}original&unanswered={'x' * 300}", 400,
         "The text for unanswered questions must be at most 200 characters"),
    ]
    posted = [
        (upload(csrf, csv, question_column="Nope"), 422, "the question column was not found"),
        (upload(csrf, csv, header_row="x"), 400, "The header row must be a row number"),
        (upload(csrf, csv, header_row="40"), 422, "The header row: row 40 is empty"),
        (upload(csrf, b"Colour,Size\nred,big\n"), 422,
         "Name it with the question column (header or letter)."),
    ]
    for path, status, words in sent:
        refused = await app_client.get(path)
        text = refusal(await refused.text())
        assert refused.status == status, (path, refused.status, text)
        assert words in text and not SNAKE_NAME.search(text), (path, text)
    for form, status, words in posted:
        refused = await app_client.post(f"/rfps/{rfp}/import", data=form)
        text = refusal(await refused.text())
        assert refused.status == status, (refused.status, text)
        assert words in text and not SNAKE_NAME.search(text), text
    for name, words in (("state", "Needs input, Review or Approved"),
                        ("assignee", "Assigned to me or Anyone's")):
        band = await app_client.post(f"/rfps/{rfp}/approve", data={
            "csrf_token": csrf, "scope": "band", name: "x", "seen": "2026-01-01T00:00:00+00:00"})
        text = refusal(await band.text())
        assert band.status == 422 and words in text and "nothing was approved" in text, text
        assert not SNAKE_NAME.search(text), text


async def test_api__keeps_the_names_of_its_parameters_and_fields(client, admin, make_rfp):
    """Integrations read the API's names: only the web pages say them in words."""
    headers = {"Authorization": f"Bearer {admin.token}"}
    rfp = await make_rfp(admin)
    paged = await client.get("/api/v1/members?page=x", headers=headers)
    assert (await paged.json())["error"]["message"] == "page must be a positive integer; got 'x'"
    column = await client.get(f"/api/v1/rfps/{rfp}/export?format=original&answer_column=ZZZZ",
                              headers=headers)
    assert (await column.json())["error"]["message"].startswith("answer_column must be a column letter")
    imported = await client.post(
        f"/api/v1/rfps/{rfp}/rfp_items/import", headers={**headers, "Content-Type": "text/csv"},
        data=b"Colour,Size\nred,big\n")
    error = (await imported.json())["error"]
    assert imported.status == 422 and error["message"] == "the file has no question column"
    assert error["details"][0].startswith("question_column: no question column found")
    assert error["details"][0].endswith("Name it with question_column (header or letter).")


async def test_upload_pages__a_file_over_the_limit_says_the_limit_in_megabytes(
    aiohttp_client, config, admin, make_rfp, conn
):
    """The upload forms' 413 said "the file is larger than the 52428800 bytes accepted"."""
    client = await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost", "max_upload_bytes": 2 * 1_048_576})))
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    rfp = await make_rfp(admin)
    big = b"Question\n" + b"Who are you?\n" * 200_000  # 2.5 MB
    for path in (f"/rfps/{rfp}/import", "/kb/import"):
        refused = await client.post(path, data=upload(csrf, big))
        text = refusal(await refused.text())
        assert refused.status == 413 and "the file is larger than the 2 MB accepted" in text, text
        assert "2097152" not in text


async def test_export_link__refused_is_not_titled_as_a_form_to_correct(app_client, admin, make_rfp, conn):
    """A followed link refused with 422 (an export into a kept questionnaire with no answer
    column) was titled "Please correct the form": there is no form."""
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    rfp = await make_rfp(admin)
    await conn.execute("INSERT INTO questionnaire_files (id, account_id, rfp_id, format, sha256, content)"
                       " VALUES ('qf_1', $1, $2, 'csv', '\\x00', 'Question\nWho?\n')",
                       admin.account_id, rfp)
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position, questionnaire_file_id,"
                       " source_row) VALUES ('item_1', $1, 'Who?', 1, 'qf_1', 2)", rfp)
    refused = await app_client.get(f"/rfps/{rfp}/export?format=original")
    page = await refused.text()
    assert refused.status == 422 and "<h1>That could not be done</h1>" in page
    assert "Please correct the form" not in page and "no answer column" in refusal(page)


async def test_forms__a_refusal_without_its_own_message_says_what_to_do(app_client, admin, make_rfp, conn):
    """A form's 422 without a message of its own said the API's "the record could not be saved"
    above its details (asking a question saves no record)."""
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    rfp = await make_rfp(admin)
    for path, data in (("/ask", {"question": " "}), ("/rfps", {"title": ""}),
                       (f"/rfps/{rfp}/answer", {"max_items": "some"})):
        refused = await app_client.post(path, data={"csrf_token": csrf, **data})
        text = refusal(await refused.text())
        assert refused.status == 422, path
        assert text.startswith("Correct what is listed below, then send the form again."), text
        assert "record" not in text, text
    # A refusal with a message of its own keeps it.
    kept = await app_client.post(f"/rfps/{rfp}/approve", data={"csrf_token": csrf, "scope": "x"})
    assert refusal(await kept.text()).startswith("nothing was approved")
