"""The web app's lists (/rfps, /kb) under the search limits (service/domain/rfps.py): terms the
trigram index cannot serve and over-long terms are said beside the search box (the list's page,
400), pages past the count cap are a 400 page naming the rule; /rfps counts to 10,000
("10000+"), a knowledge-base search to 1,000."""

from __future__ import annotations

import html
import re

from aiohttp.test_utils import TestClient

# ruff: noqa: F811
from page_client import PASSWORD, aiohttp_client_cls, app_client, field, set_password  # noqa: F401


async def sign_in(client: TestClient, email: str) -> None:
    form = await client.get("/signin")
    response = await client.post("/signin", allow_redirects=False, data={
        "email": email, "password": PASSWORD, "sign_in_token": field(await form.text(), "sign_in_token"),
    })
    assert response.status == 303


SHORT = "Type at least 3 letters or digits in a row to search (“mfa”, “50% off”; not “%” or “a b”)."
LONG = ("The search term is too long: at most 200 characters (this one has {}). Search for a shorter"
        " part of it.")


def inline(text: str) -> str:
    """What the page says beside its search box about the term, or ""."""
    found = re.search(r'<p class="notice error" role="alert" id="search-problem">(.*?)</p>', text, re.S)
    return found.group(1) if found else ""


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
    assert status == 400 and "The page number must be at most 500: results stop at the first 10,000" in text
    # Before: a term too short or too long was the error page, naming the parameter (`q`).
    for term in ("%", "qz", "a b"):
        status, text = await page_text(app_client, "/rfps", q=term)
        assert status == 400 and inline(text) == SHORT, term
        assert f'value="{term}"' in text and "New RFP" in text  # the list's page, the term kept
    status, text = await page_text(app_client, "/rfps", q="rfp " + "x" * 7000)
    assert status == 400 and inline(text) == LONG.format("7,004")


async def test_kb_list__refuses_long_and_unindexable_terms_and_deep_pages(app_client, admin, conn):
    # Before: a 7,000-character term was ILIKE'd against every entry's question, answer and title
    # (0.6 s of CPU with 5,100 entries), and 'ab' or page 900 were served.
    await conn.execute(
        """INSERT INTO knowledge_items (id, account_id, question, answer, title)
           SELECT 'kb_bulk' || n, $1, 'Question ' || md5(n::text), 'Answer ' || md5((n * 3)::text),
                  NULL
             FROM generate_series(1, 2000) AS n""",
        admin.account_id,
    )
    await conn.execute(
        "UPDATE knowledge_items SET answer = 'Backups run nightly.' WHERE id = 'kb_bulk7'"
    )
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)

    status, text = await page_text(app_client, "/kb", q="NIGHTLY")
    assert status == 200 and "1 entry matching “NIGHTLY”" in text
    status, text = await page_text(app_client, "/kb", q="nightly " * 1000)
    assert status == 400 and inline(text) == LONG.format("8,000") and "Add an entry" in text
    status, text = await page_text(app_client, "/kb", q="ab")
    assert status == 400 and inline(text) == SHORT and "q must" not in text
    status, text = await page_text(app_client, "/kb", page="900")
    assert status == 400 and "The page number must be at most 500" in text


async def test_kb_search__counts_to_1000_and_pages_to_50(app_client, admin, conn):
    # Before: every match was counted (count(*) OVER (), 2,000 here) and page 60 was served.
    await conn.execute(
        """INSERT INTO knowledge_items (id, account_id, question, answer)
           SELECT 'kb_bulk' || n, $1, 'Question ' || n, 'Answer ' || n
             FROM generate_series(1, 2000) AS n""",
        admin.account_id,
    )
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    status, text = await page_text(app_client, "/kb", q="question")
    assert status == 200 and "1000+ entries matching “question”" in text and "Page 1 of 50" in text
    status, text = await page_text(app_client, "/kb", q="question", page="60")
    assert status == 400 and "The page number must be at most 50: results stop at the first 1,000" in text
    status, text = await page_text(app_client, "/kb", page="60")
    assert status == 200 and "2000 entries, newest first" in text
