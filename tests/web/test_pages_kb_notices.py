"""The knowledge base's forms say what they did, as the RFP and members pages' forms do: a walk
through the web app found that "Save" on an entry came back to the same page unchanged-looking,
"Add entry" to the new entry's page without a word, "Delete entry" to the list where the entry
was simply gone, and "Mark reviewed" to the care page where it had simply left the list."""

from __future__ import annotations

# ruff: noqa: F811
from page_client import (  # noqa: F401
    aiohttp_client_cls,
    app_client,
    set_password,
    sign_in,
)

NOTICE = '<p class="notice ok" role="status" id="kb-notice">'


async def test_kb_forms__each_comes_back_saying_what_it_did(app_client, admin, conn):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    added = await app_client.post("/kb", data={"csrf_token": csrf, "answer": "Nightly.", "title": "Backups"})
    assert added.status == 200 and f"{NOTICE}Entry added.</p>" in await added.text()
    kb_id = added.url.path.rsplit("/", 1)[1]
    assert "kb-notice" not in await (await app_client.get(f"/kb/{kb_id}")).text()  # a later visit: none

    saved = await app_client.post(f"/kb/{kb_id}", data={"csrf_token": csrf, "answer": "Hourly."})
    assert f"{NOTICE}Entry saved: the previous version is kept.</p>" in await saved.text()

    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 1 WHERE id = $1", kb_id)
    reviewed = await app_client.post(f"/kb/{kb_id}/reviewed", data={"csrf_token": csrf})
    assert reviewed.url.path == "/kb/care"
    assert f"{NOTICE}Marked reviewed: its next review is one review period from today.</p>" in (
        await reviewed.text())

    deleted = await app_client.post(f"/kb/{kb_id}/delete", data={"csrf_token": csrf})
    assert deleted.url.path == "/kb" and f"{NOTICE}Entry deleted.</p>" in await deleted.text()
    assert "kb-notice" not in await (await app_client.get("/kb?done=nonsense")).text()
