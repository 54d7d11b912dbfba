"""Merging a pair from the library care page: the page told a member to edit or delete one of the
entries, or have someone call the API's merge. A writer now presses "Merge…" on a pair, sees both
entries, keeps the one they choose, and comes back to the care page saying so: the API's merge
(the same versions and audit events). A pair gone meanwhile, the same entry twice and another
account's id are each a page saying so, never a 500."""

from __future__ import annotations

import html
import re

# ruff: noqa: F811
from page_client import (  # noqa: F401
    aiohttp_client_cls,
    app_client,
    set_password,
    sign_in,
)

from service.domain import library

NOTICE = '<p class="notice ok" role="status" id="kb-notice">'
GONE = "no longer in the knowledge base: merged or deleted since the care page was shown"
SAME = "Both sides name the same entry: an entry cannot be merged into itself."


async def entries(conn, account_id: str, *rows: tuple[str, str, str]) -> None:
    for item_id, question, answer in rows:
        await conn.execute("INSERT INTO knowledge_items (id, account_id, question, answer)"
                           " VALUES ($1, $2, $3, $4)", item_id, account_id, question, answer)


def merge_links(page: str) -> list[str]:
    return [html.unescape(link) for link in re.findall(r'href="(/kb/care/merge\?[^"]+)"', page)]


def forms(page: str) -> list[dict[str, str]]:
    """Each POST form of the page: its action and hidden fields."""
    found = []
    for action, body in re.findall(r'<form method="post" action="([^"]+)">(.*?)</form>', page, re.S):
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body))
        found.append({"action": action, **fields})
    return found


async def press(app_client, csrf: str, keep: str, removed: str, versions: tuple[str, str] = ("1", "1")):
    """The merge page's button keeping `keep`, as the page draws it for entries at `versions`."""
    return await app_client.post(f"/kb/{keep}/merge", data={
        "csrf_token": csrf, "duplicate_id": removed, "keep_version": versions[0],
        "duplicate_version": versions[1]})


async def writer(app_client, conn, make_member, account_id: str, role: str = "member"):
    who = await make_member(account_id, role=role)
    await set_password(conn, who.email)
    return who, await sign_in(app_client, who.email)


async def test_kb_merge__a_member_keeps_the_entry_chosen_and_the_care_page_says_so(
    app_client, admin, make_member, make_rfp, conn
):
    await entries(conn, admin.account_id,
                  ("kb_b1", "Do you encrypt backups?", "Yes, nightly with AES-256."),
                  ("kb_b2", "Do you encrypt your backups?", "Yes: AES-256, every night."),
                  ("kb_r1", "Is there a retention policy?", "Logs are kept 30 days."),
                  ("kb_r2", "Is there a retention policy for logs?", "Logs are kept 90 days."))
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position, state, answer,"
                       " knowledge_item_id) VALUES ('item_m1', $1, 'Backups?', 1, 'approved', 'Yes.',"
                       " 'kb_b1')", rfp_id)
    await library.find_duplicates(conn, admin.account_id, duplicate_similarity=0.8, conflict_similarity=0.6)
    kinds = {frozenset((r["item_a"], r["item_b"])): r["kind"] for r in await conn.fetch(
        "SELECT item_a, item_b, kind FROM knowledge_duplicates")}
    assert kinds == {frozenset(("kb_b1", "kb_b2")): "duplicate", frozenset(("kb_r1", "kb_r2")): "conflict"}
    member, csrf = await writer(app_client, conn, make_member, admin.account_id)

    care = await (await app_client.get("/kb/care")).text()
    assert "Merging one entry into the other is done through the API" not in care
    assert "press its “Merge…”" in care
    links = merge_links(care)  # a conflict too: the writer keeps the entry whose answer is right
    assert sorted(links) == ["/kb/care/merge?a=kb_b1&b=kb_b2", "/kb/care/merge?a=kb_r1&b=kb_r2"]

    shown = await app_client.get("/kb/care/merge?a=kb_b1&b=kb_b2")
    page = await shown.text()
    assert shown.status == 200 and "Merge two entries" in page
    assert "Yes, nightly with AES-256." in page and "Yes: AES-256, every night." in page
    assert [form for form in forms(page) if form["action"] != "/signout"] == [
        {"action": "/kb/kb_b1/merge", "csrf_token": csrf, "duplicate_id": "kb_b2", "keep_version": "1",
         "duplicate_version": "1"},
        {"action": "/kb/kb_b2/merge", "csrf_token": csrf, "duplicate_id": "kb_b1", "keep_version": "1",
         "duplicate_version": "1"},
    ]
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 4  # opening it: nothing

    # The second kept: the first removed, what cited it follows.
    done = await press(app_client, csrf, "kb_b2", "kb_b1")
    assert done.status == 200 and done.url.path == "/kb/care" and done.url.query["done"] == "merged"
    assert f"{NOTICE}Entries merged: the one you kept stays, the other is removed" in await done.text()
    assert await conn.fetchval("SELECT array_agg(id ORDER BY id) FROM knowledge_items") == [
        "kb_b2", "kb_r1", "kb_r2"]
    assert await conn.fetchval("SELECT knowledge_item_id FROM rfp_items WHERE id = 'item_m1'") == "kb_b2"
    # The API's merge: its audit events, and the removed entry's last version replaced by a merge.
    events = {(r["action"], r["record_id"]) for r in await conn.fetch(
        "SELECT action, record_id FROM audit_events WHERE action LIKE 'knowledge_base_item.%'")}
    assert events == {("knowledge_base_item.merged", "kb_b2"), ("knowledge_base_item.deleted", "kb_b1")}
    change = await conn.fetchrow("SELECT change, replaced_by FROM knowledge_item_versions"
                                 " WHERE item_id = 'kb_b1' ORDER BY version DESC LIMIT 1")
    assert (change["change"], change["replaced_by"]) == ("merged", member.member_id)
    assert merge_links(await (await app_client.get("/kb/care")).text()) == [
        "/kb/care/merge?a=kb_r1&b=kb_r2"]


