"""The default embeddings backend: all-MiniLM-L6-v2 (int8) on onnxruntime, run for real.

The reference (minilm_reference.json) was recorded once with sentence-transformers on torch and
the `tokenizers` package (neither is a dependency): token ids must match exactly, and vectors to a
cosine of at least 0.99.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import asyncpg
import pytest

from service.answering.embeddings import Indexer, make_embedder
from service.answering.minilm_integer import integer_kernels
from service.answering.minilm_onnx import MODEL, MODEL_INTEGER, OnnxEmbedder, WordPiece, model_file
from service.answering.retrieval import find_references
from service.config import Config, EmbeddingsConfig
from service.domain.knowledge import import_csv

REFERENCE = json.loads((Path(__file__).with_name("minilm_reference.json")).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder()  # the session loads once for the module's tests


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_wordpiece__token_ids_match_the_models_tokenizer():
    tokeniser = WordPiece()
    for case in REFERENCE["texts"]:
        assert tokeniser.encode(case["text"]) == case["token_ids"], case["text"]


def test_wordpiece__long_text_keeps_256_tokens_and_long_words_are_unknown():
    tokeniser = WordPiece()
    ids = tokeniser.encode("encryption " * 400)
    assert len(ids) == 256 and ids[0] == tokeniser.cls and ids[-1] == tokeniser.sep
    assert tokeniser.encode("x" * 101) == [tokeniser.cls, tokeniser.unk, tokeniser.sep]


async def test_onnx__vectors_agree_with_the_reference_model(embedder):
    vectors = await embedder.embed([case["text"] for case in REFERENCE["texts"]])
    for case, vector in zip(REFERENCE["texts"], vectors, strict=True):
        assert len(vector) == 384 and math.isclose(cosine(vector, vector), 1.0, abs_tol=1e-4)
        assert cosine(vector, case["vector"]) >= 0.99, case["text"]


async def test_onnx__order_kept_whatever_the_lengths(embedder):
    texts = [case["text"] for case in REFERENCE["texts"]] * 3  # 18: two calls, sorted by length
    together = await embedder.embed(texts)
    alone = [(await embedder.embed([text]))[0] for text in texts[:6]]
    for a, b in zip(together, alone * 3, strict=True):
        assert cosine(a, b) > 0.999


def test_onnx__calls_stay_within_the_token_budget():
    # Big calls made onnxruntime's peak memory jump by ~200 MB: long texts go a few at a time.
    from service.answering.minilm_onnx import CHUNK_TOKENS

    ids = [[1] * n for n in (256, 12, 256, 40, 256, 256, 9, 300, 255)]
    calls = OnnxEmbedder.chunks(ids)
    assert sorted(i for call in calls for i in call) == list(range(len(ids)))
    for call in calls:
        assert len(call) == 1 or len(call) * max(len(ids[i]) for i in call) <= CHUNK_TOKENS
    assert [6, 1, 3] in calls  # the short ones together


async def test_onnx__questions_asked_together_share_calls(embedder):
    texts = [case["text"] for case in REFERENCE["texts"]]
    alone = [(await embedder.embed([text]))[0] for text in texts]
    before = embedder.calls
    together = await asyncio.gather(*(embedder.embed([text]) for text in texts * 2))
    assert embedder.calls - before < len(texts) * 2  # batched while the model was busy
    for a, [b] in zip(alone * 2, together, strict=True):
        assert cosine(a, b) > 0.999  # padding changes nothing


async def test_onnx__a_question_whose_asker_left_does_not_stop_the_others(embedder):
    first = asyncio.ensure_future(embedder.embed(["How often are backups taken?"]))
    gone = asyncio.ensure_future(embedder.embed(["Who can read the audit logs?"]))
    last = asyncio.ensure_future(embedder.embed(["Is data encrypted at rest?"]))
    await asyncio.sleep(0)
    gone.cancel()
    [a], [b] = await asyncio.gather(first, last)
    assert len(a) == len(b) == 384 and gone.cancelled()


async def test_onnx__meaning(embedder):
    question, paraphrase, unrelated = await embedder.embed([
        "How do you protect company laptops from malware?",
        "Every workstation runs managed anti-virus software.",
        "Invoices are payable within thirty days.",
    ])
    assert cosine(question, paraphrase) > cosine(question, unrelated) + 0.1


async def test_onnx__encoding_never_blocks_the_event_loop(embedder):
    await embedder.embed(["warm"])
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await embedder.embed(["Backups are encrypted and kept for thirty days in two regions. " * 20] * 32)
    took = time.perf_counter() - started
    stop.set()
    await ticker
    # The loop kept turning while the model ran in its thread (generous bound: a shared machine).
    assert took > 0.2 and max(gaps) < max(0.25, took / 3), (took, max(gaps))


def test_default_backend_is_onnx():
    assert Config().embeddings.backend == "onnx"
    assert Config().embeddings.onnx_kernels == "integer"
    assert make_embedder(Config().embeddings, None).model == MODEL_INTEGER


# -- integer kernels (embeddings.onnx_kernels = "integer", service/answering/minilm_integer.py) ---


def test_integer_kernels__every_int8_matrix_product_is_rewritten():
    raw = model_file().read_bytes()
    rewritten = integer_kernels(raw)
    # 6 layers x (query, key, value, attention output, two feed-forward): 36 products.
    assert rewritten.count(b"MatMulInteger") == 36 and raw.count(b"MatMulInteger") == 0
    assert rewritten.count(b"DynamicQuantizeLinear") == 36
    with pytest.raises(ValueError, match="one graph"):
        integer_kernels(b"")


async def test_integer_kernels__vectors_agree_with_the_reference_model():
    embedder = make_embedder(EmbeddingsConfig(onnx_kernels="integer"), None)
    assert embedder.model == MODEL_INTEGER != MODEL  # its vectors are stored apart
    try:
        vectors = await embedder.embed([case["text"] for case in REFERENCE["texts"]])
        for case, vector in zip(REFERENCE["texts"], vectors, strict=True):
            assert cosine(vector, case["vector"]) >= 0.99, case["text"]
        # One text a call: a vector never depends on the texts embedded with it (activations are
        # quantised with one scale per call; shared calls gave cosines of ~0.99 to itself).
        asked_together = await asyncio.gather(*(embedder.embed([c["text"]]) for c in REFERENCE["texts"]))
        for vector, [again] in zip(vectors, asked_together, strict=True):
            assert cosine(vector, again) > 0.99999
    finally:
        embedder.close()


@pytest.mark.pgvector
async def test_onnx__indexer_and_fused_retrieval_find_a_paraphrase(embedder, conn, database_url, admin):
    await import_csv(conn, admin.account_id, (
        "id,question,answer\n"
        "END-1,How are workstations secured?,Every endpoint runs managed anti-malware.\n"
        "PAY-1,What are your payment terms?,Invoices are payable within thirty days.\n"
        "HR-1,Is there security awareness training?,Yearly training for all staff.\n"
    ))
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        assert await Indexer(pool, embedder, EmbeddingsConfig()).catch_up() == 3
        assert await conn.fetchval(
            "SELECT count(*) FROM knowledge_embeddings WHERE model = $1 AND dimensions = 384", MODEL
        ) == 3
    finally:
        await pool.close()
    found = await find_references(conn, admin.account_id, "Do company laptops have virus protection?",
                                  embedder=embedder)
    assert found[0].external_id == "END-1" and found[0].dense > 0.3


@pytest.mark.pgvector
async def test_app__default_backend_embeds_entries_and_questions(aiohttp_client, config, conn, admin):
    """The service as configured by default: written entries are embedded in the background, and
    a question sharing no word with its answer finds it through the fused ranking."""
    from service.web.app import create_app
    from tests.conftest import with_config
    from tests.helpers_questions import ask, wait_complete

    client = await aiohttp_client(create_app(with_config(config, embeddings={"backend": "onnx"})))
    for question, answer in [
        ("How are workstations secured?", "Every endpoint runs managed anti-malware."),
        ("What are your payment terms?", "Invoices are payable within thirty days."),
    ]:
        response = await client.post("/api/v1/knowledge_base_items", headers=admin.headers, json={
            "knowledge_base_item": {"question": question, "answer": answer}})
        assert response.status == 201
    for _ in range(600):  # the indexer was woken by the writes; the model loads first (~1 s)
        if await conn.fetchval(
            "SELECT count(*) FROM knowledge_embeddings WHERE model = $1", MODEL_INTEGER
        ) == 2:
            break
        await asyncio.sleep(0.1)
    response = await ask(client, admin.headers, "Do company laptops have virus protection?")
    assert response.status == 202, await response.text()
    question_id = (await response.json())["id"]
    await wait_complete(client, question_id, admin.headers, seconds=30)
    # The references as retrieved (the response shows them only when the decision says covered).
    stored = json.loads(await conn.fetchval('SELECT "references" FROM questions WHERE id = $1', question_id))
    assert stored[0]["question"] == "How are workstations secured?" and stored[0]["dense"] > 0.3


async def test_app__default_backend_without_pgvector_warns_once_and_answers_lexically(
    aiohttp_client, config, conn, admin, caplog
):
    # As on a server without the extension (Debian's postgresql): migration 0011 left no table.
    from tests.helpers_questions import answers_lexically_warning_once

    await answers_lexically_warning_once(aiohttp_client, config, conn, admin, caplog,
                                         {"backend": "onnx"}, asks=2)
