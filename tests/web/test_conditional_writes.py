"""Writes conditional on the version read: the API's ETag and If-Match on knowledge-base entries
and RFP items, and the web app's edit forms sending the version they showed. Before, two
reviewers each saved over the other unseen: the second one's Approve wrote back the answer its
page showed, over the first one's edit, and approved it."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import aiohttp_client_cls, app_client, field, set_password, sign_in  # noqa: F401

ENTRIES = "/api/v1/knowledge_base_items"


async def _entry(client: Any, admin: Any) -> tuple[str, str]:
    created = await client.post(ENTRIES, headers=admin.headers, json={"knowledge_base_item": {
        "question": "Do you encrypt backups?", "answer": "Yes, with AES-256."}})
    assert created.status == 201
    return (await created.json())["id"], created.headers["ETag"]


async def test_entry__a_patch_naming_the_version_read_applies_and_a_stale_one_is_412(client, admin):
    entry_id, created_tag = await _entry(client, admin)
    read = await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)
    assert read.headers["ETag"] == created_tag == '"v1"'

    first = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": created_tag},
                               json={"knowledge_base_item": {"answer": "Yes, AES-256 at rest."}})
    assert first.status == 200
    assert first.headers["ETag"] == '"v2"'

    # A second writer who read version 1 too: refused, nothing written, the current tag given.
    stale = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": created_tag},
                               json={"knowledge_base_item": {"answer": "No."}})
    assert stale.status == 412
    body = await stale.json()
    assert body["error"]["code"] == "precondition_failed"
    assert "has changed since it was read" in body["error"]["message"]
    assert stale.headers["ETag"] == '"v2"'
    now = await (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).json()
    assert (now["answer"], now["version"]) == ("Yes, AES-256 at rest.", 2)

    # A weak tag never matches (If-Match compares strongly); any of several does; * does.
    weak = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": 'W/"v2"'},
                              json={"knowledge_base_item": {"answer": "No."}})
    assert weak.status == 412
    listed = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": '"v1", "v2"'},
                                json={"knowledge_base_item": {"title": "Backups"}})
    assert listed.status == 200
    anyone = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": "*"},
                                json={"knowledge_base_item": {"title": "Backups, encrypted"}})
    assert anyone.status == 200
    # Without If-Match a PATCH writes as it always did.
    plain = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers,
                               json={"knowledge_base_item": {"title": "Backup encryption"}})
    assert (plain.status, plain.headers["ETag"]) == (200, '"v5"')


async def test_entry__an_if_match_holding_no_tag_is_a_400_naming_the_form(client, admin):
    entry_id, _ = await _entry(client, admin)
    response = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": "v1"},
                                  json={"knowledge_base_item": {"answer": "No."}})
    assert response.status == 400
    body = await response.json()
    assert body["error"]["code"] == "parameter_invalid"
    assert body["error"]["message"].startswith("If-Match must be * or quoted ETags")
    now = await (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).json()
    assert now["answer"] == "Yes, with AES-256."


async def _item(conn: Any, make_rfp: Any, admin: Any) -> tuple[str, str]:
    rfp_id = await make_rfp(admin, "Acme")
    item_id = f"item_{rfp_id[-8:]}"
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, confidence)"
        " VALUES ($1, $2, 'Do you encrypt backups?', 1, 'auto_answered', 'Yes.', 0.6)", item_id, rfp_id)
    return rfp_id, item_id


async def test_rfp_item__a_patch_naming_the_version_read_applies_and_a_stale_one_is_412(
    client, admin, conn, make_rfp,
):
    rfp_id, item_id = await _item(conn, make_rfp, admin)
    url = f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}"
    read = await client.get(url, headers=admin.headers)
    tag = read.headers["ETag"]
    first = await client.patch(url, headers=admin.headers | {"If-Match": tag},
                               json={"rfp_item": {"answer": "Yes, with AES-256."}})
    assert first.status == 200
    assert first.headers["ETag"] != tag
    assert first.headers["ETag"] == (await client.get(url, headers=admin.headers)).headers["ETag"]

    stale = await client.patch(url, headers=admin.headers | {"If-Match": tag},
                               json={"rfp_item": {"answer": "Yes.", "state": "approved"}})
    assert stale.status == 412
    assert (await stale.json())["error"]["code"] == "precondition_failed"
    row = await conn.fetchrow("SELECT answer, state::text FROM rfp_items WHERE id = $1", item_id)
    assert tuple(row) == ("Yes, with AES-256.", "auto_answered")
    audit = await conn.fetchval(
        "SELECT count(*) FROM audit_events WHERE record_id = $1 AND action = 'rfp_item.updated'", item_id)
    assert audit == 1  # the first PATCH's alone


def _item_form(page: str, item_id: str) -> list[tuple[str, str]]:
    """The item's review form as the page shows it: its hidden fields and its answer."""
    form = page[page.index(f'/items/{item_id}" class="review">'):]
    form = form[:form.index("</form>")]
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form)
    answer = re.search(r'<textarea[^>]*name="answer"[^>]*>(.*?)</textarea>', form, re.S)
    assert answer
    return [(name, unescape(value)) for name, value in hidden] + [("answer", unescape(answer.group(1)))]


