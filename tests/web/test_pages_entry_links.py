"""Attention points that name a knowledge-base entry by its id ("… the nearest entry is “MFA
policy” (kb_…)", "Drawn from knowledge-base entry kb_…, which is past its review date") link it,
on the RFP page and the ask page: the id alone told a reviewer nothing they could open."""

from __future__ import annotations

# ruff: noqa: F811
from page_client import (  # noqa: F401
    aiohttp_client_cls,
    app_client,
    set_password,
    sign_in,
)

ENTRY = "kb_UZ5KmsrZNd6haiOXkRotLt"
POINT = f"The nearest entry is “MFA <b>policy</b>” ({ENTRY}); not kb_short, nor x{ENTRY}."
LINKED = (f"The nearest entry is “MFA &lt;b&gt;policy&lt;/b&gt;” (<a href=\"/kb/{ENTRY}\">{ENTRY}</a>);"
          f" not kb_short, nor x{ENTRY}.")


async def test_attention_points__link_the_entries_they_name_and_stay_escaped(
    app_client, admin, make_rfp, conn
):
    await set_password(conn, admin.email)
    await sign_in(app_client, admin.email)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute(
        "INSERT INTO questions (id, account_id, user_id, question, state, answer, confidence,"
        " attention_points) VALUES ('q_mfa', $1, $2, 'Do you enforce MFA?', 'complete', 'Yes.', 0.4, $3)",
        admin.account_id, admin.user_id, [POINT],
    )
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, confidence, question_id)"
        " VALUES ('item_mfa', $1, 'Do you enforce MFA?', 1, 'needs_input', 'Yes.', 0.4, 'q_mfa')",
        rfp_id,
    )
    for path in (f"/rfps/{rfp_id}", "/ask/q_mfa"):
        page = await (await app_client.get(path)).text()
        assert f"<li>{LINKED}</li>" in page, path
