"""The web app's import reports, kept for their page: the POST of an upload form imports, keeps
its report in the import's transaction and answers 303 to the report's page, so that a browser's
reload of the report reads it again (it sent the upload again, importing the file a second time,
when the report was the POST's own response). A report is read only within its account, and
housekeeping deletes it KEEP_DAYS old (migration 0045)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from .. import db
from .errors import NotFound
from .ids import could_be_id, new_id

# A report is read right after its import; a week lets a tab left open over a weekend reload it.
KEEP_DAYS = 7


async def keep(conn: asyncpg.Connection, account_id: str, member_id: str | None, report: dict[str, Any],
               *, rfp_id: str | None = None) -> str:
    """Keep an import's `report` (into RFP `rfp_id`; None: into the knowledge base): its id."""
    report_id = new_id("imp")
    await conn.execute(db.query("insert_import_report"), report_id, account_id, member_id, rfp_id,
                       json.dumps(report))
    return report_id


async def fetch(conn: asyncpg.Connection, account_id: str, report_id: str,
                *, rfp_id: str | None = None) -> dict[str, Any]:
    """The report `report_id` of the account (of RFP `rfp_id`; None: a knowledge base import's).
    Another account's, an unknown, a deleted and a malformed id are the same NotFound."""
    text = None
    if could_be_id(report_id):  # (PostgreSQL text holds no NUL: looking one up would be a 500)
        text = await conn.fetchval(db.query("get_import_report"), report_id, account_id, rfp_id)
    if text is None:
        raise NotFound(f"no import report {report_id[:100]} in this account")
    return json.loads(text)
