"""What a page says while work goes on, read without the page's script (tests/web/test_pages.py
has the rest): the script follows the work live; without it nothing on the page moves, so the
page must not promise that it does, and must say how to see how far the work has got."""

from __future__ import annotations

import re

# ruff: noqa: F811
from page_client import (  # noqa: F401
    aiohttp_client_cls,
    app_client,
    set_password,
    sign_in,
)


async def held_question(conn, question_id: str, admin, text: str) -> None:
    """A question in state "new", leased for an hour to a pipeline that is not this test's: the
    service's own pipeline does not claim it, so its page shows it unfinished for the test."""
    await conn.execute(
        "INSERT INTO questions (id, account_id, user_id, question, state, lease_owner, lease_expires_at)"
        " VALUES ($1, $2, $3, $4, 'new', 'elsewhere', now() + interval '1 hour')",
        question_id, admin.account_id, admin.user_id, text,
    )


def without_script(html: str) -> str:
    """The page as a browser without the script shows it: <noscript> content included."""
    return re.sub(r"</?noscript>", "", html)


def with_script(html: str) -> str:
    return re.sub(r"<noscript>.*?</noscript>", "", html, flags=re.S)


async def test_question_page__unfinished_says_how_to_see_its_progress_without_the_script(
    app_client, admin, conn
):
    """A walk with the script off: /ask/{id} said "this page updates by itself" and stayed on
    "new" for good; only the script updates it."""
    await set_password(conn, admin.email)
    await held_question(conn, "q_slow", admin, "Do you encrypt backups?")
    await sign_in(app_client, admin.email)
    page = await (await app_client.get("/ask/q_slow")).text()
    assert "updates by itself" not in page
    assert 'href="/ask/q_slow">Reload this page</a> to see how far it has got.' in without_script(page)
    assert "Reload this page" not in with_script(page)  # the script shows the states live
    await conn.execute("UPDATE questions SET state = 'complete', answer = 'Yes.' WHERE id = 'q_slow'")
    done = await (await app_client.get("/ask/q_slow")).text()
    assert "Reload this page" not in done and "Working on it" not in done


async def test_rfp_page__answering_says_how_to_see_its_progress_without_the_script(
    app_client, admin, make_rfp, conn
):
    """"Answer all" without the script: the bar and "N items still being answered" stayed as
    first drawn, with nothing saying that a reload shows more."""
    await set_password(conn, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await held_question(conn, "q_busy", admin, "Backups?")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, question_id) VALUES"
        " ('item_b1', $1, 'Backups?', 1, 'pending', 'q_busy'), ('item_b2', $1, 'MFA?', 2, 'pending', NULL)",
        rfp_id)
    await sign_in(app_client, admin.email)
    page = await (await app_client.get(f"/rfps/{rfp_id}?answering=1")).text()
    assert "1 item still being answered" in page
    shown = without_script(page)
    assert '(<a id="progress-reload" href="">reload this page</a> to see how far it has got)' in shown
    assert "progress-reload" not in with_script(page)
    await conn.execute("UPDATE rfp_items SET question_id = NULL, state = 'needs_input' WHERE id = 'item_b1'")
    idle = await (await app_client.get(f"/rfps/{rfp_id}")).text()
    assert 'id="progress" ' in idle and "progress-reload" in idle  # drawn, but the box is hidden
    assert re.search(r'<div id="progress"[^>]* hidden>', idle)
