"""POST /api/v1/invitations, reading and accepting an invitation link."""

from __future__ import annotations

import re
from typing import Any

import pytest

from service.domain import accounts

PASSWORD = "correct horse battery"


def invitation_token(message: Any) -> str:
    match = re.search(r"https://app\.example\.test/api/v1/invitations/([\w-]+)", message.get_content())
    assert match, message.get_content()
    return match.group(1)


async def invite(client: Any, admin: Any, email: str = "grace@example.test", role: str = "member") -> Any:
    return await client.post(
        "/api/v1/invitations", json={"invitation": {"email": email, "role": role}}, headers=admin.headers
    )


async def accept(client: Any, token: str, password: str = PASSWORD, **extra: Any) -> Any:
    return await client.post(
        f"/api/v1/invitations/{token}/accept",
        json={"password": password, "terms_of_service": "accepted", **extra},
    )


async def test_invitation__accepted_invitee_is_confirmed_member_who_can_sign_in(mail_client, admin, smtp):
    created = await invite(mail_client, admin, role="viewer")
    invitation = await created.json()
    assert created.status == 201, invitation
    assert invitation["id"].startswith("inv_")
    assert (invitation["email"], invitation["role"], invitation["state"]) == (
        "grace@example.test", "viewer", "pending",
    )
    assert invitation["expires_at"].endswith("Z") and invitation["created_at"].endswith("Z")

    [message] = await smtp.wait_for(1)
    token = invitation_token(message)
    shown = await (await mail_client.get(f"/api/v1/invitations/{token}")).json()
    assert shown["account_name"] == "Acme" and shown["email"] == "grace@example.test"

    accepted = await accept(mail_client, token, first_name="Grace", last_name="Hopper")
    member = await accepted.json()
    assert accepted.status == 201, member
    assert member["id"].startswith("mbr_")
    assert (member["name"], member["role"], member["owner"]) == ("Grace Hopper", "viewer", False)

    signed_in = await mail_client.post(
        "/api/v1/tokens", json={"email": "grace@example.test", "password": PASSWORD}
    )
    assert signed_in.status == 201
    assert (await signed_in.json())["account_id"] == admin.account_id


async def test_invitation__can_be_used_once(mail_client, admin, smtp):
    await invite(mail_client, admin)
    token = invitation_token((await smtp.wait_for(1))[0])
    assert (await accept(mail_client, token)).status == 201
    again = await accept(mail_client, token)
    assert again.status == 404
    assert "already been accepted" in (await again.json())["error"]["message"]


async def test_invitation__reinviting_replaces_the_old_link(mail_client, admin, smtp):
    first = await (await invite(mail_client, admin)).json()
    second = await (await invite(mail_client, admin, role="admin")).json()
    old, new = (invitation_token(m) for m in await smtp.wait_for(2))
    assert first["id"] != second["id"]
    assert (await accept(mail_client, old)).status == 404
    accepted = await accept(mail_client, new)
    assert accepted.status == 201
    assert (await accepted.json())["role"] == "admin"


async def test_invitation__expired_link_is_refused(mail_client, admin, smtp, conn):
    await invite(mail_client, admin)
    token = invitation_token((await smtp.wait_for(1))[0])
    await conn.execute("UPDATE invitations SET expires_at = now() - interval '1 second'")
    shown = await (await mail_client.get(f"/api/v1/invitations/{token}")).json()
    assert shown["state"] == "expired"
    response = await accept(mail_client, token)
    assert response.status == 404
    assert "expired" in (await response.json())["error"]["message"]


async def test_invitation__accept_validates_password_and_terms(mail_client, admin, smtp):
    await invite(mail_client, admin)
    token = invitation_token((await smtp.wait_for(1))[0])
    response = await mail_client.post(
        f"/api/v1/invitations/{token}/accept", json={"password": "short", "terms_of_service": "maybe"}
    )
    body = await response.json()
    assert response.status == 422
    assert len(body["error"]["details"]) == 2, body
    assert (await accept(mail_client, token)).status == 201  # the failed attempt did not use it


