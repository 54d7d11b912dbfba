"""Probes of the sign-in's `next` (service/web/pages/account.py, and the redirect of a signed-out
GET to it, common.page) as a hostile link or form sends it. Over real HTTP."""

from __future__ import annotations

from urllib.parse import quote

# The shared page fixtures are imported to register them; tests take them as arguments by name.
# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password  # noqa: F401
from yarl import URL

OFF_SITE = ["//evil.example", "/\\evil.example", "https://evil.example/", "javascript:alert(1)",
            "/\t/evil.example", "%2F%2Fevil.example", "/\u3000/evil.example", "/\x7f/evil.example",
            "/\u200b/evil.example", "/\ufeff/evil.example", " /rfps", "\\\\evil.example"]


async def test_sign_in__next_never_leaves_the_site(app_client, admin, conn):
    """What held: every form of another site's address (or one a browser would turn into it)
    goes to /rfps, from the form and when already signed in; a path of this site stays a path
    ("/.//evil.example" is this site's //evil.example path, not a host)."""
    await set_password(conn, admin.email)
    for sent in [*OFF_SITE, "/.//evil.example", "/%2F%2Fevil.example"]:
        token = field(await (await app_client.get("/signin")).text(), "sign_in_token")
        signed = await app_client.post("/signin", allow_redirects=False, data={
            "email": admin.email, "password": PASSWORD, "sign_in_token": token, "next": sent})
        assert signed.status == 303
        again = await app_client.get("/signin", params={"next": sent}, allow_redirects=False)
        expected = sent if sent.startswith("/.") or sent.startswith("/%") else "/rfps"
        assert (signed.headers["Location"], again.headers["Location"]) == (expected, expected), sent
        app_client.session.cookie_jar.clear()


async def test_sign_in__a_next_longer_than_any_page_of_the_site_is_not_carried(app_client, admin, conn):
    """A `next` went into the redirect whole: a form field as long as a signed-out body may be
    (16 KB), or a link as long as a request line may be, made a Location past what proxies and
    clients read (aiohttp's client: 8,190 bytes, a failed response), and a long link opened
    signed out was sent to a /signin URL longer than the server reads (400). Past the longest
    page address the site makes, it goes to /rfps, and a signed-out GET of such a page goes to
    /signin without it."""
    await set_password(conn, admin.email)
    token = field(await (await app_client.get("/signin")).text(), "sign_in_token")
    signed = await app_client.post("/signin", allow_redirects=False, data={
        "email": admin.email, "password": PASSWORD, "sign_in_token": token, "next": "/rfps/" + "a" * 9_000})
    assert signed.status == 303 and signed.headers["Location"] == "/rfps"
    app_client.session.cookie_jar.clear()
    # Every character of the query percent-encoded again in next= (3 each): 7,000 become 21,000.
    long_link = "/rfps/rfp_x?q=" + quote("é" * 700) + "&" + "a=%20" * 600
    assert len(long_link) < 8_000  # a request line the server reads
    sent = await app_client.get(long_link, allow_redirects=False)
    assert sent.status == 303 and sent.headers["Location"] == "/signin"
    # A page's own long address (a search of 200 characters) is still carried.
    search = "/rfps/rfp_x?q=" + quote("é" * 200) + "&page=3"
    sent = await app_client.get(search, allow_redirects=False)
    assert URL(sent.headers["Location"]).path == "/signin"
    assert URL(sent.headers["Location"]).query["next"] == search
    token = field(await (await app_client.get(sent.headers["Location"])).text(), "sign_in_token")
    signed = await app_client.post("/signin", allow_redirects=False, data={
        "email": admin.email, "password": PASSWORD, "sign_in_token": token, "next": search})
    assert signed.headers["Location"] == search


async def test_sign_in__next_to_another_accounts_record_says_nothing_of_it(
    app_client, admin, make_account, make_rfp, conn,
):
    """What held: a user signing in to open a page of an account they are not in (another's RFP,
    entry or question, or one that does not exist) lands in their own account, the redirect the
    same but for the path asked, the session and its audit event alike: nothing says whether the
    record exists, and no membership but their own is taken."""
    await set_password(conn, admin.email)
    other = await make_account("Other")
    theirs = await make_rfp(other, "Theirs")
    entry = await conn.fetchval(
        "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES ('kb_theirs', $1, 'Q?', 'A.')"
        " RETURNING id", other.account_id)
    seen = []
    for path in (f"/rfps/{theirs}", "/rfps/rfp_nobodys0000000000000", f"/kb/{entry}", "/kb/kb_nobodys",
                 "/ask/q_nobodys"):
        token = field(await (await app_client.get("/signin")).text(), "sign_in_token")
        signed = await app_client.post("/signin", allow_redirects=False, data={
            "email": admin.email, "password": PASSWORD, "sign_in_token": token, "next": path})
        assert signed.headers["Location"] == path
        landed = await app_client.get(path, headers={"Accept": "text/html"})
        event = await conn.fetchrow("SELECT account_id, actor_id FROM audit_events"
                                    " WHERE action = 'auth.signed_in' ORDER BY id DESC LIMIT 1")
        seen.append((signed.status, sorted(signed.headers.keys()), landed.status,
                     (await landed.text()).count("Other"), dict(event)))
        app_client.session.cookie_jar.clear()
    assert all(one == seen[0] for one in seen), seen
    assert seen[0][2] == 404 and seen[0][4]["account_id"] == admin.account_id
