"""The invitations still waiting: listing them (GET /api/v1/invitations) and withdrawing one
(POST /api/v1/invitations/{id}/revoke), over the API and on the Members page."""

from __future__ import annotations

import re
from typing import Any

from conftest import with_config

# The shared page fixtures are imported to register them; tests take them as arguments by name.
from page_client import aiohttp_client_cls, set_password, sign_in  # noqa: F401
from test_pages_accounts import invite

from service.domain.models import PAGE_SIZE
from service.web.app import create_app


async def _page_client(aiohttp_client: Any, config: Any) -> Any:
    return await aiohttp_client(create_app(with_config(config, server={"web_base_url": "http://localhost"})))


async def _invite(client: Any, actor: Any, email: str, role: str = "member") -> dict:
    sent = await client.post("/api/v1/invitations", headers=actor.headers,
                             json={"invitation": {"email": email, "role": role}})
    assert sent.status == 201, await sent.text()
    return await sent.json()


async def test_list__the_pending_newest_first_expired_marked_others_left_out(
    client, admin, make_account, make_member, conn
):
    old = await _invite(client, admin, "old@example.test")
    new = await _invite(client, admin, "new@example.test", "viewer")
    accepted = await _invite(client, admin, "joined@example.test")
    await conn.execute("UPDATE invitations SET state = 'accepted' WHERE id = $1", accepted["id"])
    await conn.execute("UPDATE invitations SET expires_at = now() - interval '1 s' WHERE id = $1", old["id"])
    other = await make_account(name="Other")
    await _invite(client, other, "theirs@example.test")

    listed = await client.get("/api/v1/invitations", headers=admin.headers)
    assert listed.status == 200
    body = await listed.json()
    assert [(i["email"], i["role"], i["state"]) for i in body["invitations"]] == [
        ("new@example.test", "viewer", "pending"), ("old@example.test", "member", "expired")]
    assert body["pagination"]["total_count"] == 2
    for role in ("member", "viewer"):
        someone = await make_member(admin.account_id, role=role)
        refused = await client.get("/api/v1/invitations", headers=someone.headers)
        assert refused.status == 403, role
    assert new["id"] in {i["id"] for i in body["invitations"]}


async def test_revoke__the_link_stops_working_and_it_leaves_the_list(client, admin, conn, mail_client, smtp):
    made = await _invite(mail_client, admin, "ada@example.test")
    link = next(line for line in (await smtp.wait_for(1))[0].get_content().splitlines()
                if "/api/v1/invitations/" in line)
    token = link.split("/api/v1/invitations/")[1].split()[0].rstrip(".")
    revoked = await mail_client.post(f"/api/v1/invitations/{made['id']}/revoke", headers=admin.headers)
    assert revoked.status == 200
    assert (await revoked.json())["state"] == "revoked"
    accept = await mail_client.post(f"/api/v1/invitations/{token}/accept",
                                    json={"password": "a long enough password", "terms_of_service": True})
    assert accept.status == 404 and "withdrawn" in (await accept.json())["error"]["message"]
    listed = await (await mail_client.get("/api/v1/invitations", headers=admin.headers)).json()
    assert listed["invitations"] == []
    audit = await conn.fetchrow(
        "SELECT action, before FROM audit_events WHERE record_id = $1 AND action LIKE 'invitation.%'"
        " ORDER BY id DESC LIMIT 1", made["id"])
    assert audit["action"] == "invitation.revoked"
    again = await mail_client.post(f"/api/v1/invitations/{made['id']}/revoke", headers=admin.headers)
    assert again.status == 409 and "revoked" in (await again.json())["error"]["message"]


async def test_revoke__another_accounts_invitation_is_unknown_and_untouched(
    client, admin, make_account, make_member, conn
):
    other = await make_account(name="Other")
    theirs = await _invite(client, other, "theirs@example.test")
    refused = await client.post(f"/api/v1/invitations/{theirs['id']}/revoke", headers=admin.headers)
    assert refused.status == 404
    unknown = await client.post("/api/v1/invitations/inv_nothing/revoke", headers=admin.headers)
    assert unknown.status == 404
    assert (await refused.json())["error"]["message"].replace(theirs["id"], "X") == \
        (await unknown.json())["error"]["message"].replace("inv_nothing", "X")
    ours = await _invite(client, admin, "ours@example.test")
    member = await make_member(admin.account_id, role="member")
    by_member = await client.post(f"/api/v1/invitations/{ours['id']}/revoke", headers=member.headers)
    assert by_member.status == 403
    states = await conn.fetch("SELECT state::text FROM invitations ORDER BY created_at")
    assert [s["state"] for s in states] == ["pending", "pending"]


async def test_revoke__works_without_an_active_subscription(client, admin, conn):
    """Withdrawing a link is never blocked by the subscription (the OpenAPI said usage_blocked)."""
    made = await _invite(client, admin, "ada@example.test")
    await conn.execute("UPDATE accounts SET subscription_status = 'inactive' WHERE id = $1",
                       admin.account_id)
    revoked = await client.post(f"/api/v1/invitations/{made['id']}/revoke", headers=admin.headers)
    assert revoked.status == 200 and (await revoked.json())["state"] == "revoked"