async def test_kb_merge__a_pair_gone_meanwhile_is_a_page_saying_so(app_client, admin, make_member, conn):
    """The page shown, then someone else merges or deletes one of the two: the press is a 404
    page saying what happened and linking the entry still there, never the 500 page."""
    await entries(conn, admin.account_id, ("kb_g1", "MFA?", "Yes."), ("kb_g2", "Is MFA on?", "Yes!"),
                  ("kb_g3", "SSO?", "Yes, SAML."))
    _, csrf = await writer(app_client, conn, make_member, admin.account_id)
    await app_client.get("/kb/care/merge?a=kb_g1&b=kb_g2")
    await conn.execute("DELETE FROM knowledge_items WHERE id = 'kb_g2'")

    for keep, removed in (("kb_g1", "kb_g2"), ("kb_g2", "kb_g1")):  # the removed one gone; the kept one
        pressed = await press(app_client, csrf, keep, removed)
        page = await pressed.text()
        assert pressed.status == 404, page
        assert f"One of these entries is {GONE}" in page
        assert 'Still there: <a href="/kb/kb_g1">MFA?</a>.' in page
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 2
    shown = await app_client.get("/kb/care/merge?a=kb_g1&b=kb_g2")
    assert shown.status == 404 and f"One of these entries is {GONE}" in await shown.text()
    neither = await (await app_client.get("/kb/care/merge?a=kb_g2&b=kb_none")).text()
    assert f"These entries are {GONE}" in neither and "Still there" not in neither


async def test_kb_merge__the_same_entry_twice_or_none_named_is_said(app_client, admin, make_member, conn):
    await entries(conn, admin.account_id, ("kb_s1", "MFA?", "Yes."))
    _, csrf = await writer(app_client, conn, make_member, admin.account_id)
    shown = await app_client.get("/kb/care/merge?a=kb_s1&b=kb_s1")
    assert shown.status == 422 and SAME in await shown.text()
    pressed = await press(app_client, csrf, "kb_s1", "kb_s1")
    assert pressed.status == 422 and SAME in await pressed.text()
    for unnamed in ("/kb/care/merge", "/kb/care/merge?a=kb_s1", "/kb/care/merge?a=kb_s1&b=+"):
        page = await app_client.get(unnamed)
        assert page.status == 400 and "the address does not name both" in await page.text(), unnamed
    blank = await app_client.post("/kb/kb_s1/merge", data={"csrf_token": csrf})
    assert blank.status == 400 and "the address does not name both" in await blank.text()
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 1


async def test_kb_merge__another_accounts_entry_looks_like_none(
    app_client, admin, make_account, make_member, conn
):
    """A forged id of another account's entry, on either side, is the page an id of nobody's
    is, and neither entry is touched."""
    other = await make_account("Other")
    await entries(conn, admin.account_id, ("kb_mine", "MFA?", "Yes."))
    await entries(conn, other.account_id, ("kb_theirs", "MFA?", "Yes."))
    _, csrf = await writer(app_client, conn, make_member, admin.account_id)

    async def said(method: str, path: str, **data: str) -> tuple[int, str]:
        sent = {"csrf_token": csrf, "keep_version": "1", "duplicate_version": "1", **data} if data else None
        response = await app_client.request(method, path, data=sent)
        return response.status, await response.text()

    nobody = await said("GET", "/kb/care/merge?a=kb_mine&b=kb_nobody")
    assert nobody[0] == 404 and GONE in nobody[1]
    assert await said("GET", "/kb/care/merge?a=kb_mine&b=kb_theirs") == nobody
    assert await said("GET", "/kb/care/merge?a=kb_theirs&b=kb_mine") == await said(
        "GET", "/kb/care/merge?a=kb_nobody&b=kb_mine")
    assert await said("POST", "/kb/kb_mine/merge", duplicate_id="kb_theirs") == await said(
        "POST", "/kb/kb_mine/merge", duplicate_id="kb_nobody")
    assert await said("POST", "/kb/kb_theirs/merge", duplicate_id="kb_mine") == await said(
        "POST", "/kb/kb_nobody/merge", duplicate_id="kb_mine")
    assert (await said("POST", "/kb/kb_theirs/merge", duplicate_id="kb_mine"))[0] == 404
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 2
    assert await conn.fetchval(
        "SELECT count(*) FROM audit_events WHERE action LIKE 'knowledge_base_item.%'") == 0


