"""A user who is a member of several accounts in the web app (service/web/pages/accounts.py,
domain/sessions.py `switch_account`): every page's header names the account and leads to the
others, switching ends the session and starts one in the other account, and sign-in goes to the
account last used. Over real HTTP against a real PostgreSQL."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password  # noqa: F401

from service.domain import accounts
from service.domain.ids import new_id
from service.domain.members import remove_member


async def sign_in(client: TestClient, email: str) -> str:
    """Sign in through the form; returns the session's cookie value."""
    token = field(await (await client.get("/signin")).text(), "sign_in_token")
    signed = await client.post("/signin", allow_redirects=False, data={
        "email": email, "password": PASSWORD, "sign_in_token": token})
    assert signed.status == 303, await signed.text()
    return signed.cookies["rfp_session"].value


async def two_accounts(make_account: Any, make_rfp: Any, conn: Any) -> tuple[Any, Any]:
    """A consultant who is the owner (admin) of "Alpha Corp", where their oldest membership is,
    and a viewer of "Beta Ltd"; each account has an RFP of its own."""
    alpha = await make_account("Alpha Corp")
    beta = await make_account("Beta Ltd")
    await accounts.add_member(conn, beta.account_id, alpha.email, "viewer")
    await set_password(conn, alpha.email)
    await make_rfp(alpha, "Alpha's RFP")
    await make_rfp(beta, "Beta's RFP")
    return alpha, beta


def header(html: str) -> str:
    return html.split("<main", 1)[0]


def post_actions(html: str) -> list[str]:
    return re.findall(r'<form[^>]*\bmethod="post"[^>]*\baction="([^"]+)"', html)


async def switch(client: TestClient, account_id: str, csrf: str, **headers: str) -> Any:
    return await client.post("/accounts/switch", allow_redirects=False, headers=headers,
                              data={"csrf_token": csrf, "account_id": account_id})


async def test_header__names_the_account_and_leads_to_the_others_only_when_there_are_several(
    app_client, admin, make_account, make_rfp, conn
):
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    alone = await (await app_client.get("/rfps")).text()
    assert 'id="in-account"' not in alone and "/accounts" not in alone
    app_client.session.cookie_jar.clear()

    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    await sign_in(app_client, alpha.email)
    for path in ("/rfps", "/items", "/kb", "/ask", "/members", "/no-such-page"):
        html = header(await (await app_client.get(path, headers={"Accept": "text/html"})).text())
        assert re.search(r'id="in-account">In <strong>Alpha Corp</strong> · <a href="/accounts"',
                         html), path
    page = await app_client.get("/accounts")
    assert page.status == 200
    html = await page.text()
    assert "form-action 'self'" in page.headers["Content-Security-Policy"]
    rows = re.findall(r"<tr>\s*<td>([^<]*)</td>\s*<td[^>]*>([^<]*)</td>", html)
    assert rows == [("Alpha Corp", "admin (owner)"), ("Beta Ltd", "viewer")]
    assert "You are in this account" in html
    csrf = field(html, "csrf_token")
    assert post_actions(html) == ["/signout", "/accounts/switch"]  # none to the account it is in
    form = re.search(r'<form method="post" action="/accounts/switch".*?</form>', html, re.S)
    assert form and f'name="csrf_token" value="{csrf}"' in form[0]
    assert f'name="account_id" value="{beta.account_id}"' in form[0]
    assert "Switch to Beta Ltd</button>" in form[0]


