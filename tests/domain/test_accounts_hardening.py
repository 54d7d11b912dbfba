"""Issue 17, findings 1, 5, 8, 9 and 11: passwords that are the user's own, revoking tokens and
members, the same answer for known addresses, concurrent acceptances, sign-in throttling."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import make_mocked_request
from cli_runner import cli, cli_json
from conftest import CONNECT, mail_settings, with_config

from service.domain import members
from service.domain.errors import RateLimited
from service.domain.passwords import Passwords, client_key, hasher
from service.web.app import create_app
from service.web.errors import error_response

ADMIN_CHOSEN = "chosen by admin A!"
OWN = "my very own secret"


def link_token(message: Any, path: str) -> str:
    match = re.search(rf"{re.escape(path)}([\w-]+)", message.get_content())
    assert match, message.get_content()
    return match.group(1)


def confirmation_token(message: Any) -> str:
    match = re.search(r'"token": "([\w-]+)"', message.get_content())
    assert match, message.get_content()
    return match.group(1)


async def sign_in(client: Any, email: str, password: str, **extra: Any) -> Any:
    return await client.post("/api/v1/tokens", json={"email": email, "password": password, **extra})


async def give_password(conn: asyncpg.Connection, email: str, password: str = OWN) -> None:
    """The user chose `password` and confirmed their address (as the e-mailed links do)."""
    await conn.execute(
        "UPDATE users SET password_hash = $2, password_chosen_by_user = true, confirmed_at = now()"
        " WHERE lower(email) = lower($1)", email, hasher().hash(password),
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- 1: a password another account chose never gets anyone in ---------------------------------


async def test_attack__admin_of_another_account_cannot_join_with_the_password_they_chose(
    mail_client, make_account, smtp
):
    first, second = await make_account(name="A"), await make_account(name="B")
    created = await mail_client.post("/api/v1/users", headers=first.headers, json={"user": {
        "email": "u1@example.test", "password": ADMIN_CHOSEN, "terms_of_service": "accepted"}})
    assert created.status == 201
    # u1 confirms and, doing so, chooses their own password.
    token = confirmation_token((await smtp.wait_for(1))[0])
    confirmed = await mail_client.post(
        "/api/v1/users/confirmation", json={"token": token, "password": OWN}
    )
    assert confirmed.status == 200
    # Account B invites u1; A's admin, holding the link, accepts with the password A chose.
    await mail_client.post("/api/v1/invitations", headers=second.headers,
                           json={"invitation": {"email": "u1@example.test", "role": "admin"}})
    invitation = link_token((await smtp.wait_for(2))[1], "/api/v1/invitations/")
    hijack = await mail_client.post(f"/api/v1/invitations/{invitation}/accept",
                                    json={"password": ADMIN_CHOSEN, "terms_of_service": "accepted"})
    assert hijack.status == 422, await hijack.json()
    for account in (first, second):
        token_attempt = await sign_in(
            mail_client, "u1@example.test", ADMIN_CHOSEN, account_id=account.account_id
        )
        assert token_attempt.status == 401
    # u1 with their own password joins B.
    joined = await mail_client.post(f"/api/v1/invitations/{invitation}/accept",
                                    json={"password": OWN, "terms_of_service": "accepted"})
    assert joined.status == 201


async def test_legacy_admin_chosen_password_is_refused_until_reset(mail_client, admin, conn, smtp):
    await mail_client.post("/api/v1/users", headers=admin.headers, json={"user": {
        "email": "old@example.test", "password": ADMIN_CHOSEN, "terms_of_service": "accepted"}})
    await smtp.wait_for(1)
    # As migration 0020 leaves a password an administrator chose before it.
    await conn.execute(
        "UPDATE users SET password_hash = $1, password_chosen_by_user = false, confirmed_at = now()"
        " WHERE email = 'old@example.test'", hasher().hash(ADMIN_CHOSEN),
    )
    refused = await sign_in(mail_client, "old@example.test", ADMIN_CHOSEN)
    assert refused.status == 403 and "reset" in (await refused.json())["error"]["message"]
    assert (await sign_in(mail_client, "old@example.test", "wrong password!!")).status == 401

    asked = await mail_client.post("/api/v1/users/password/reset", json={"email": "OLD@example.test"})
    assert asked.status == 202
    reset_token = confirmation_token((await smtp.wait_for(2))[1])
    done = await mail_client.post("/api/v1/users/password/reset/complete",
                                  json={"token": reset_token, "password": OWN})
    assert done.status == 200
    assert (await sign_in(mail_client, "old@example.test", OWN)).status == 201
    again = await mail_client.post("/api/v1/users/password/reset/complete",
                                   json={"token": reset_token, "password": OWN})
    assert again.status == 404  # one use


async def test_password_reset__same_answer_for_unknown_address_and_revokes_tokens(
    mail_client, admin, conn, smtp
):
    await give_password(conn, admin.email)
    unknown = await mail_client.post("/api/v1/users/password/reset", json={"email": "no@example.test"})
    known = await mail_client.post("/api/v1/users/password/reset", json={"email": admin.email})
    assert unknown.status == known.status == 202
    assert (await unknown.json()) == (await known.json())
    [message] = await smtp.wait_for(1)
    assert message["To"] == admin.email
    token = confirmation_token(message)
    await mail_client.post("/api/v1/users/password/reset/complete",
                           json={"token": token, "password": "a brand new secret"})
    assert (await mail_client.get("/api/v1/members", headers=admin.headers)).status == 401
    assert (await sign_in(mail_client, admin.email, OWN)).status == 401
    assert (await sign_in(mail_client, admin.email, "a brand new secret")).status == 201


async def test_password_reset__known_and_unknown_addresses_answer_no_sooner_than_the_floor(
    mail_client, admin, conn, smtp
):
    """A known address's link is stored and its e-mail queued before the answer: without the
    floor that answer took longer than an unknown address's, telling the address has a sign-in."""
    await give_password(conn, admin.email)
    for email in ("no@example.test", admin.email, "no@example.test", admin.email):
        started = time.monotonic()
        answer = await mail_client.post("/api/v1/users/password/reset", json={"email": email})
        took = time.monotonic() - started
        assert answer.status == 202 and took >= members.RESET_ANSWER_SECONDS, (email, took)
    assert len(await smtp.wait_for(2)) == 2