async def test_rfp_page__approving_an_answer_another_reviewer_changed_since_is_refused_unwritten(
    app_client, client, admin, conn, make_rfp,
):
    """Reviewer A has the page open; reviewer B (here through the API) rewrites the answer; A
    presses Approve. Before: A's page's answer was written back over B's and approved (200, 303)."""
    await set_password(conn, admin.email)
    rfp_id, item_id = await _item(conn, make_rfp, admin)
    await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    form = _item_form(page, item_id)
    assert dict(form)["answer"] == "Yes."

    changed = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}", headers=admin.headers,
                                 json={"rfp_item": {"answer": "No: backups are not encrypted yet."}})
    assert changed.status == 200

    response = await app_client.post(f"/rfps/{rfp_id}/items/{item_id}", allow_redirects=False,
                                     data=[*form, ("action", "approve")])
    assert response.status == 412
    said = await response.text()
    assert "Changed since you opened it" in said
    assert "Someone changed this after the page was shown to you, so nothing was saved." in said
    row = await conn.fetchrow("SELECT answer, state::text FROM rfp_items WHERE id = $1", item_id)
    assert tuple(row) == ("No: backups are not encrypted yet.", "auto_answered")

    # The page shown again carries the new version: its Approve approves what it shows.
    form = _item_form(await (await app_client.get(f"/rfps/{rfp_id}")).text(), item_id)
    response = await app_client.post(f"/rfps/{rfp_id}/items/{item_id}", allow_redirects=False,
                                     data=[*form, ("action", "approve")])
    assert response.status == 303
    row = await conn.fetchrow("SELECT answer, state::text FROM rfp_items WHERE id = $1", item_id)
    assert tuple(row) == ("No: backups are not encrypted yet.", "approved")


async def _entry_page(app_client: Any, client: Any, admin: Any, conn: Any) -> tuple[str, str, str]:
    """A new entry, and its page as its signed-in admin sees it: (entry id, CSRF token, page)."""
    await set_password(conn, admin.email)
    entry_id, _ = await _entry(client, admin)
    csrf = await sign_in(app_client, admin.email)
    return entry_id, csrf, await (await app_client.get(f"/kb/{entry_id}")).text()


async def test_kb_entry_page__saving_over_an_edit_made_since_the_page_was_shown_is_refused(
    app_client, client, admin, conn,
):
    entry_id, csrf, page = await _entry_page(app_client, client, admin, conn)
    shown = field(page, "shown")
    assert shown == "v1"
    edited = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers,
                                json={"knowledge_base_item": {"answer": "Yes, AES-256 since 2024."}})
    assert edited.status == 200

    form = {"csrf_token": csrf, "shown": shown, "question": "Do you encrypt backups?",
            "answer": "Yes, with AES-256.", "title": "Backups", "tags": "", "source": "", "yes_no": ""}
    response = await app_client.post(f"/kb/{entry_id}", data=form, allow_redirects=False)
    assert response.status == 412
    assert "nothing was saved" in await response.text()
    now = await (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).json()
    assert (now["answer"], now["title"], now["version"]) == ("Yes, AES-256 since 2024.", None, 2)

    response = await app_client.post(f"/kb/{entry_id}", data=form | {"shown": "v2"}, allow_redirects=False)
    assert response.status == 303
    now = await (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).json()
    assert (now["answer"], now["title"], now["version"]) == ("Yes, with AES-256.", "Backups", 3)


async def test_entry__a_delete_naming_a_version_since_changed_is_412_and_deletes_nothing(client, admin):
    """A DELETE took no If-Match: a client that read an entry deleted it even after another member
    had edited it, the edit lost unseen."""
    entry_id, created_tag = await _entry(client, admin)
    edited = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers,
                                json={"knowledge_base_item": {"answer": "Yes, AES-256 since 2024."}})
    assert edited.status == 200 and edited.headers["ETag"] == '"v2"'
    stale = await client.delete(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": created_tag})
    assert stale.status == 412 and stale.headers["ETag"] == '"v2"'
    assert (await stale.json())["error"]["code"] == "precondition_failed"
    assert (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).status == 200
    bad = await client.delete(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": "v2"})
    assert bad.status == 400  # not a quoted tag: the header's form is named, nothing deleted
    current = await client.delete(f"{ENTRIES}/{entry_id}", headers=admin.headers | {"If-Match": '"v2"'})
    assert current.status == 204
    assert (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).status == 404


async def test_kb_entry_page__deleting_an_entry_edited_since_the_page_was_shown_is_refused(
    app_client, client, admin, conn,
):
    entry_id, csrf, page = await _entry_page(app_client, client, admin, conn)
    delete_form = page[page.index(f'action="/kb/{entry_id}/delete"'):]
    shown = field(delete_form, "shown")
    assert shown == "v1"
    edited = await client.patch(f"{ENTRIES}/{entry_id}", headers=admin.headers,
                                json={"knowledge_base_item": {"answer": "Yes, AES-256 since 2024."}})
    assert edited.status == 200
    form = {"csrf_token": csrf, "shown": shown}
    refused = await app_client.post(f"/kb/{entry_id}/delete", data=form, allow_redirects=False)
    assert refused.status == 412 and "Someone changed this after the page was shown" in await refused.text()
    assert (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).status == 200
    deleted = await app_client.post(f"/kb/{entry_id}/delete", data=form | {"shown": "v2"},
                                    allow_redirects=False)
    assert deleted.status == 303
    assert (await client.get(f"{ENTRIES}/{entry_id}", headers=admin.headers)).status == 404