async def test_switch__lands_on_the_other_accounts_rfps_and_each_cookie_reaches_only_its_own(
    app_client, make_account, make_rfp, conn
):
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    alpha_rfp = await conn.fetchval("SELECT id FROM rfps WHERE account_id = $1", alpha.account_id)
    beta_rfp = await conn.fetchval("SELECT id FROM rfps WHERE account_id = $1", beta.account_id)
    old_cookie = await sign_in(app_client, alpha.email)
    before = await (await app_client.get("/rfps")).text()
    assert "Alpha&#39;s RFP" in before and "Beta&#39;s RFP" not in before
    old_csrf = field(before, "csrf_token")

    switched = await switch(app_client, beta.account_id, old_csrf)
    assert switched.status == 303 and switched.headers["Location"] == "/rfps?switched=1"
    new_cookie = switched.cookies["rfp_session"].value
    assert new_cookie != old_cookie
    assert "HttpOnly" in switched.headers["Set-Cookie"]
    landed = await (await app_client.get("/rfps?switched=1")).text()
    assert '<p class="notice ok" role="status" id="switched">You are now in Beta Ltd.</p>' in landed
    assert "Beta&#39;s RFP" in landed and "Alpha&#39;s RFP" not in landed
    assert "(viewer)" in header(landed) and "<strong>Beta Ltd</strong>" in header(landed)
    assert post_actions(landed) == ["/signout"]  # a viewer there: no write control
    assert 'id="switched"' not in await (await app_client.get("/rfps")).text()  # said once

    # One live session, of Beta's membership; the old one ended on the server.
    live = await conn.fetch("SELECT member_id FROM web_sessions WHERE revoked_at IS NULL")
    beta_member = await conn.fetchval(
        "SELECT id FROM members WHERE account_id = $1 AND user_id = $2", beta.account_id, alpha.user_id)
    assert [r["member_id"] for r in live] == [beta_member]
    event = await conn.fetchrow("SELECT * FROM audit_events WHERE action = 'auth.signed_in'"
                                " ORDER BY id DESC LIMIT 1")
    assert (event["account_id"], event["record_id"]) == (beta.account_id, beta_member)
    assert "switched" in str(event["after"]) and alpha.account_id not in str(event["after"])

    app_client.session.cookie_jar.clear()
    new = {"rfp_session": new_cookie}
    old = {"rfp_session": old_cookie}
    assert (await app_client.get(f"/rfps/{beta_rfp}", cookies=new)).status == 200
    assert (await app_client.get(f"/rfps/{alpha_rfp}", cookies=new)).status == 404
    for path in (f"/rfps/{alpha_rfp}", f"/rfps/{beta_rfp}", "/rfps", "/accounts"):
        gone = await app_client.get(path, cookies=old, allow_redirects=False)
        assert gone.status == 303 and gone.headers["Location"].startswith("/signin"), path
    # Nor does the old session's form token work with the new cookie, or the old cookie post.
    stale = await app_client.post("/rfps", cookies=new, data={"csrf_token": old_csrf, "title": "x"})
    assert stale.status == 403
    dead = await app_client.post("/rfps", cookies=old, data={"csrf_token": old_csrf, "title": "x"})
    assert dead.status == 401
    back = await app_client.post("/accounts/switch", cookies=old, allow_redirects=False,
                                 data={"csrf_token": old_csrf, "account_id": alpha.account_id})
    assert back.status == 401
    assert await conn.fetchval("SELECT count(*) FROM rfps") == 2


async def test_switch__the_new_cookie_lasts_as_long_as_its_session(
    app_client, make_account, make_rfp, conn
):
    """The switch keeps the earlier session's end; its cookie said the whole web.session_ttl_hours
    all the same, so the browser kept a cookie the server no longer knew, for hours."""
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    await sign_in(app_client, alpha.email)
    csrf = field(await (await app_client.get("/rfps")).text(), "csrf_token")
    await conn.execute("UPDATE web_sessions SET expires_at = now() + interval '10 minutes'")
    switched = await switch(app_client, beta.account_id, csrf)
    assert switched.status == 303
    max_age = int(switched.cookies["rfp_session"]["max-age"])
    assert 590 <= max_age < 600, max_age
    left = await conn.fetchval("SELECT extract(epoch FROM expires_at - now()) FROM web_sessions"
                               " WHERE revoked_at IS NULL")
    assert max_age <= left


async def test_switch__another_account_is_refused_as_an_unknown_one(
    app_client, make_account, make_rfp, conn
):
    """Whether the account exists (someone else's) or not, the same 404 page; nothing changes."""
    alpha, _beta = await two_accounts(make_account, make_rfp, conn)
    foreign = await make_account("Gamma Inc")
    cookie = await sign_in(app_client, alpha.email)
    csrf = field(await (await app_client.get("/rfps")).text(), "csrf_token")
    events = await conn.fetchval("SELECT count(*) FROM audit_events")
    pages = []
    for account_id in (foreign.account_id, "acct_doesnotexist", "", "acct_\x00", "x" * 5000):
        refused = await switch(app_client, account_id, csrf)
        assert refused.status == 404, account_id
        pages.append(re.sub(r"<code>\w+</code>", "…", await refused.text()))
        assert "Gamma" not in pages[-1]
    assert len(set(pages)) == 1, "another account's id answers differently from an unknown one"
    assert await conn.fetchval("SELECT count(*) FROM audit_events") == events
    assert await conn.fetchval("SELECT count(*) FROM web_sessions") == 1
    still = await app_client.get("/rfps", cookies={"rfp_session": cookie})
    assert "<strong>Alpha Corp</strong>" in await still.text()