async def test_members_page__admin_sees_waiting_invitations_sends_one_again_and_revokes_one(
    aiohttp_client, config, admin, make_member, conn
):
    client = await _page_client(aiohttp_client, config)
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    await invite(client, csrf, "grace@example.test", "viewer")
    page = await (await client.get("/members")).text()
    invitation_id = await conn.fetchval("SELECT id FROM invitations")
    assert f'id="invitation-{invitation_id}"' in page and "grace@example.test" in page
    # "Send again" is the invitation form with the address and role: a new link replaces the old.
    again = await client.post("/members/invite", allow_redirects=False,
                              data={"csrf_token": csrf, "email": "grace@example.test", "role": "viewer"})
    assert again.status == 303
    rows = await conn.fetch("SELECT id, state::text, role::text FROM invitations ORDER BY created_at")
    assert [(r["state"], r["role"]) for r in rows] == [("revoked", "viewer"), ("pending", "viewer")]
    current = rows[1]["id"]
    forged = await client.post(f"/members/invitations/{current}/revoke", allow_redirects=False, data={})
    assert forged.status == 403
    revoked = await client.post(f"/members/invitations/{current}/revoke", data={"csrf_token": csrf})
    assert revoked.status == 200 and revoked.url.path_qs == "/members?done=revoked"
    text = await revoked.text()
    assert "Invitation revoked" in text and "No invitation is waiting" in text
    assert await conn.fetchval("SELECT count(*) FROM invitations WHERE state = 'pending'") == 0
    member = await make_member(admin.account_id, role="member")
    await set_password(conn, member.email)
    await client.post("/signout", data={"csrf_token": csrf})
    await sign_in(client, member.email)
    assert "Invitations waiting" not in await (await client.get("/members")).text()


async def test_members_page__waiting_invitations_have_a_pager_of_their_own(
    aiohttp_client, config, admin, conn
):
    app_client = await _page_client(aiohttp_client, config)
    await conn.execute(
        "INSERT INTO invitations (id, account_id, email, role, token_hash, expires_at, created_at)"
        " SELECT 'inv_' || n, $1, 'p' || n || '@example.test', 'member', sha256(n::text::bytea),"
        "        now() + interval '1 day', now() - n * interval '1 minute'"
        "   FROM generate_series(1, $2) n", admin.account_id, PAGE_SIZE + 1)
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    first = await (await app_client.get("/members")).text()
    assert "p1@example.test" in first and f"p{PAGE_SIZE + 1}@example.test" not in first
    assert 'href="?invitations_page=2"' in first
    second = await (await app_client.get("/members?invitations_page=2")).text()
    assert f"p{PAGE_SIZE + 1}@example.test" in second and "p1@example.test" not in second
    bad = await app_client.get("/members?invitations_page=x")
    assert bad.status == 400 and "The page number of the invitations must be" in await bad.text()
    # Revoking one on the second page comes back to it, where it went back to the first.
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', second)[1]
    form = re.search(r'<form method="post" action="(/members/invitations/[^"]+/revoke)".*?</form>',
                     second, re.S)
    assert '<input type="hidden" name="invitations_page" value="2">' in form[0]
    revoked = await app_client.post(form[1], allow_redirects=False,
                                    data={"csrf_token": csrf, "invitations_page": "2"})
    assert revoked.headers["Location"] == "/members?invitations_page=2&done=revoked#invitations-h"
    # That page is now past the last: it says so and leads to the first, not "No invitation is waiting".
    past = await (await app_client.get(revoked.headers["Location"])).text()
    assert "No invitation is waiting" not in past
    assert 'No invitation on this page. <a href="/members#invitations-h">First page</a>' in past
    odd = await app_client.post("/members/invitations/inv_1/revoke", allow_redirects=False,
                                data={"csrf_token": csrf, "invitations_page": "²", "page": "1"})
    assert odd.headers["Location"] == "/members?done=revoked#invitations-h"


