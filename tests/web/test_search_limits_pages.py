"""The web app's RFP list (/rfps) under the search limits (service/domain/rfps.py): terms the
trigram index cannot serve, over-long terms and pages past 10,000 rows are a 400 page naming the
rule, and the count stops at 10,000 ("10000+")."""

from __future__ import annotations

import html

from aiohttp.test_utils import TestClient

# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password  # noqa: F401


async def sign_in(client: TestClient, email: str) -> None:
    form = await client.get("/signin")
    response = await client.post("/signin", allow_redirects=False, data={
        "email": email, "password": PASSWORD, "sign_in_token": field(await form.text(), "sign_in_token"),
    })
    assert response.status == 303


async def page_text(client: TestClient, path: str, **params: str) -> tuple[int, str]:
    response = await client.get(path, params=params)
    return response.status, html.unescape(await response.text())


async def test_rfp_list__counts_to_10000_and_refuses_deeper_pages_and_unindexable_terms(
    app_client, admin, conn
):
    # Before: the list counted all 50,000 RFPs on every page and served page 2,500 (OFFSET
    # 49,980); '%' was 200 after reading every RFP.
    await conn.execute(
        """INSERT INTO rfps (id, account_id, owner_id, title, created_at)
           SELECT 'rfp_bulk' || n, $1, $2, 'RFP ' || md5(n::text), now() - n * interval '1 second'
             FROM generate_series(1, 50000) AS n""",
        admin.account_id, admin.user_id,
    )
    await conn.execute("VACUUM ANALYZE rfps")
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)

    status, text = await page_text(app_client, "/rfps")
    assert status == 200 and "10000+ RFPs, newest first" in text
    status, text = await page_text(app_client, "/rfps", page="500")
    assert status == 200 and "Page 500 of 500" in text
    status, text = await page_text(app_client, "/rfps", page="2500")
    assert status == 400 and "page must be at most 500: results stop at the first 10,000" in text
    for term in ("%", "qz", "a b"):
        status, text = await page_text(app_client, "/rfps", q=term)
        assert status == 400 and "q must hold at least 3 letters or digits in a row" in text, term
    status, text = await page_text(app_client, "/rfps", q="rfp " + "x" * 7000)
    assert status == 400 and "q is too long: at most 200 characters; got 7,004" in text

