"""Each form of the web app, sent with bad input: its refusal names the fields in words, as the
form's labels do ("The title: must not be blank"), never with the API's names ("rfp.title: …").
The RFP page's item forms said theirs in words already (test_pages_review_bulk.py)."""

from __future__ import annotations

import html
import re
from typing import Any

from aiohttp import FormData

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, field, set_password, sign_in  # noqa: F401

from service import db
from service.domain.ids import new_id
from service.domain.members import new_link_token
from service.domain.tokens import hash_token

# A detail that starts with an API field's name: `rfp.title:`, `password:`, `tags[0]:`.
API_NAME = re.compile(r"^[a-z_]+(\.[a-z_]+)*(\[\d+\])*: ")


def details(page: str) -> list[str]:
    listed = re.search(r'<ul class="details">(.*?)</ul>', page, re.S)
    assert listed, page[:2000]
    return [html.unescape(item).strip() for item in re.findall(r"<li>(.*?)</li>", listed[1], re.S)]


def upload(csrf: str, content: bytes, **fields: str) -> FormData:
    form = FormData()
    form.add_field("csrf_token", csrf)
    for name, value in fields.items():
        form.add_field(name, value)
    form.add_field("file", content, filename="questions.csv", content_type="text/csv")
    return form


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
