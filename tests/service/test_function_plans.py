"""The statements inside sql/functions/ (retrieval, the knowledge base's triggers, the rate limit,
the webhooks' filter) reach their rows through an index, as test_query_plans checks for
sql/queries: EXPLAIN cannot see inside a function, so they are planned as they run, by
auto_explain with nested statements, while the service's own operations call them."""

from __future__ import annotations

import json

import asyncpg
import pytest

from service import db
from service.answering.retrieval import find_references
from service.domain.knowledge import import_csv
from service.domain.questions import create_question
from tests.helpers_plans import explained, seq_scans

KB = (
    "id,question,answer\n"
    'BAK-1,How often are backups taken?,"Nightly copies kept for 30 days."\n'
    'ENC-1,Is customer data encrypted at rest?,"Yes, with AES-256, and MFA guards the keys."\n'
)
# Statements that read a whole table on purpose, by a part of their text, each with why.
WHOLE_TABLE = {
    "NEW.review_by := coalesce(NEW.review_by": "library_settings holds one row (the versioning trigger)",
}
# A part of a statement of each function that reads or writes a table: each must be planned, so
# that the operations below keep reaching every one.
REACHED = {
    "knowledge_retrieve": "FROM knowledge_vocabulary m",
    "knowledge_retrieve (candidates)": "WITH cand AS MATERIALIZED",
    "knowledge_retrieve_nearest": "FROM knowledge_embeddings e",
    "knowledge_item_versioning": "INSERT INTO knowledge_item_versions",
    "knowledge_terms_after_change": "INSERT INTO knowledge_terms",
    "knowledge_embedding_enqueue": "INSERT INTO knowledge_embedding_queue",
    "take_rate_limit_token": "rate_limit_buckets",
    "webhook_wanted": "FROM webhook_endpoints",
}


class _FixedEmbedder:
    """One vector for every text: the plans, not the ranking, are what this test reads."""

    model = "plans-embed"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 383 for _ in texts]


async def test_functions__read_their_tables_through_an_index(conn, admin):
    dense = await db.pgvector_available(conn)
    try:
        async with explained(conn, "auto_explain.log_format = json",
                             "enable_seqscan = off") as logged:  # a seq scan only without an index
            await import_csv(conn, admin.account_id, KB)
            await conn.execute(
                "UPDATE knowledge_items SET answer = answer || ' Tested.' WHERE account_id = $1",
                admin.account_id)
            await find_references(conn, admin.account_id, "Do you enforce MFA on backups?")
            if dense:
                await find_references(conn, admin.account_id, "Do you enforce MFA?",
                                      embedder=_FixedEmbedder())
            await conn.fetchrow("SELECT * FROM take_rate_limit_token('plans', 5, 1)")
            await conn.fetchval("SELECT webhook_wanted($1, 'rfp.created')", admin.account_id)
            await create_question(conn, account_id=admin.account_id, user_id=admin.user_id,
                                  text="Backups?")
            await conn.execute("DELETE FROM knowledge_items WHERE account_id = $1", admin.account_id)
    except asyncpg.InsufficientPrivilegeError:
        pytest.skip("auto_explain needs a superuser here")
    plans = [json.loads(message.split("plan:", 1)[1]) for message in logged if "plan:" in message]
    texts = [plan["Query Text"] for plan in plans]
    missed = {name for name, part in REACHED.items() if not any(part in text for text in texts)}
    assert missed == ({"knowledge_retrieve_nearest"} if not dense else set())
    scanning = {text.strip()[:120]: sorted(tables) for plan, text in zip(plans, texts, strict=True)
                if (tables := seq_scans(plan["Plan"]))
                and not any(part in text for part in WHOLE_TABLE)}
    assert scanning == {}