async def test_password_reset__sends_at_most_the_configured_number(aiohttp_client, config, admin, conn, smtp):
    settings = with_config(config, mail=mail_settings(smtp.port),
                           members={"password_reset_per_email": {"limit": 1, "period_seconds": 3600}})
    client = await aiohttp_client(create_app(settings))
    for _ in range(3):
        assert (await client.post("/api/v1/users/password/reset",
                                  json={"email": admin.email})).status == 202
    await smtp.wait_for(1)
    await asyncio.sleep(0.3)
    assert await conn.fetchval("SELECT count(*) FROM password_resets") == 1


async def test_change_password__needs_the_current_one_and_revokes_other_tokens(client, admin, conn):
    await give_password(conn, admin.email)
    other = await (await sign_in(client, admin.email, OWN)).json()
    current = await (await sign_in(client, admin.email, OWN)).json()
    wrong = await client.post("/api/v1/users/password", headers=bearer(current["token"]),
                              json={"current_password": "not it at all", "new_password": "another secret!"})
    assert wrong.status == 422
    changed = await client.post("/api/v1/users/password", headers=bearer(current["token"]),
                                json={"current_password": OWN, "new_password": "another secret!"})
    assert changed.status == 200, await changed.json()
    assert (await client.get("/api/v1/members", headers=bearer(current["token"]))).status == 200
    assert (await client.get("/api/v1/members", headers=bearer(other["token"]))).status == 401
    assert (await client.get("/api/v1/members", headers=admin.headers)).status == 401
    assert (await sign_in(client, admin.email, OWN)).status == 401
    assert (await sign_in(client, admin.email, "another secret!")).status == 201


# -- 5: revoking tokens, removing members, changing roles --------------------------------------


async def test_tokens__listed_and_revoked_by_their_member_or_an_admin(client, admin, make_member):
    member = await make_member(admin.account_id)
    other = await make_member(admin.account_id)
    own = await client.get(f"/api/v1/members/{member.member_id}/tokens", headers=member.headers)
    [token] = (await own.json())["tokens"]
    assert (token["state"], token["source"], token["scopes"]) == ("live", "cli", ["read", "write"])
    assert "rfpk_" not in str(await own.json())

    forbidden = await client.get(f"/api/v1/members/{member.member_id}/tokens", headers=other.headers)
    assert forbidden.status == 403
    refused = await client.delete(f"/api/v1/tokens/{token['id']}", headers=other.headers)
    assert refused.status == 403

    revoked = await client.delete(f"/api/v1/tokens/{token['id']}", headers=admin.headers)
    assert revoked.status == 200 and (await revoked.json())["state"] == "revoked"
    assert (await client.get("/api/v1/members", headers=member.headers)).status == 401


