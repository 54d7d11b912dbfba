"""The web app's pages within a member's share of the pool (tests/web/test_hold_limits.py for
the API's requests)."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient
from conftest import with_config
from page_client import PASSWORD, aiohttp_client_cls, field, set_password  # noqa: F401
from test_hold_limits import WAITING_ON_RFPS, until

from service.web.app import create_app
from service.web.keys import SHARES


async def sign_in(client: TestClient, email: str) -> None:
    form = await client.get("/signin")
    response = await client.post("/signin", allow_redirects=False, data={
        "email": email, "password": PASSWORD, "sign_in_token": field(await form.text(), "sign_in_token"),
    })
    assert response.status == 303


async def test_pool__a_members_pages_keep_to_the_same_share(
    config, conn, admin, make_account, make_member, make_rfp, aiohttp_client
):
    """The web app's pages hold a pooled connection from the session lookup to the response:
    a signed-in viewer's parallel page loads keep to the member's share as the API's do."""
    app = create_app(with_config(config, database={
        "pool_min_size": 1, "pool_max_size": 4, "acquire_timeout_seconds": 3.0,
        "max_connections_per_member": 2,
    }, server={"web_base_url": "http://localhost"}))
    client = await aiohttp_client(app)
    other = await make_account("Other")
    rfp_id = await make_rfp(admin, "Held")
    await set_password(conn, admin.email)
    await sign_in(client, admin.email)
    async with conn.transaction():
        await conn.execute("LOCK TABLE rfps IN ACCESS EXCLUSIVE MODE")
        flood = [asyncio.create_task(client.get(f"/rfps/{rfp_id}")) for _ in range(8)]
        await until(conn, WAITING_ON_RFPS, 2)
        await asyncio.sleep(0)
        response = await client.get("/api/v1/members", headers=other.headers)
        assert response.status == 200
        assert await conn.fetchval(WAITING_ON_RFPS) == 2
        assert app[SHARES].held == {admin.member_id: 2}
    statuses = [response.status for response in await asyncio.gather(*flood)]
    assert set(statuses) <= {200, 429}, statuses
    assert app[SHARES].held == {}


async def test_body__a_signed_in_pages_form_may_pass_max_public_body_bytes(
    config, conn, admin, aiohttp_client
):
    """Pages are public to the front door, which holds an anonymous body to
    max_public_body_bytes; a page whose session is found takes max_body_bytes again."""
    client = await aiohttp_client(create_app(with_config(config, server={
        "web_base_url": "http://localhost", "max_public_body_bytes": 4_096,
    })))
    form = await client.get("/signin")
    token = field(await form.text(), "sign_in_token")
    too_large = await client.post("/signin", allow_redirects=False, data={
        "email": admin.email, "password": "x" * 5_000, "sign_in_token": token})
    assert too_large.status == 413
    await set_password(conn, admin.email)
    await sign_in(client, admin.email)
    csrf = field(await (await client.get("/kb")).text(), "csrf_token")
    added = await client.post("/kb", allow_redirects=False, data={
        "csrf_token": csrf, "answer": "Backups run nightly. " * 500, "title": "Backups"})
    assert added.status == 303
