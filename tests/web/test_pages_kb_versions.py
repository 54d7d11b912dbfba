"""An entry's page shows its earlier versions: saving said "the previous version is kept", and
the web app gave no way to see it (only the API's versions list did)."""

from __future__ import annotations

import re

# ruff: noqa: F811
from page_client import (  # noqa: F401
    aiohttp_client_cls,
    app_client,
    set_password,
    sign_in,
)

from service.web.pages.knowledge import VERSIONS_SHOWN


async def test_kb_entry__shows_its_earlier_versions_newest_first_with_who_wrote_them(app_client, admin, conn):
    await set_password(conn, admin.email)
    await conn.execute("UPDATE users SET first_name = 'Ada', last_name = 'Lovelace' WHERE email = $1",
                       admin.email)
    csrf = await sign_in(app_client, admin.email)
    added = await app_client.post("/kb", data={"csrf_token": csrf, "answer": "Nightly.", "title": "Backups"})
    kb_id = added.url.path.rsplit("/", 1)[1]
    assert "None: this is the entry as first written." in await added.text()

    await app_client.post(f"/kb/{kb_id}", data={"csrf_token": csrf, "answer": "Hourly.", "title": "Backups"})
    page = await (await app_client.post(
        f"/kb/{kb_id}", data={"csrf_token": csrf, "answer": "Every minute.", "title": "Backups"})).text()
    versions = page[page.index('id="versions"'):]
    summaries = re.findall(r"<summary>Version (\d+), written [^<]* by Ada Lovelace; replaced [^<]* by "
                           r"Ada Lovelace</summary>", versions)
    assert summaries == ["2", "1"]
    assert versions.index("Hourly.") < versions.index("Nightly.") and "Every minute." not in versions


async def test_kb_entry__shows_the_most_recent_earlier_versions_and_says_how_many_in_all(
    app_client, admin, conn
):
    await set_password(conn, admin.email)
    csrf = await sign_in(app_client, admin.email)
    added = await app_client.post("/kb", data={"csrf_token": csrf, "answer": "v1"})
    kb_id = added.url.path.rsplit("/", 1)[1]
    for n in range(2, VERSIONS_SHOWN + 4):
        await app_client.post(f"/kb/{kb_id}", data={"csrf_token": csrf, "answer": f"v{n}"})
    page = await (await app_client.get(f"/kb/{kb_id}")).text()
    assert f"The {VERSIONS_SHOWN} most recent of {VERSIONS_SHOWN + 2}." in page
    assert len(re.findall(r"<summary>Version \d+", page)) == VERSIONS_SHOWN