async def test_tokens__a_read_token_neither_revokes_tokens_nor_changes_the_password(
    client, admin, conn
):
    # Every change needs the write scope: a probe's read token revoked its member's write token.
    await give_password(conn, admin.email)
    reader = (await (await sign_in(client, admin.email, OWN, scopes=["read"])).json())["token"]
    listed = await client.get(f"/api/v1/members/{admin.member_id}/tokens", headers=bearer(reader))
    assert listed.status == 200
    writers = [t["id"] for t in (await listed.json())["tokens"] if "write" in t["scopes"]]
    refused = await client.delete(f"/api/v1/tokens/{writers[0]}", headers=bearer(reader))
    assert refused.status == 403 and (await refused.json())["error"]["code"] == "insufficient_scope"
    changed = await client.post("/api/v1/users/password", headers=bearer(reader),
                                json={"current_password": OWN, "new_password": "another secret!"})
    assert changed.status == 403
    assert (await client.get("/api/v1/members", headers=admin.headers)).status == 200
    assert (await sign_in(client, admin.email, OWN)).status == 201


async def test_tokens__of_another_account_are_not_found(client, make_account):
    first, second = await make_account(), await make_account()
    listed = await client.get(f"/api/v1/members/{first.member_id}/tokens", headers=first.headers)
    token_id = (await listed.json())["tokens"][0]["id"]
    response = await client.delete(f"/api/v1/tokens/{token_id}", headers=second.headers)
    assert response.status == 404
    bad = await client.delete("/api/v1/tokens/abc", headers=second.headers)
    assert bad.status == 400


async def test_remove_member__their_tokens_stop_at_once_and_the_owner_stays(client, admin, make_member):
    member = await make_member(admin.account_id)
    assert (await client.get("/api/v1/members", headers=member.headers)).status == 200
    removed = await client.delete(f"/api/v1/members/{member.member_id}", headers=admin.headers)
    assert removed.status == 204
    assert (await client.get("/api/v1/members", headers=member.headers)).status == 401
    owner = await client.delete(f"/api/v1/members/{admin.member_id}", headers=admin.headers)
    assert owner.status == 403
    missing = await client.delete(f"/api/v1/members/{member.member_id}", headers=admin.headers)
    assert missing.status == 404
    by_member = await make_member(admin.account_id)
    assert (await client.delete(f"/api/v1/members/{admin.member_id}",
                                headers=by_member.headers)).status == 403


async def test_change_role__to_viewer_applies_to_tokens_at_once_and_they_may_still_ask(
    client, admin, make_member, conn
):
    # A probe found a member lowered to viewer could no longer ask through the API (their tokens
    # had lost write), though viewers may ask; signing in again gave them a write token anyway.
    member = await make_member(admin.account_id, role="admin")
    rfp = {"rfp": {"title": "Acme"}}
    assert (await client.post("/api/v1/rfps", json=rfp, headers=member.headers)).status == 201
    changed = await client.patch(f"/api/v1/members/{member.member_id}", headers=admin.headers,
                                 json={"member": {"role": "viewer"}})
    assert changed.status == 200 and (await changed.json())["role"] == "viewer"
    assert (await client.post("/api/v1/rfps", json=rfp, headers=member.headers)).status == 403
    assert (await client.post("/api/v1/users", headers=member.headers, json={})).status == 403
    assert (await client.get("/api/v1/members", headers=member.headers)).status == 200
    asked = await client.post("/api/v1/questions", headers=member.headers,
                              json={"question": {"question": "Is data encrypted at rest?"}})
    assert asked.status == 202, await asked.text()
    bad = await client.patch(f"/api/v1/members/{member.member_id}", headers=admin.headers,
                             json={"member": {"role": "owner"}})
    assert bad.status == 422
    owner = await client.patch(f"/api/v1/members/{admin.member_id}", headers=admin.headers,
                               json={"member": {"role": "member"}})
    assert owner.status == 403