async def test_members_page__send_again_of_an_invitation_revoked_meanwhile_sends_nothing(
    aiohttp_client, config, admin, conn
):
    """"Send again" from a page shown before another admin (or another tab) revoked that
    invitation re-invited the address someone had just withdrawn (a wrong address mailed again,
    the revoke's "its link no longer works" undone). It names the invitation it sends again: one
    no longer pending is a 409 and nothing is sent. And revoking an invitation that "Send again"
    replaced meanwhile said only "is revoked", while a newer link to the address was live."""
    client = await _page_client(aiohttp_client, config)
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    await invite(client, csrf, "wrong@example.test", "viewer")
    page = await (await client.get("/members")).text()
    first = await conn.fetchval("SELECT id FROM invitations")
    send_again = re.search(r'<form method="post" action="/members/invite".*?</form>',
                           page.split('id="invitations"')[1], re.S)[0]
    assert f'name="invitation_id" value="{first}"' in send_again
    again = {"csrf_token": csrf, "email": "wrong@example.test", "role": "viewer", "invitation_id": first}
    revoked = await client.post(f"/members/invitations/{first}/revoke", allow_redirects=False,
                                data={"csrf_token": csrf})
    assert revoked.status == 303
    stale = await client.post("/members/invite", allow_redirects=False, data=again)
    assert stale.status == 409 and "no longer pending" in await stale.text()
    assert await conn.fetchval("SELECT count(*) FROM invitations WHERE state = 'pending'") == 0
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE kind = 'invitation'") == 1

    await invite(client, csrf, "grace@example.test")
    second = await conn.fetchval("SELECT id FROM invitations WHERE state = 'pending'")
    resent = await client.post("/members/invite", allow_redirects=False, data={
        **again, "email": "grace@example.test", "role": "member", "invitation_id": second})
    assert resent.status == 303
    late = await client.post(f"/api/v1/invitations/{second}/revoke", headers=admin.headers)
    message = (await late.json())["error"]["message"]
    assert late.status == 409 and "newer invitation" in message, message
    newest = await conn.fetchval("SELECT id FROM invitations WHERE state = 'pending'")
    assert newest in message


async def test_members_page__send_again_naming_an_id_no_invitation_can_have_is_409(
    aiohttp_client, config, admin, conn
):
    """A forged "Send again" whose invitation_id holds a NUL byte (a form field, which nothing
    refuses before the query; PostgreSQL text cannot hold NUL) was a 500: now the 409 of an
    invitation no longer pending, nothing sent."""
    client = await _page_client(aiohttp_client, config)
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    await invite(client, csrf, "grace@example.test", "viewer")
    for forged in ("inv_\x00", "x" * 10_000):
        response = await client.post("/members/invite", allow_redirects=False, data={
            "csrf_token": csrf, "email": "grace@example.test", "role": "viewer", "invitation_id": forged})
        assert response.status == 409 and "no longer pending" in await response.text()
    assert await conn.fetchval("SELECT count(*) FROM invitations") == 1
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE kind = 'invitation'") == 1


async def test_list__an_invitee_who_became_a_member_another_way_is_not_waiting(client, admin, conn):
    """Invited, then added by an administrator (POST /users, or the CLI) before accepting: the
    invitation stayed pending, so "Invitations waiting" listed a member (its "Send again" a 422,
    its link a 409). Waiting are the invitations of addresses that are not members."""
    await _invite(client, admin, "grace@example.test")
    await _invite(client, admin, "ada@example.test")
    created = await client.post("/api/v1/users", headers=admin.headers, json={"user": {
        "email": "Grace@Example.test", "password": "a long enough password", "terms_of_service": True}})
    assert created.status == 201, await created.text()
    body = await (await client.get("/api/v1/invitations", headers=admin.headers)).json()
    assert [i["email"] for i in body["invitations"]] == ["ada@example.test"]
    assert body["pagination"]["total_count"] == 1


async def test_members_page__send_again_and_revoke_say_what_they_did_beside_the_list(
    aiohttp_client, config, admin, conn
):
    """Revoke came back to the invitations' heading (#invitations-h) while its notice was at the
    page's top, scrolled out of view (a phone: 200 px above it); Send again said "Invitation
    sent." at the top, as a new invitation does. And Send again's accessible name did not hold
    its words ("Send the invitation to … again": axe's label-content-name-mismatch)."""
    client = await _page_client(aiohttp_client, config)
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    await invite(client, csrf, "grace@example.test", "viewer")
    await invite(client, csrf, "ada@example.test", "member")
    page = await (await client.get("/members")).text()
    assert 'aria-label="Send again to grace@example.test">Send again</button>' in page
    grace = await conn.fetchval("SELECT id FROM invitations WHERE email = 'grace@example.test'")
    resent = await client.post("/members/invite", allow_redirects=False, data={
        "csrf_token": csrf, "email": "grace@example.test", "role": "viewer", "invitation_id": grace})
    assert resent.status == 303 and resent.headers["Location"] == "/members?done=resent#invitations-h"
    for done, said in (("resent", "Invitation sent again: its new link expires in 7 days"),
                       ("revoked", "Invitation revoked")):
        text = await (await client.get(f"/members?done={done}")).text()
        top, section = text.split('<h2 id="invitations-h">')
        assert said not in top and 'id="invitations-notice">' + said in section, done


async def test_members_page__invite_of_a_member_with_a_bad_role_says_both(
    aiohttp_client, config, admin, make_member, conn
):
    client = await _page_client(aiohttp_client, config)
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    member = await make_member(admin.account_id)
    refused = await client.post("/members/invite", allow_redirects=False,
                                data={"csrf_token": csrf, "email": member.email, "role": "boss"})
    text = await refused.text()
    assert refused.status == 422
    assert "is already a member of this account" in text and "must be one of" in text
