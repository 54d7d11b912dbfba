"""Joining and recovering an account in the web app (service/web/pages/joining.py): the invitation
page, "Forgot your password?" and the reset page, over real HTTP with the e-mails read from a
real SMTP server."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from aiohttp.test_utils import TestClient
from conftest import mail_settings, with_config

# The shared page fixtures are imported to register them; tests take them as arguments by name.
from page_client import PASSWORD, aiohttp_client_cls, field, set_password, sign_in  # noqa: F401

from service.domain.members import added_mail, invitation_mail, password_reset_mail
from service.logs import redact_url
from service.web.app import create_app

NEW_PASSWORD = "a brand new passphrase"


async def mail_client(aiohttp_client: Any, config: Any, smtp: Any, **sections: Any) -> TestClient:
    return await aiohttp_client(create_app(with_config(
        config, server={"web_base_url": "http://localhost"}, mail=mail_settings(smtp.port),
        **sections)))




async def invite(client: TestClient, csrf: str, email: str, role: str = "member") -> None:
    sent = await client.post("/members/invite", allow_redirects=False,
                             data={"csrf_token": csrf, "email": email, "role": role})
    assert sent.status == 303 and sent.headers["Location"] == "/members?done=invited"


def link(message: Any, pattern: str) -> str:
    found = re.search(pattern, message.get_content())
    assert found, message.get_content()
    return found.group(1)


def invitation_path(message: Any) -> str:
    return link(message, r"http://localhost(/invitations/[\w-]+)")


async def test_invitation_page__the_emailed_link_accepts_and_signs_in(
    aiohttp_client, config, admin, conn, smtp,
):
    admin_client = await mail_client(aiohttp_client, config, smtp)
    await set_password(conn, admin.email)
    csrf = await sign_in(admin_client, admin.email)
    await invite(admin_client, csrf, "grace@example.test", "viewer")
    members = await (await admin_client.get("/members?done=invited")).text()
    assert "Invitation sent." in members
    [message] = await smtp.wait_for(1)
    path = invitation_path(message)

    invitee = await mail_client(aiohttp_client, config, smtp)
    shown = await invitee.get(path)
    assert shown.status == 200
    html = await shown.text()
    account_name = await conn.fetchval("SELECT name FROM accounts WHERE id = $1", admin.account_id)
    assert str(account_name) in html and "grace@example.test" in html and "(viewer)" in html
    expires = await conn.fetchval("SELECT expires_at FROM invitations")
    assert f"expires {expires.astimezone(UTC):%Y-%m-%d %H:%M} UTC." in html  # as the e-mail says
    assert shown.headers["Referrer-Policy"] == "same-origin"  # the token goes to no other site
    assert "form-action 'self'" in shown.headers["Content-Security-Policy"]
    assert shown.cookies["rfp_sign_in"]["path"] == "/invitations"
    token = field(html, "sign_in_token")
    good = {"sign_in_token": token, "first_name": "Grace", "last_name": "Hopper",
            "password": NEW_PASSWORD, "terms_of_service": "accepted"}

    # Without the form's token, from another site, a short password, the terms not accepted.
    # Without the form's token, from another site, a short password, the terms not accepted;
    # each refusal is the form again, with a new token (and cookie).
    forged = await invitee.post(path, data={**good, "sign_in_token": "forged"}, allow_redirects=False)
    assert forged.status == 403 and "expired or came from another site" in await forged.text()
    good["sign_in_token"] = field(await forged.text(), "sign_in_token")
    elsewhere = await invitee.post(path, data=good, headers={"Origin": "https://evil.example"},
                                   allow_redirects=False)
    assert elsewhere.status == 403
    good["sign_in_token"] = field(await elsewhere.text(), "sign_in_token")
    short = await invitee.post(path, data={**good, "password": "too short"}, allow_redirects=False)
    assert short.status == 422
    short_html = await short.text()
    assert "password" in short_html and 'value="Grace"' in short_html  # what was typed stays
    assert "Please correct this:" in short_html and "could not be saved" not in short_html
    good["sign_in_token"] = field(short_html, "sign_in_token")
    terms = {k: v for k, v in good.items() if k != "terms_of_service"}
    refused = await invitee.post(path, data=terms, allow_redirects=False)
    assert refused.status == 422 and "terms_of_service" in await refused.text()
    good["sign_in_token"] = field(await refused.text(), "sign_in_token")
    assert await conn.fetchval("SELECT count(*) FROM users WHERE email = 'grace@example.test'") == 0

    accepted = await invitee.post(path, data=good, allow_redirects=False)
    assert accepted.status == 303 and accepted.headers["Location"] == "/rfps"
    assert accepted.cookies["rfp_session"]["httponly"]
    rfps = await invitee.get("/rfps")
    assert rfps.status == 200 and "Grace Hopper" in await rfps.text()
    role = await conn.fetchval(
        "SELECT m.role::text FROM members m JOIN users u ON u.id = m.user_id"
        " WHERE u.email = 'grace@example.test' AND m.account_id = $1", admin.account_id)
    assert role == "viewer"
    events = await conn.fetch("SELECT action, actor_type FROM audit_events WHERE action IN"
                              " ('invitation.accepted', 'auth.signed_in') ORDER BY id")
    assert [e["action"] for e in events][-2:] == ["invitation.accepted", "auth.signed_in"]

    again = await invitee.get(path)
    assert again.status == 404 and "already been accepted" in await again.text()
    posted_again = await invitee.post(path, data=good, allow_redirects=False)
    assert posted_again.status == 404 and "already been accepted" in await posted_again.text()


async def test_invitation_page__unknown_replaced_and_expired_links_say_so(
    aiohttp_client, config, admin, conn, smtp,
):
    client = await mail_client(aiohttp_client, config, smtp)
    unknown = await client.get("/invitations/no-such-token")
    assert unknown.status == 404 and "This invitation link is unknown" in await unknown.text()
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    await invite(client, csrf, "ada@example.test")
    await invite(client, csrf, "ada@example.test")  # replaces the first
    first, second = [invitation_path(m) for m in await smtp.wait_for(2)]
    replaced = await client.get(first)
    assert replaced.status == 404 and "replaced by a newer one" in await replaced.text()
    await conn.execute("UPDATE invitations SET expires_at = now() - interval '1 second'")
    expired = await client.get(second)
    assert expired.status == 404 and "has expired" in await expired.text()
    assert "Ask an administrator" in await expired.text()


async def test_invitation_page__password_attempts_count_in_the_apis_buckets(
    aiohttp_client, config, admin, make_account, conn, smtp,
):
    """Someone with a sign-in already gives its password to accept: a password attempt, counted
    in members.sign_in_per_email whichever door it comes by (API or page)."""
    client = await mail_client(aiohttp_client, config, smtp,
                               members={"sign_in_per_email": {"limit": 2, "period_seconds": 900}})
    elsewhere = await make_account()  # a user of another account, with a password of their own
    await set_password(conn, elsewhere.email)
    await set_password(conn, admin.email)
    csrf = await sign_in(client, admin.email)
    await invite(client, csrf, elsewhere.email)
    path = invitation_path((await smtp.wait_for(1))[0])
    wrong = "not my password at all"
    api = await client.post(f"/api/v1{path}/accept",
                            json={"password": wrong, "terms_of_service": "accepted"})
    assert api.status == 422
    page = await client.get(path)
    data = {"sign_in_token": field(await page.text(), "sign_in_token"), "password": wrong,
            "terms_of_service": "accepted"}
    refused = await client.post(path, data=data)
    assert refused.status == 422 and "give its password" in await refused.text()
    data["sign_in_token"] = field(await refused.text(), "sign_in_token")
    throttled = await client.post(path, data={**data, "password": PASSWORD})
    assert throttled.status == 429 and "Retry-After" in throttled.headers
    assert 'name="password"' in await throttled.text()  # the form again, to try later
    assert await conn.fetchval("SELECT state::text FROM invitations") == "pending"


async def test_password_reset__forgot_link_reset_and_sign_in(
    aiohttp_client, config, admin, conn, smtp,
):
    client = await mail_client(aiohttp_client, config, smtp)
    await set_password(conn, admin.email)
    signin = await (await client.get("/signin")).text()
    assert 'href="/password/forgot"' in signin and "Forgot your password?" in signin
    form = await client.get("/password/forgot")
    assert form.status == 200 and form.cookies["rfp_sign_in"]["path"] == "/password"
    answers = []
    for email in ("nobody@example.test", admin.email):  # the same answer, known or not
        token = field(await (await client.get("/password/forgot")).text(), "sign_in_token")
        sent = await client.post("/password/forgot", allow_redirects=False,
                                 data={"sign_in_token": token, "email": email})
        answers.append((sent.status, sent.headers["Location"]))
    assert answers == [(303, "/password/forgot?sent=1")] * 2
    assert "a link to choose a new password is on its way" in await (
        await client.get("/password/forgot?sent=1")).text()
    forged = await client.post("/password/forgot", data={"email": admin.email})
    assert forged.status == 403
    [message] = await smtp.wait_for(1)
    assert message["To"] == admin.email
    path = link(message, r"http://localhost(/password/reset\?token=[\w-]+)")

    page = await client.get(path)
    assert page.status == 200 and page.headers["Referrer-Policy"] == "same-origin"
    html = await page.text()
    token, reset_token = field(html, "sign_in_token"), field(html, "token")
    good = {"sign_in_token": token, "token": reset_token, "password": NEW_PASSWORD}
    forged = await client.post("/password/reset", data={**good, "sign_in_token": "x"})
    assert forged.status == 403
    good["sign_in_token"] = field(await forged.text(), "sign_in_token")
    short = await client.post("/password/reset", data={**good, "password": "short"})
    assert short.status == 422 and "password" in await short.text()
    good["sign_in_token"] = field(await short.text(), "sign_in_token")
    done = await client.post("/password/reset", data=good, allow_redirects=False)
    assert done.status == 303 and done.headers["Location"] == "/signin?done=reset"
    assert "Your new password is set" in await (await client.get("/signin?done=reset")).text()
    await sign_in(client, admin.email, NEW_PASSWORD)

    used = await client.get(path)
    assert used.status == 404 and "unknown, already used or expired" in await used.text()
    assert 'href="/password/forgot"' in await used.text()
    again = await client.post("/password/reset", data=good)
    assert again.status == 404
    unknown = await client.get("/password/reset?token=made-up")
    assert unknown.status == 404 and "Ask for a new one" in await unknown.text()
    assert (await client.get("/password/reset")).status == 404


async def test_password_reset__the_apis_route_limit_is_shared(aiohttp_client, config, admin, conn, smtp):
    client = await mail_client(
        aiohttp_client, config, smtp,
        rate_limits={"request_password_reset": {"limit": 1, "period_seconds": 60}})
    api = await client.post("/api/v1/users/password/reset", json={"email": admin.email})
    assert api.status == 202
    token = field(await (await client.get("/password/forgot")).text(), "sign_in_token")
    page = await client.post("/password/forgot", data={"sign_in_token": token, "email": admin.email})
    assert page.status == 429 and "Retry-After" in page.headers



async def test_password_reset__a_session_in_the_browser_gives_no_bucket_of_its_own(
    aiohttp_client, config, admin, conn, smtp,
):
    """The API's signed-out route counts by the client's address; the page did by the member of
    whatever session the browser held, a second bucket for each session one holds."""
    client = await mail_client(
        aiohttp_client, config, smtp,
        rate_limits={"request_password_reset": {"limit": 1, "period_seconds": 60}})
    await set_password(conn, admin.email)
    await sign_in(client, admin.email)
    api = await client.post("/api/v1/users/password/reset", json={"email": "x@example.test"})
    assert api.status == 202
    token = field(await (await client.get("/password/forgot")).text(), "sign_in_token")
    page = await client.post("/password/forgot", data={"sign_in_token": token, "email": admin.email})
    assert page.status == 429 and "Retry-After" in page.headers

async def test_confirm_page__an_admin_created_sign_in_is_confirmed_with_a_password_in_a_form(
    aiohttp_client, config, admin, conn, smtp,
):
    """The confirmation e-mail gave a curl command; its link opens a form now (opening it spends
    nothing), and the password chosen there signs in."""
    client = await mail_client(aiohttp_client, config, smtp)
    created = await client.post("/api/v1/users", headers=admin.headers, json={"user": {
        "email": "grace@example.test", "password": PASSWORD, "terms_of_service": "accepted"}})
    assert created.status == 201, await created.text()
    [message] = await smtp.wait_for(1)
    path = link(message, r"http://localhost(/confirm\?token=[\w-]+)")
    assert "curl" not in message.get_content()

    page = await client.get(path)
    assert page.status == 200 and page.headers["Referrer-Policy"] == "same-origin"
    html = await page.text()
    good = {"sign_in_token": field(html, "sign_in_token"), "token": field(html, "token"),
            "password": NEW_PASSWORD}
    assert await (await client.get(path)).text()  # opened twice: still works
    forged = await client.post("/confirm", data={**good, "sign_in_token": "x"})
    assert forged.status == 403
    good["sign_in_token"] = field(await forged.text(), "sign_in_token")
    short = await client.post("/confirm", data={**good, "password": "short"})
    assert short.status == 422 and "password" in await short.text()
    good["sign_in_token"] = field(await short.text(), "sign_in_token")
    done = await client.post("/confirm", data=good, allow_redirects=False)
    assert done.status == 303 and done.headers["Location"] == "/signin?done=confirmed"
    assert "Your address is confirmed" in await (await client.get("/signin?done=confirmed")).text()
    await sign_in(client, "grace@example.test", NEW_PASSWORD)

    for gone in (path, "/confirm?token=made-up", "/confirm"):
        used = await client.get(gone)
        assert used.status == 404 and "confirmation link cannot be used" in await used.text()


def test_mails__lead_with_the_web_link_and_the_api_follows():
    expires = datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    _, body = invitation_mail("https://rfp.example", "Acme", "TOKEN", expires)
    web_at = body.index("https://rfp.example/invitations/TOKEN")
    assert web_at < body.index("https://rfp.example/api/v1/invitations/TOKEN") and "curl" not in body[:web_at]
    assert "2030-01-02 03:04 UTC" in body
    _, body = password_reset_mail("https://rfp.example", "TOKEN", 2)
    web_at = body.index("https://rfp.example/password/reset?token=TOKEN")
    assert web_at < body.index("/api/v1/users/password/reset/complete") and "curl" not in body[:web_at]
    _, body = added_mail("https://rfp.example", "Acme")
    web_at = body.index("https://rfp.example/signin")
    assert web_at < body.index("https://rfp.example/api/v1/tokens") and "curl" not in body


def test_logs__the_pages_link_secrets_are_redacted():
    assert redact_url("/invitations/SECRET") == "/invitations/[redacted]"
    assert redact_url("/password/reset?token=SECRET") == "/password/reset?token=[redacted]"


async def test_password_forgot__an_address_with_nul_or_too_long_is_the_form_again(
    aiohttp_client, config, smtp,
):
    client = await mail_client(aiohttp_client, config, smtp)
    for email in ("a\x00b@example.test", "a" * 250 + "@example.test", "  "):
        token = field(await (await client.get("/password/forgot")).text(), "sign_in_token")
        sent = await client.post("/password/forgot", data={"sign_in_token": token, "email": email})
        assert sent.status == 422 and "Enter your e-mail address" in await sent.text(), repr(email)