async def test_sign_in_tokens_expire_by_default(client, admin, conn):
    await give_password(conn, admin.email)
    issued = await (await sign_in(client, admin.email, OWN)).json()
    assert issued["expires_at"] is not None


async def test_cli__list_revoke_tokens_remove_member_change_role(database_url, admin, make_member, conn):
    member = await make_member(admin.account_id)
    made = cli_json(database_url, "token", "create", "--account", admin.account_id,
                    "--email", member.email, "--ttl-days", "2")
    cli_json(database_url, "token", "create", "--account", admin.account_id, "--email", member.email)
    listed = cli_json(database_url, "token", "list", "--account", admin.account_id,
                      "--email", member.email)["tokens"]
    assert len(listed) == 3 and all(t["state"] == "live" for t in listed)
    assert made["token"].startswith("rfpk_")
    days = [(datetime.fromisoformat(t["expires_at"]) - datetime.now(UTC)).days for t in listed[:2]]
    assert days == [364, 1]  # the default auth.cli_token_ttl_days (365), then --ttl-days 2
    revoked = cli_json(database_url, "token", "revoke", "--account", admin.account_id,
                       str(listed[0]["id"]))
    assert revoked["token"]["state"] == "revoked"

    role = cli_json(database_url, "member", "role", "--account", admin.account_id,
                    "--email", member.email, "--role", "viewer")
    assert role["member"]["role"] == "viewer"
    cli_json(database_url, "member", "remove", "--account", admin.account_id, "--email", member.email)
    assert await conn.fetchval("SELECT count(*) FROM members WHERE id = $1", member.member_id) == 0
    owner = cli(database_url, "member", "remove", "--account", admin.account_id, "--email", admin.email)
    assert owner.returncode == 1 and "owner" in owner.stderr


# -- 8: the same answer whether or not the address is registered elsewhere ----------------------


async def test_create_user__same_answer_for_an_address_registered_elsewhere(
    mail_client, make_account, conn, smtp
):
    first, second = await make_account(name="A"), await make_account(name="B")
    await give_password(conn, second.email)  # registered (and signed in) in B
    shapes = []
    for email in ("fresh@example.test", second.email):
        response = await mail_client.post("/api/v1/users", headers=first.headers, json={"user": {
            "email": email, "password": ADMIN_CHOSEN, "terms_of_service": "accepted",
            "first_name": "Kim", "last_name": "Lee", "role": "viewer"}})
        body = await response.json()
        assert response.status == 201, body
        shapes.append((sorted(body), body["name"], body["first_name"], body["role"], body["owner"]))
    assert shapes[0] == shapes[1]
    messages = await smtp.wait_for(2)
    assert {m["To"] for m in messages} == {"fresh@example.test", second.email}
    # The existing user keeps their password and may now sign in to A with it.
    assert (await sign_in(mail_client, second.email, OWN, account_id=first.account_id)).status == 201


# -- 9: concurrency and the error log -----------------------------------------------------------


async def test_concurrent_acceptances_for_one_new_address_give_no_500(mail_client, make_account, smtp):
    accounts_ = [await make_account(name=f"A{i}") for i in range(3)]
    for account in accounts_:
        await mail_client.post("/api/v1/invitations", headers=account.headers,
                               json={"invitation": {"email": "new@example.test"}})
    tokens = [link_token(m, "/api/v1/invitations/") for m in await smtp.wait_for(3)]
    responses = await asyncio.gather(*(
        mail_client.post(f"/api/v1/invitations/{t}/accept",
                         json={"password": OWN, "terms_of_service": "accepted"})
        for t in tokens
    ))
    statuses = sorted(r.status for r in responses)
    assert all(s < 500 for s in statuses), statuses
    assert statuses.count(201) >= 1


async def test_concurrent_reinvitations_give_no_500_and_leave_one_pending(client, admin, conn):
    responses = await asyncio.gather(*(
        client.post("/api/v1/invitations", headers=admin.headers,
                    json={"invitation": {"email": "again@example.test"}})
        for _ in range(6)
    ))
    # The 6th is past mail.invitation_mails_per_hour (5) to one address, counted exactly under
    # the address's lock however many arrive at once.
    assert sorted(r.status for r in responses) == [201] * 5 + [429]
    pending = await conn.fetchval("SELECT count(*) FROM invitations WHERE state = 'pending'")
    assert pending == 1