async def test_switch__needs_the_sessions_csrf_token_and_this_site(
    app_client, make_account, make_rfp, conn
):
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    await sign_in(app_client, alpha.email)
    csrf = field(await (await app_client.get("/rfps")).text(), "csrf_token")
    assert (await switch(app_client, beta.account_id, "")).status == 403
    assert (await switch(app_client, beta.account_id, "forged")).status == 403
    evil = await switch(app_client, beta.account_id, csrf, Origin="http://evil.example")
    assert evil.status == 403
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 1
    assert "<strong>Alpha Corp</strong>" in await (await app_client.get("/rfps")).text()


async def test_switch__a_membership_removed_meanwhile_is_no_longer_offered_and_its_form_is_refused(
    app_client, make_account, make_rfp, conn
):
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    third = await make_account("Delta GmbH")
    await accounts.add_member(conn, third.account_id, alpha.email, "member")
    await sign_in(app_client, alpha.email)
    html = await (await app_client.get("/accounts")).text()
    csrf = field(html, "csrf_token")
    assert "Switch to Beta Ltd" in html and "Switch to Delta GmbH" in html
    beta_member = await conn.fetchval(
        "SELECT id FROM members WHERE account_id = $1 AND user_id = $2", beta.account_id, alpha.user_id)
    await remove_member(conn, beta.account_id, beta_member)

    html = await (await app_client.get("/accounts")).text()
    assert "Beta Ltd" not in html and "Switch to Delta GmbH" in html
    stale = await switch(app_client, beta.account_id, csrf)  # the form the old page showed
    assert stale.status == 404 and "Page not found" in await stale.text()
    assert "<strong>Alpha Corp</strong>" in await (await app_client.get("/rfps")).text()
    # Down to one membership: the header offers nothing any more.
    delta_member = await conn.fetchval(
        "SELECT id FROM members WHERE account_id = $1 AND user_id = $2", third.account_id, alpha.user_id)
    await remove_member(conn, third.account_id, delta_member)
    assert 'id="in-account"' not in await (await app_client.get("/rfps")).text()


async def test_sign_in__goes_to_the_account_last_used(app_client, make_account, make_rfp, conn):
    """The first sign-in goes to the oldest membership; after a switch, to the account switched
    to. The API's sign-in without an account_id keeps the oldest."""
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    await sign_in(app_client, alpha.email)
    page = await (await app_client.get("/rfps")).text()
    assert "<strong>Alpha Corp</strong>" in page
    await switch(app_client, beta.account_id, field(page, "csrf_token"))
    page = await (await app_client.get("/rfps")).text()
    out = await app_client.post("/signout", data={"csrf_token": field(page, "csrf_token")},
                                allow_redirects=False)
    assert out.status == 303
    await sign_in(app_client, alpha.email)
    page = await (await app_client.get("/rfps")).text()
    assert "<strong>Beta Ltd</strong>" in page and "(viewer)" in header(page)
    token = await app_client.post("/api/v1/tokens", json={"email": alpha.email, "password": PASSWORD})
    assert (await token.json())["account_id"] == alpha.account_id


async def sign_in_to(client: TestClient, email: str, next_path: str) -> Any:
    """The sign-in form sent from `/signin?next=…` (a page that asked for a session)."""
    token = field(await (await client.get("/signin")).text(), "sign_in_token")
    return await client.post("/signin", allow_redirects=False, data={
        "email": email, "password": PASSWORD, "sign_in_token": token, "next": next_path})


async def test_sign_in__to_open_a_page_of_another_of_ones_accounts_goes_to_that_account(
    app_client, make_account, make_rfp, conn
):
    """A link to Beta's RFP, opened signed out by someone who last worked in Alpha, signed in to
    Alpha, where the RFP is a 404. The sign-in now goes to the account that holds the page's RFP,
    entry or question when it is one of the user's; any other page, or a record of an account
    they are not in (or of none), signs in as before, and says nothing of that record."""
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    beta_rfp = await conn.fetchval("SELECT id FROM rfps WHERE account_id = $1", beta.account_id)
    outsider = await make_account("Gamma Inc")
    theirs = await make_rfp(outsider, "Gamma's RFP")
    entry = new_id("kb")
    await conn.execute("INSERT INTO knowledge_items (id, account_id, question, answer)"
                       " VALUES ($1, $2, 'Beta question?', 'Beta answer.')", entry, beta.account_id)

    async def lands(next_path: str) -> tuple[str, int]:
        app_client.session.cookie_jar.clear()
        signed = await sign_in_to(app_client, alpha.email, next_path)
        assert signed.status == 303 and signed.headers["Location"] == next_path
        page = await app_client.get(next_path)
        account = re.search(r"In <strong>([^<]+)</strong>", await page.text())
        return (account[1] if account else ""), page.status

    assert await lands(f"/rfps/{beta_rfp}?page=1") == ("Beta Ltd", 200)
    assert await lands(f"/kb/{entry}") == ("Beta Ltd", 200)
    assert await lands("/rfps") == ("Beta Ltd", 200)  # the account last used, now Beta
    await conn.execute("UPDATE members SET web_session_at = NULL")  # back to the oldest, Alpha
    assert await lands(f"/rfps/{theirs}") == ("Alpha Corp", 404)
    assert await lands(f"/rfps/{new_id('rfp')}") == ("Alpha Corp", 404)
    assert await lands("/kb/care") == ("Alpha Corp", 200)


