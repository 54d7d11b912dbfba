"""POST /api/v1/users, e-mail confirmation, POST /api/v1/tokens and GET /api/v1/members."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import with_config

from service.domain.passwords import hasher
from service.domain.tokens import hash_token
from service.web.app import create_app

PASSWORD = "correct horse battery"
# The password the user chooses on confirmation; the administrator's PASSWORD is never stored.
OWN_PASSWORD = "my own staple battery"


def new_user(**fields: Any) -> dict[str, Any]:
    user = {"email": "ada@example.test", "password": PASSWORD, "terms_of_service": "accepted"}
    return {"user": {**user, **fields}}


def confirmation_token(message: Any) -> str:
    body = message.get_content()
    match = re.search(r"https://app\.example\.test/confirm\?token=([\w-]+)", body)
    assert match, body
    return match.group(1)


async def sign_in(client: Any, email: str, password: str = PASSWORD, **extra: Any) -> Any:
    return await client.post("/api/v1/tokens", json={"email": email, "password": password, **extra})


async def test_create_user__returns_member_and_only_confirmed_user_signs_in(mail_client, admin, smtp):
    response = await mail_client.post(
        "/api/v1/users",
        json=new_user(first_name="Ada", last_name="Lovelace", role="viewer"),
        headers=admin.headers,
    )
    body = await response.json()
    assert response.status == 201, body
    assert body["id"].startswith("mbr_")
    assert body["email"] == "ada@example.test"
    assert (body["name"], body["first_name"], body["last_name"]) == ("Ada Lovelace", "Ada", "Lovelace")
    assert (body["role"], body["roles"], body["owner"]) == ("viewer", ["viewer"], False)
    assert body["created_at"].endswith("Z") and body["updated_at"].endswith("Z")
    assert "password" not in str(body) and "argon2" not in str(body)

    refused = await sign_in(mail_client, "ada@example.test")
    assert refused.status == 401  # the administrator's password is no password of the user

    [message] = await smtp.wait_for(1)
    assert message["To"] == "ada@example.test"
    token = confirmation_token(message)
    without = await mail_client.post("/api/v1/users/confirmation", json={"token": token})
    assert without.status == 422  # the user must choose a password; the link stays usable
    confirmed = await mail_client.post(
        "/api/v1/users/confirmation", json={"token": token, "password": OWN_PASSWORD}
    )
    assert confirmed.status == 200
    assert (await confirmed.json())["email"] == "ada@example.test"
    assert (await sign_in(mail_client, "ada@example.test")).status == 401

    signed_in = await sign_in(mail_client, "ADA@example.test", OWN_PASSWORD, scopes=["read"])
    issued = await signed_in.json()
    assert signed_in.status == 201, issued
    assert issued["scopes"] == ["read"]
    members = await mail_client.get(
        "/api/v1/members", headers={"Authorization": f"Bearer {issued['token']}"}
    )
    assert members.status == 200
    assert body["id"] in [m["id"] for m in (await members.json())["members"]]


async def test_confirmation__link_works_once(mail_client, admin, smtp):
    await mail_client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    token = confirmation_token((await smtp.wait_for(1))[0])
    shown = await mail_client.get(f"/api/v1/users/confirmation?token={token}")
    assert shown.status == 200
    assert "choose your password" in await shown.text()
    first = await mail_client.post(
        "/api/v1/users/confirmation", json={"token": token, "password": OWN_PASSWORD}
    )
    assert first.status == 200
    again = await mail_client.post(
        "/api/v1/users/confirmation", json={"token": token, "password": OWN_PASSWORD}
    )
    assert again.status == 404
    assert (await again.json())["error"]["code"] == "not_found"


async def test_confirmation__expired_link_is_refused(mail_client, admin, smtp, conn):
    await mail_client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    token = confirmation_token((await smtp.wait_for(1))[0])
    await conn.execute("UPDATE email_confirmations SET expires_at = now() - interval '1 second'")
    response = await mail_client.post(
        "/api/v1/users/confirmation", json={"token": token, "password": OWN_PASSWORD}
    )
    assert response.status == 404
    assert (await sign_in(mail_client, "ada@example.test", OWN_PASSWORD)).status == 401


async def test_outbox__keeps_no_link_once_sent(mail_client, admin, smtp, conn):
    await mail_client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    token = confirmation_token((await smtp.wait_for(1))[0])
    for _ in range(100):
        row = await conn.fetchrow("SELECT state::text, body FROM mail_outbox")
        if row["state"] == "sent":
            break
        await asyncio.sleep(0.02)
    assert row["state"] == "sent" and token not in row["body"]
    stored = await conn.fetchval("SELECT token_hash FROM email_confirmations")
    assert bytes(stored) == hash_token(token)  # only the hash of the link's token is kept


async def test_create_user__needs_write_scope_and_admin_role(client, admin, make_member):
    read_only_admin = await make_member(admin.account_id, role="admin", scopes="read")
    member = await make_member(admin.account_id, role="member")
    scope = await client.post("/api/v1/users", json=new_user(), headers=read_only_admin.headers)
    role = await client.post("/api/v1/users", json=new_user(), headers=member.headers)
    assert (scope.status, (await scope.json())["error"]["code"]) == (403, "insufficient_scope")
    assert (role.status, (await role.json())["error"]["code"]) == (403, "forbidden")


async def test_create_user__inactive_subscription_is_usage_blocked(client, admin, conn):
    await conn.execute("UPDATE accounts SET subscription_status = 'inactive' WHERE id = $1", admin.account_id)
    response = await client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "usage_blocked"


async def test_create_user__lists_every_validation_failure(client, admin):
    response = await client.post(
        "/api/v1/users",
        json={"user": {"password": "short", "role": "owner"}},
        headers=admin.headers,
    )
    body = await response.json()
    assert response.status == 422
    assert body["error"]["code"] == "validation_failed"
    details = body["error"]["details"]
    assert len(details) == 4, details
    assert any(d.startswith("user.email:") for d in details)
    assert any(d.startswith("user.password:") and "short" in d for d in details)
    assert any(d.startswith("user.terms_of_service:") for d in details)
    assert any(d.startswith("user.role:") for d in details)


async def test_create_user__rejects_each_bad_field(client, admin):
    cases = {
        "email": new_user(email="not-an-address"),
        "password": new_user(password="x" * 129),
        "password ": new_user(password=" " * 20),
        "terms_of_service": new_user(terms_of_service="no"),
        "terms_of_service ": new_user(terms_of_service=False),
    }
    for field, payload in cases.items():
        response = await client.post("/api/v1/users", json=payload, headers=admin.headers)
        details = (await response.json())["error"]["details"]
        assert response.status == 422, field
        assert details == [details[0]] and details[0].startswith(f"user.{field.strip()}:"), details


async def test_create_user__member_of_this_account_in_any_case_is_422(client, admin):
    first = await client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    assert first.status == 201
    again = await client.post(
        "/api/v1/users", json=new_user(email="ADA@Example.test"), headers=admin.headers
    )
    details = (await again.json())["error"]["details"]
    assert again.status == 422
    assert details == ["user.email: is already a member of this account"]


async def test_create_user__member_address_said_beside_the_other_fields_errors(client, admin):
    """One 422 lists all there is to put right: the address that is a member already as well as
    a bad role (the membership was checked only once every other field passed)."""
    member = await client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    assert member.status == 201
    again = await client.post("/api/v1/users", json=new_user(role="boss", password="short"),
                              headers=admin.headers)
    details = (await again.json())["error"]["details"]
    assert again.status == 422
    assert details[0] == "user.email: is already a member of this account"
    assert sorted(d.split(":")[0] for d in details[1:]) == ["user.password", "user.role"], details


async def test_create_user__accepts_explicit_terms_forms_and_defaults_to_member(client, admin):
    for number, terms in enumerate([True, "Accepted", " yes ", "1", "TRUE"]):
        response = await client.post(
            "/api/v1/users",
            json=new_user(email=f"user{number}@example.test", terms_of_service=terms),
            headers=admin.headers,
        )
        body = await response.json()
        assert response.status == 201, (terms, body)
        assert body["role"] == "member"
        assert body["name"] == f"user{number}"


async def test_create_user__stores_no_password_until_the_user_chooses_one_as_argon2id(
    mail_client, admin, smtp, conn
):
    await mail_client.post("/api/v1/users", json=new_user(), headers=admin.headers)
    query = "SELECT password_hash FROM users WHERE email = 'ada@example.test'"
    assert await conn.fetchval(query) is None
    token = confirmation_token((await smtp.wait_for(1))[0])
    await mail_client.post("/api/v1/users/confirmation", json={"token": token, "password": OWN_PASSWORD})
    stored = await conn.fetchval(query)
    assert stored.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert OWN_PASSWORD not in stored


async def confirmed_user(client: Any, admin: Any, conn: Any, email: str = "ada@example.test") -> None:
    """A user created by the admin who confirmed and chose PASSWORD (as the e-mail link does)."""
    response = await client.post("/api/v1/users", json=new_user(email=email), headers=admin.headers)
    assert response.status == 201
    await conn.execute(
        "UPDATE users SET confirmed_at = now(), password_hash = $2, password_chosen_by_user = true"
        " WHERE lower(email) = lower($1)", email, hasher().hash(PASSWORD),
    )


async def test_sign_in__wrong_password_and_unknown_email_look_the_same(client, admin, conn):
    await confirmed_user(client, admin, conn)
    wrong = await sign_in(client, "ada@example.test", "wrong password!!")
    unknown = await sign_in(client, "nobody@example.test")
    assert wrong.status == unknown.status == 401
    assert (await wrong.json()) == (await unknown.json())


async def test_sign_in__repeated_failures_are_rate_limited(aiohttp_client, config, admin, conn):
    limited = with_config(config, members={"sign_in_per_email": {"limit": 3, "period_seconds": 600}})
    client = await aiohttp_client(create_app(limited))
    await confirmed_user(client, admin, conn)
    for _ in range(3):
        assert (await sign_in(client, "ada@example.test", "wrong password!!")).status == 401
    blocked = await sign_in(client, "ada@example.test", "wrong password!!")
    assert blocked.status == 429
    assert (await blocked.json())["error"]["code"] == "rate_limited"
    assert int(blocked.headers["Retry-After"]) >= 1


async def test_sign_in__token_expires_after_configured_days(aiohttp_client, config, admin, conn):
    client = await aiohttp_client(create_app(with_config(config, auth={"token_ttl_days": 7})))
    await confirmed_user(client, admin, conn)
    response = await sign_in(client, "ada@example.test")
    body = await response.json()
    expires = datetime.fromisoformat(body["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=7))) < timedelta(minutes=1)
    assert body["scopes"] == ["read", "write"]


async def test_sign_in__picks_oldest_membership_unless_account_given(client, make_account, conn):
    first, second = await make_account(), await make_account()
    await confirmed_user(client, first, conn)
    member = await conn.fetchval("SELECT id FROM users WHERE email = 'ada@example.test'")
    await conn.execute(
        "INSERT INTO members (id, account_id, user_id, role) VALUES ('mbr_second', $1, $2, 'viewer')",
        second.account_id, member,
    )
    default = await (await sign_in(client, "ada@example.test")).json()
    chosen = await (await sign_in(client, "ada@example.test", account_id=second.account_id)).json()
    assert default["account_id"] == first.account_id
    assert chosen["account_id"] == second.account_id and chosen["member_id"] == "mbr_second"
    stranger = await make_account()
    refused = await sign_in(client, "ada@example.test", account_id=stranger.account_id)
    assert refused.status == 403


async def test_list_members__paginated_with_owner_flag(client, admin, make_member):
    for _ in range(2):
        await make_member(admin.account_id)
    response = await client.get("/api/v1/members", headers=admin.headers)
    body = await response.json()
    assert response.status == 200
    assert body["pagination"]["total_count"] == 3
    assert [m["owner"] for m in body["members"]] == [True, False, False]
    assert body["members"][0]["id"] == admin.member_id
    past = await client.get("/api/v1/members?page=2", headers=admin.headers)
    assert (await past.json())["members"] == []


async def test_responses_showing_a_secret_once_are_not_stored_by_any_cache(client, admin, conn):
    """A token or a webhook endpoint's signing secret is in the response that creates it, once:
    Cache-Control: no-store keeps any cache, the browser's too, from keeping a copy (helper-61)."""
    await confirmed_user(client, admin, conn)
    signed_in = await sign_in(client, "ada@example.test")
    assert signed_in.status == 201 and (await signed_in.json())["token"].startswith("rfpk_")
    assert signed_in.headers["Cache-Control"] == "no-store"
    endpoint = await client.post("/api/v1/webhook_endpoints", headers=admin.headers, json={
        "webhook_endpoint": {"url": "https://hooks.example.com/rfp", "event_types": ["rfp.answered"]}})
    assert endpoint.status == 201, await endpoint.text()
    assert (await endpoint.json())["secret"] and endpoint.headers["Cache-Control"] == "no-store"
    listed = await client.get("/api/v1/webhook_endpoints", headers=admin.headers)
    assert "Cache-Control" not in listed.headers  # the rest as before