def test_error_log__redacts_the_invitation_token(caplog):
    request = make_mocked_request("POST", "/api/v1/invitations/SECRETLINKTOKEN/accept")
    with caplog.at_level(logging.ERROR, logger="service.web.errors"):
        response = error_response(request, RuntimeError("boom"))
    assert response.status == 500
    assert "SECRETLINKTOKEN" not in caplog.text and "/invitations/[redacted]" in caplog.text


# -- 11: sign-in throttling ----------------------------------------------------------------------


def test_client_key__ipv6_per_64_and_ipv4_as_is():
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:192.0.2.1") == client_key("192.0.2.1") == "192.0.2.1"
    assert client_key(None) == "unknown"


async def test_sign_in__successes_count_against_the_client(aiohttp_client, config, admin, conn):
    limited = with_config(config, members={"sign_in_per_address": {"limit": 3, "period_seconds": 600}})
    client = await aiohttp_client(create_app(limited))
    await give_password(conn, admin.email)
    for _ in range(3):
        assert (await sign_in(client, admin.email, OWN)).status == 201
    # No refund: the account holder gets no free guesses at somebody else.
    guess = await sign_in(client, "victim@example.test", "a guess of mine")
    assert guess.status == 429 and int(guess.headers["Retry-After"]) >= 1


@pytest.fixture
async def pool(database_url: str):
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4, **CONNECT)
    yield pool
    await pool.close()


async def test_sign_in__a_strangers_failures_do_not_lock_out_a_known_client(pool, config, admin, conn):
    settings = with_config(config, members={
        "sign_in_per_email": {"limit": 2, "period_seconds": 600},
        "sign_in_per_address": {"limit": 100, "period_seconds": 600},
    })
    await give_password(conn, admin.email)
    passwords = await Passwords.create()
    right = {"email": admin.email, "password": OWN}
    wrong = {"email": admin.email, "password": "a wrong guess!!"}
    await members.sign_in(pool, passwords, settings, right, "198.51.100.7")  # the user's office
    for _ in range(2):  # …empties the bucket; the attacker's next tries are refused
        with pytest.raises(Exception) as failed:
            await members.sign_in(pool, passwords, settings, wrong, "203.0.113.66")
        assert failed.value.code in ("unauthorized", "rate_limited")
    with pytest.raises(RateLimited):
        await members.sign_in(pool, passwords, settings, wrong, "203.0.113.66")
    with pytest.raises(RateLimited):  # a client never seen with this user: refused too
        await members.sign_in(pool, passwords, settings, right, "192.0.2.200")
    issued = await members.sign_in(pool, passwords, settings, right, "198.51.100.7")
    assert issued["token"].startswith("rfpk_")


async def test_invitation_acceptance_is_throttled(mail_client, make_account, conn, smtp):
    first = await make_account()
    await give_password(conn, first.email)
    second = await make_account(name="Other")
    await mail_client.post("/api/v1/invitations", headers=second.headers,
                           json={"invitation": {"email": first.email}})
    token = link_token((await smtp.wait_for(1))[0], "/api/v1/invitations/")
    statuses = []
    for _ in range(11):  # sign_in_per_email: 10 per 15 minutes
        response = await mail_client.post(f"/api/v1/invitations/{token}/accept",
                                          json={"password": "guessing again", "terms_of_service": True})
        statuses.append(response.status)
    assert statuses[:10] == [422] * 10 and statuses[10] == 429


# -- 12: held mail is for the operator, through the CLI --------------------------------------------


async def test_cli__mail_show_lists_held_mail_and_prints_one(database_url, conn):
    from service import config as config_module
    from service.domain import mail
    from service.domain.mail import MailSender

    settings = config_module.structure({}).mail  # no smtp_host: held
    mail_id = await mail.enqueue(conn, settings, "ada@example.test", "Confirm", "token=SECRET123",
                                 kind="test")
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, **CONNECT)
    try:
        assert await MailSender(pool, settings).deliver_due()
    finally:
        await pool.close()
    listed = cli(database_url, "mail", "show")
    assert listed.returncode == 0 and f"{mail_id}\t" in listed.stdout and "SECRET123" not in listed.stdout
    shown = cli(database_url, "mail", "show", str(mail_id))
    assert shown.returncode == 0 and "token=SECRET123" in shown.stdout
    assert "To: ada@example.test" in shown.stdout
    assert cli(database_url, "mail", "show", "999999").returncode == 1