async def test_not_found_page__offers_the_other_accounts_alike_for_any_missing_page(
    app_client, make_account, make_rfp, conn
):
    """An e-mailed link to an item of the other account led to a bare 404 page. The page now
    leads to the switcher, the same for another account's RFP as for one that never existed."""
    alpha, beta = await two_accounts(make_account, make_rfp, conn)
    beta_rfp = await conn.fetchval("SELECT id FROM rfps WHERE account_id = $1", beta.account_id)
    await sign_in(app_client, alpha.email)
    pages = []
    for path in (f"/rfps/{beta_rfp}", "/rfps/rfp_doesnotexist"):
        missing = await app_client.get(path)
        assert missing.status == 404
        pages.append(re.sub(r"<code>\w+</code>", "…", await missing.text()))
    assert pages[0] == pages[1]
    assert 'id="not-found-accounts">You are in Alpha Corp;' in pages[0]
    assert '<a href="/accounts">switch account</a>' in pages[0]


async def test_accounts_page__of_a_user_in_one_account_says_there_is_none_to_switch_to(
    app_client, admin, conn
):
    """/accounts, reached by its address, told a user of one account "a member of 1 account …
    switching … starts one in the other account", an account there is not."""
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    html = await (await app_client.get("/accounts")).text()
    assert "member of this account only: there is no other to switch to" in html
    assert "the other account" not in html and "/accounts/switch" not in html


async def test_accounts_page__pages_many_memberships_keeping_the_count_and_the_switch_forms(
    app_client, make_account, conn
):
    """/accounts listed every membership on one page: a consultant in hundreds of accounts got one
    huge page. It is paged as the other lists (20 a page, `_pager.html`); the count is of them all,
    the account the session is in is marked on whichever page it falls, and a switch form of a
    later page switches."""
    home = await make_account("Zeta home")  # sorts last: the account the session is in, page 3
    await set_password(conn, home.email)
    others = [await make_account(f"Account {n:02}") for n in range(1, 46)]
    for other in others:
        await accounts.add_member(conn, other.account_id, home.email, "member")
    await sign_in(app_client, home.email)

    def rows(html: str) -> list[str]:
        return re.findall(r"<tr>\s*<td>([^<]*)</td>", html)

    first = await (await app_client.get("/accounts")).text()
    assert rows(first) == [f"Account {n:02}" for n in range(1, 21)]
    assert "a member of 46 accounts" in first
    assert "You are in this account" not in first
    assert '<span>Page 1 of 3</span>' in first and 'href="?page=2" rel="next"' in first
    second = await (await app_client.get("/accounts?page=2")).text()
    assert rows(second) == [f"Account {n:02}" for n in range(21, 41)]
    assert 'href="?page=1" rel="prev"' in second and 'href="?page=3" rel="next"' in second
    last = await (await app_client.get("/accounts?page=3")).text()
    assert rows(last) == [f"Account {n:02}" for n in range(41, 46)] + ["Zeta home"]
    assert "You are in this account" in last and "Switch to Zeta home" not in last
    assert 'rel="next"' not in last
    past = await app_client.get("/accounts?page=9")
    assert past.status == 200 and rows(await past.text()) == []
    assert 'id="accounts-past-the-end"' in await past.text()
    bad = await app_client.get("/accounts?page=x")
    assert bad.status == 400

    switched = await switch(app_client, others[24].account_id, field(second, "csrf_token"))
    assert switched.status == 303 and switched.headers["Location"] == "/rfps?switched=1"
    landed = await (await app_client.get("/rfps?switched=1")).text()
    assert "<strong>Account 25</strong>" in header(landed)