async def test_invitation__member_of_another_account_keeps_their_password(mail_client, make_account, smtp):
    first, second = await make_account(), await make_account(name="Other")
    await invite(mail_client, first)
    await accept(mail_client, invitation_token((await smtp.wait_for(1))[0]))
    await invite(mail_client, second)
    token = invitation_token((await smtp.wait_for(2))[1])
    wrong = await accept(mail_client, token, password="another password!")
    assert wrong.status == 422
    assert (await accept(mail_client, token)).status == 201
    signed_in = await mail_client.post(
        "/api/v1/tokens",
        json={"email": "grace@example.test", "password": PASSWORD, "account_id": second.account_id},
    )
    assert signed_in.status == 201


async def test_invitation__existing_member_is_422(client, admin, make_member):
    member = await make_member(admin.account_id)
    response = await invite(client, admin, email=member.email.upper())
    body = await response.json()
    assert response.status == 422
    assert body["error"]["details"] == ["invitation.email: is already a member of this account"]


async def test_invitation__member_address_said_beside_a_bad_role(client, admin, make_member, conn):
    member = await make_member(admin.account_id)
    response = await invite(client, admin, email=member.email.upper(), role="boss")
    details = (await response.json())["error"]["details"]
    assert response.status == 422
    assert details[0] == "invitation.email: is already a member of this account"
    assert [d.split(":")[0] for d in details[1:]] == ["invitation.role"], details
    # Not a member: the bad role alone.
    other = await invite(client, admin, email="nobody@example.test", role="boss")
    assert [d.split(":")[0] for d in (await other.json())["error"]["details"]] == ["invitation.role"]
    assert await conn.fetchval("SELECT count(*) FROM invitations") == 0


async def test_invitation__needs_admin_role_and_valid_fields(client, admin, make_member):
    viewer = await make_member(admin.account_id, role="viewer")
    forbidden = await invite(client, viewer)
    assert (forbidden.status, (await forbidden.json())["error"]["code"]) == (403, "forbidden")
    bad = await invite(client, admin, email="nope", role="boss")
    assert bad.status == 422
    assert len((await bad.json())["error"]["details"]) == 2


def test_access_log__redacts_link_tokens():
    from service.logs import redact_url

    assert redact_url("/api/v1/invitations/abc-_1/accept") == "/api/v1/invitations/[redacted]/accept"
    assert redact_url("/api/v1/users/confirmation?token=abc&x=1") == (
        "/api/v1/users/confirmation?token=[redacted]&x=1"
    )
    assert redact_url("/api/v1/rfps/rfp_1") == "/api/v1/rfps/rfp_1"
    # escapes are decoded as routing decodes them; decoded control characters stay escaped
    assert redact_url("/api/v1/invitation%73/abc") == "/api/v1/invitations/[redacted]"
    assert redact_url("/api/v1/users/confirmation?%74oken=abc") == (
        "/api/v1/users/confirmation?token=[redacted]"
    )
    assert redact_url("/api/v1/rfps/a%0Ab") == "/api/v1/rfps/a\\nb"


async def test_invitation__an_account_name_with_a_line_break_stays_on_one_line(
    mail_client, admin, smtp, conn
):
    """Accounts named before create_account refused control characters: the Subject could not be
    built (the message failed every attempt), and the body took lines of the name's own."""
    await conn.execute("UPDATE accounts SET name = $2 WHERE id = $1", admin.account_id,
                       "Acme\r\nBcc: someone@example.test\n\nClick http://elsewhere.test")
    assert (await invite(mail_client, admin)).status == 201
    [message] = await smtp.wait_for(1)
    one_line = "Acme Bcc: someone@example.test Click http://elsewhere.test"
    assert message["Subject"].strip() == f"You are invited to {one_line}"  # folded: one line
    assert message["Bcc"] is None
    assert f"join {one_line} on the" in message.get_content()


async def test_create_account__refuses_a_name_with_control_characters_or_too_long(conn):
    for name in ("Acme\nBcc: x@example.test", "Acme\x00", "A" * 201):
        with pytest.raises(accounts.OperatorError, match="at most 200 characters, without line breaks"):
            await accounts.create_account(conn, name, "boss@example.test")
    assert await conn.fetchval("SELECT count(*) FROM accounts") == 0
    made = await accounts.create_account(conn, "Acme — Müller & Söhne", "boss@example.test")
    assert made["account"]["name"] == "Acme — Müller & Söhne"