async def test_confirmation_link_replaces_no_password_the_user_chose_since(mail_client, make_account, smtp):
    first, second = await make_account(name="A"), await make_account(name="B")
    await mail_client.post("/api/v1/users", headers=first.headers, json={"user": {
        "email": "u2@example.test", "password": ADMIN_CHOSEN, "terms_of_service": "accepted"}})
    confirmation = confirmation_token((await smtp.wait_for(1))[0])
    await mail_client.post("/api/v1/invitations", headers=second.headers,
                           json={"invitation": {"email": "u2@example.test"}})
    invitation = link_token((await smtp.wait_for(2))[1], "/api/v1/invitations/")
    joined = await mail_client.post(f"/api/v1/invitations/{invitation}/accept",
                                    json={"password": OWN, "terms_of_service": "accepted"})
    assert joined.status == 201
    confirmed = await mail_client.post("/api/v1/users/confirmation",
                                       json={"token": confirmation, "password": "replaced by a link"})
    assert confirmed.status == 200
    assert (await sign_in(mail_client, "u2@example.test", "replaced by a link")).status == 401
    assert (await sign_in(mail_client, "u2@example.test", OWN)).status == 201


async def test_invitation__operator_made_user_keeps_their_cli_token(mail_client, make_account, smtp):
    first, second = await make_account(name="A"), await make_account(name="B")  # first: no password
    await mail_client.post("/api/v1/invitations", headers=second.headers,
                           json={"invitation": {"email": first.email}})
    invitation = link_token((await smtp.wait_for(1))[0], "/api/v1/invitations/")
    joined = await mail_client.post(f"/api/v1/invitations/{invitation}/accept",
                                    json={"password": OWN, "terms_of_service": "accepted"})
    assert joined.status == 201
    assert (await mail_client.get("/api/v1/members", headers=first.headers)).status == 200


async def test_demo_token_expires_after_cli_token_ttl_days(empty_database_url, config):
    from service.cli import bootstrap_demo

    # The empty database is reached directly (no pooler), whichever server the tests run on.
    direct = with_config(config, auth={"cli_token_ttl_days": 30},
                         database={"url": empty_database_url, "pooler": "none", "direct_url": ""})
    demo = await bootstrap_demo(empty_database_url, direct)
    conn = await asyncpg.connect(empty_database_url)
    try:
        row = await conn.fetchrow("SELECT source, expires_at - now() AS left FROM api_tokens")
    finally:
        await conn.close()
    assert demo["token"].startswith("rfpk_")
    assert row["source"] == "demo" and 29 <= row["left"].days < 30


async def test_create_user__a_member_added_meanwhile_elsewhere_is_409_not_500(
    client, make_account, conn, database_url
):
    first, second = await make_account(name="A"), await make_account(name="B")
    other = await asyncpg.connect(database_url, **CONNECT)  # the operator's CLI: no address lock
    try:
        transaction = other.transaction()
        await transaction.start()
        await other.execute(
            "INSERT INTO members (id, account_id, user_id, role) VALUES ('mbr_cli', $1, $2, 'member')",
            first.account_id, second.user_id,
        )
        request = asyncio.create_task(client.post("/api/v1/users", headers=first.headers, json={
            "user": {"email": second.email, "password": ADMIN_CHOSEN, "terms_of_service": True}}))
        await asyncio.sleep(0.5)  # the request waits on the uncommitted row's unique key
        await transaction.commit()
        response = await request
    finally:
        await other.close()
    assert response.status == 409, await response.json()
    assert (await response.json())["error"]["code"] == "conflict"


async def test_create_user__an_existing_user_without_own_password_gets_a_link_to_choose_one(
    mail_client, make_account, smtp
):
    first, second = await make_account(name="A"), await make_account(name="B")
    for account in (first, second):
        response = await mail_client.post("/api/v1/users", headers=account.headers, json={"user": {
            "email": "u3@example.test", "password": ADMIN_CHOSEN, "terms_of_service": True}})
        assert response.status == 201
    messages = await smtp.wait_for(2)
    token = confirmation_token(messages[1])  # B's mail lets u3 choose a password too
    confirmed = await mail_client.post("/api/v1/users/confirmation", json={"token": token, "password": OWN})
    assert confirmed.status == 200
    signed_in = await sign_in(mail_client, "u3@example.test", OWN, account_id=second.account_id)
    assert signed_in.status == 201