async def test_kb_merge__a_viewer_sees_no_merge_and_is_refused_one(app_client, admin, make_member, conn):
    await entries(conn, admin.account_id, ("kb_v1", "Do you encrypt backups?", "Yes, nightly."),
                  ("kb_v2", "Do you encrypt your backups?", "Yes, nightly."))
    await library.find_duplicates(conn, admin.account_id, duplicate_similarity=0.8, conflict_similarity=0.6)
    _, csrf = await writer(app_client, conn, make_member, admin.account_id, role="viewer")
    care = await (await app_client.get("/kb/care")).text()
    assert 'href="/kb/kb_v1"' in care and merge_links(care) == [] and 'id="merge-how"' not in care
    assert (await app_client.get("/kb/care/merge?a=kb_v1&b=kb_v2")).status == 403
    refused = await press(app_client, csrf, "kb_v1", "kb_v2")
    assert refused.status == 403
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 2


async def test_kb_merge__an_entry_edited_since_the_page_was_shown_is_not_merged_unseen(
    app_client, admin, make_member, conn
):
    """Both texts shown, then someone edits one: the press kept (or removed) a text its member
    never read. It is a 409 page offering both again, and nothing is merged; a form without the
    versions shown merges nothing either."""
    await entries(conn, admin.account_id, ("kb_e1", "MFA?", "Yes."), ("kb_e2", "Is MFA on?", "Yes!"))
    _, csrf = await writer(app_client, conn, make_member, admin.account_id)
    await app_client.get("/kb/care/merge?a=kb_e1&b=kb_e2")  # both at version 1
    await conn.execute("UPDATE knowledge_items SET answer = 'No, not yet.' WHERE id = 'kb_e2'")
    for keep, removed, versions in (("kb_e1", "kb_e2", ("1", "1")), ("kb_e2", "kb_e1", ("1", "1"))):
        pressed = await press(app_client, csrf, keep, removed, versions)
        page = await pressed.text()
        assert pressed.status == 409, page
        assert "changed since the page was shown (someone edited it meanwhile), so nothing was merged" in page
        assert f'href="/kb/care/merge?a={keep}&amp;b={removed}" id="merge-again"' in page
    for versions in (("1", ""), ("", "2"), ("x", "2"), ("9" * 5000, "2")):
        unseen = await press(app_client, csrf, "kb_e1", "kb_e2", versions)
        assert unseen.status == 400 and "nothing was merged" in await unseen.text(), versions[0][:9]
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 2
    assert (await press(app_client, csrf, "kb_e1", "kb_e2", ("1", "2"))).url.query["done"] == "merged"
    assert await conn.fetchval("SELECT array_agg(id) FROM knowledge_items") == ["kb_e1"]


async def test_kb_merge__an_id_holding_a_nul_is_an_unknown_one_never_a_500(
    app_client, admin, make_member, conn
):
    """PostgreSQL text holds no NUL: an id with one, looked up, failed the query (a probe's form
    with duplicate_id "kb\\x00" was a 500). It is as unknown as an id no entry has."""
    await entries(conn, admin.account_id, ("kb_mine", "MFA?", "Yes."), ("kb_also", "MFA ?", "Yes!"))
    _, csrf = await writer(app_client, conn, make_member, admin.account_id)

    async def said(method: str, path: str, **data: str) -> tuple[int, str]:
        sent = {"csrf_token": csrf, "keep_version": "1", "duplicate_version": "1", **data} if data else None
        response = await app_client.request(method, path, data=sent)
        return response.status, await response.text()

    assert await said("POST", "/kb/kb_mine/merge", duplicate_id="kb_also\x00") == await said(
        "POST", "/kb/kb_mine/merge", duplicate_id="kb_nobody")
    # (one in the address is refused before any page: a 400 naming %00)
    assert (await said("GET", "/kb/care/merge?a=kb_mine&b=kb_also%00"))[0] == 400
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 2
