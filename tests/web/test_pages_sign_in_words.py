"""The sign-in page's refusals in words for a person at the form. A walk through the web app as
a member an admin had removed got "you are not a member of any account", and a user whose
password an administrator had chosen got "…: POST /api/v1/users/password/reset with your e-mail
address", an API route, beside a "Forgot your password?" link that does just that."""

from __future__ import annotations

from markupsafe import escape

# ruff: noqa: F811
from page_client import (  # noqa: F401
    PASSWORD,
    aiohttp_client_cls,
    app_client,
    field,
    set_password,
)


async def refusal(client, email: str) -> tuple[int, str]:
    form = await client.get("/signin")
    token = field(await form.text(), "sign_in_token")
    response = await client.post("/signin", allow_redirects=False, data={
        "email": email, "password": PASSWORD, "sign_in_token": token})
    return response.status, await response.text()


async def test_sign_in__a_removed_member_reads_who_can_let_them_in_again(
    app_client, admin, make_member, conn
):
    gone = await make_member(admin.account_id, role="member")
    await set_password(conn, gone.email)
    await conn.execute("DELETE FROM members WHERE id = $1", gone.member_id)
    status, page = await refusal(app_client, gone.email)
    assert status == 403
    assert str(escape("This address is not a member of any account (any more). An administrator of "
                      "your organisation can invite you again.")) in page
    assert "you are not a member of any account" not in page


async def test_sign_in__a_password_an_administrator_chose_leads_to_forgot_password_not_the_api(
    app_client, admin, conn
):
    await set_password(conn, admin.email)
    await conn.execute("UPDATE users SET password_chosen_by_user = false WHERE lower(email) = lower($1)",
                       admin.email)
    status, page = await refusal(app_client, admin.email)
    assert status == 403
    assert str(escape("This password was set by an administrator, not by you: choose your own with "
                      "“Forgot your password?” below, then sign in with it.")) in page
    assert "/api/v1/" not in page and 'href="/password/forgot"' in page
