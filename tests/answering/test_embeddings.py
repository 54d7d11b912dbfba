"""Dense retrieval through the OpenAI-compatible embeddings backend, against a local fake server.

The fake embeds by meaning groups (a word list per dimension), so a paraphrase that shares no
word with an entry still lands next to it, as a real model's vectors would.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from service import config as config_module
from service.answering import embeddings
from service.answering.embeddings import EmbeddingFailure, Indexer, OpenAIEmbedder
from service.answering.retrieval import find_references
from service.config import EmbeddingsConfig
from service.domain.knowledge import import_csv
from tests.conftest import CONNECT
from tests.helpers_plans import explained

GROUPS = [
    {"laptop", "laptops", "workstation", "workstations", "endpoint", "endpoints", "device", "devices"},
    {"encrypt", "encrypted", "encryption", "cipher", "ciphers"},
    {"backup", "backups", "restore", "copies", "copy"},
    {"train", "training", "awareness", "education", "staff"},
]


def fake_vector(text: str, dimensions: int = len(GROUPS) + 1) -> list[float]:
    words = re.findall(r"[a-z]+", text.lower())
    vector = [float(sum(w in group for w in words)) for group in GROUPS]
    vector += [0.1] * (dimensions - len(vector))
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


class FakeServer:
    """POST /v1/embeddings as OpenAI answers it (data in shuffled order, with indexes)."""

    def __init__(self, dimensions: int = len(GROUPS) + 1) -> None:
        self.dimensions = dimensions
        self.requests: list[dict[str, Any]] = []
        self.failures: list[int] = []  # statuses to answer with before succeeding
        self.received = asyncio.Event()
        # A model's input limit: a request holding a longer text is refused whole (HTTP 400), as
        # OpenAI refuses one past the model's context length.
        self.longest: int | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"body": body, "authorization": request.headers.get("Authorization")})
        self.received.set()
        if self.failures:
            return web.json_response({"error": {"message": "try later"}}, status=self.failures.pop(0))
        if self.longest is not None and any(len(t) > self.longest for t in body["input"]):
            return web.json_response({"error": {"message": "maximum context length exceeded"}}, status=400)
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, self.dimensions)}
                for i, t in enumerate(body["input"])]
        return web.json_response({"object": "list", "model": body["model"], "data": data[::-1],
                                  "usage": {"prompt_tokens": 1, "total_tokens": 1}})


@pytest.fixture
async def fake(aiohttp_server: Any) -> tuple[FakeServer, str]:
    server = FakeServer()
    app = web.Application()
    app.router.add_post("/v1/embeddings", server.handle)
    running = await aiohttp_server(app)
    return server, str(running.make_url("/v1"))


@pytest.fixture
async def session() -> Any:
    async with aiohttp.ClientSession() as s:
        yield s


def settings(base_url: str, **extra: Any) -> EmbeddingsConfig:
    return config_module.structure({"embeddings": {
        "backend": "openai", "base_url": base_url, "model": "fake-embed", "backoff_seconds": 0.0,
        "batch_size": 2, **extra,
    }}).embeddings


KB = (
    "id,question,answer\n"
    "END-1,How are workstations secured?,Every endpoint runs managed anti-malware.\n"
    "ENC-1,Is data encrypted at rest?,AES-256 encryption on every volume.\n"
    "BAK-1,How often are backups taken?,Nightly copies kept for 30 days.\n"
    "HR-1,Is there security awareness training?,Yearly training for all staff.\n"
)


async def test_openai_embedder__speaks_the_protocol(fake, session, monkeypatch):
    server, url = fake
    monkeypatch.setenv("FAKE_EMBED_KEY", "sk-test")
    embedder = OpenAIEmbedder(settings(url, api_key_env="FAKE_EMBED_KEY"), session)

    vectors = await embedder.embed(["laptop", "backup copies"])

    assert vectors == [fake_vector("laptop"), fake_vector("backup copies")]  # in input order
    assert server.requests[0]["body"]["model"] == "fake-embed"
    assert server.requests[0]["body"]["input"] == ["laptop", "backup copies"]
    assert server.requests[0]["authorization"] == "Bearer sk-test"


async def test_openai_embedder__retries_server_errors_then_gives_up(fake, session):
    server, url = fake
    embedder = OpenAIEmbedder(settings(url, max_attempts=3), session)
    server.failures = [503, 429]
    assert await embedder.embed(["laptop"]) == [fake_vector("laptop")]
    server.failures = [500, 500, 500]
    with pytest.raises(EmbeddingFailure, match="3 attempts"):
        await embedder.embed(["laptop"])
    server.failures = [400]
    with pytest.raises(EmbeddingFailure, match="HTTP 400"):
        await embedder.embed(["laptop"])


@pytest.mark.pgvector
async def test_indexer__embeds_new_and_changed_entries_only(fake, session, conn, database_url, admin):
    server, url = fake
    await import_csv(conn, admin.account_id, KB)
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    try:
        indexer = Indexer(pool, OpenAIEmbedder(settings(url), session), settings(url))
        assert await indexer.catch_up() == 4
        assert len(server.requests) == 2  # batches of 2
        assert await indexer.catch_up() == 0  # nothing changed: nothing sent
        assert len(server.requests) == 2
        # Re-importing an entry with a new answer embeds it again; unchanged ones are left alone.
        await import_csv(conn, admin.account_id, "id,question,answer\nBAK-1,Backups?,Hourly copies.\n"
                                                 "ENC-1,Is data encrypted at rest?,"
                                                 "AES-256 encryption on every volume.\n")
        assert await indexer.catch_up() == 1
        assert server.requests[-1]["body"]["input"] == ["Backups?\nHourly copies."]
    finally:
        await pool.close()
    stored = await conn.fetch("SELECT model, dimensions, account_id FROM knowledge_embeddings")
    assert {(r["model"], r["dimensions"], r["account_id"]) for r in stored} == {
        ("fake-embed", 5, admin.account_id)}
    # A dimension the migration has no HNSW index for gets one.
    assert await conn.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE indexname = 'knowledge_embeddings_hnsw_5'") == 1


@pytest.mark.pgvector
async def test_indexer__two_processes_never_embed_the_same_entry(fake, session, conn, database_url, admin):
    server, url = fake
    await import_csv(conn, admin.account_id, KB)
    pools = [await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2) for _ in range(2)]
    try:
        # Another process holds a live claim on BAK-1; one that died left a lapsed claim on HR-1.
        await conn.execute(
            "INSERT INTO knowledge_embedding_claims (item_id, model, claimed_until) "
            "SELECT id, 'fake-embed', now() + CASE external_id WHEN 'BAK-1' THEN interval '1 hour' "
            "ELSE interval '-1 second' END FROM knowledge_items WHERE external_id IN ('BAK-1', 'HR-1')")
        indexers = [Indexer(pool, OpenAIEmbedder(settings(url), session), settings(url))
                    for pool in pools]
        stored = await asyncio.gather(*(indexer.catch_up() for indexer in indexers))
        sent = [text for request in server.requests for text in request["body"]["input"]]
        assert sum(stored) == 3 and len(sent) == 3 == len(set(sent))
        assert not any(text.startswith("How often are backups") for text in sent)
        assert await conn.fetchval("SELECT count(*) FROM knowledge_embedding_claims") == 1  # BAK-1's
        await conn.execute("UPDATE knowledge_embedding_claims SET claimed_until = now() - interval '1 s'")
        assert await indexers[0].catch_up() == 1  # a lapsed claim is taken up
        assert await conn.fetchval("SELECT count(*) FROM knowledge_embedding_claims") == 0
    finally:
        for pool in pools:
            await pool.close()


@pytest.mark.pgvector
async def test_hnsw_index__processes_meeting_a_new_dimension_at_once_both_succeed(conn, database_url):
    # CREATE INDEX IF NOT EXISTS is not safe against itself: two at once can end in a unique
    # violation in pg_class. Indexers in two processes meet a new model's dimension together.
    conns = [await asyncpg.connect(database_url, **CONNECT) for _ in range(2)]
    try:
        for dimensions in range(3, 23):
            await asyncio.gather(*(c.execute(embeddings.query_sql("embeddings_hnsw_index", dimensions))
                                   for c in conns))
        names = {f"knowledge_embeddings_hnsw_{d}" for d in range(3, 23)}
        assert await conn.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE indexname = ANY($1::text[])", sorted(names)) == 20
    finally:
        for c in conns:
            await c.close()


@pytest.mark.pgvector
async def test_indexer__a_failed_batch_is_released_at_once(fake, session, conn, database_url, admin):
    server, url = fake
    await import_csv(conn, admin.account_id, KB)
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    try:
        indexer = Indexer(pool, OpenAIEmbedder(settings(url, max_attempts=1), session), settings(url))
        server.failures = [503]
        with pytest.raises(EmbeddingFailure):
            await indexer.step()
        assert await conn.fetchval("SELECT count(*) FROM knowledge_embedding_claims") == 0
        assert await indexer.catch_up() == 4
    finally:
        await pool.close()


QUEUED = "SELECT count(*) FROM knowledge_embedding_queue"


@pytest.mark.pgvector
async def test_indexer__a_round_reads_the_queue_of_written_entries_and_every_entry_when_asked(
    fake, session, conn, database_url, admin
):
    """Each round looked at every entry of every account (450-560 ms at 100,000 entries, all
    embedded). Writes to an entry's text queue it (migration 0042); a round reads the queue, and
    every entry only when asked (a start, and EVERY_ENTRY_SECONDS apart)."""
    server, url = fake
    await import_csv(conn, admin.account_id, KB)
    assert await conn.fetchval(QUEUED) == 4
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    try:
        indexer = Indexer(pool, OpenAIEmbedder(settings(url), session), settings(url))
        assert await indexer.catch_up(every_entry=False) == 4
        assert await conn.fetchval(QUEUED) == 0
        # Not the text: nothing queued, nothing embedded.
        await conn.execute("UPDATE knowledge_items SET review_by = review_by + 1, tags = '{x}'")
        assert await conn.fetchval(QUEUED) == 0
        await conn.execute(
            "UPDATE knowledge_items SET answer = answer || ' Tested.' WHERE external_id = 'BAK-1'")
        assert await conn.fetchval(QUEUED) == 1
        assert await indexer.catch_up(every_entry=False) == 1
        assert server.requests[-1]["body"]["input"] == ["How often are backups taken?\n"
                                                        "Nightly copies kept for 30 days. Tested."]
        # An entry off the queue (another process's model took it off) waits for a round over
        # every entry: the queued round does not read it.
        await conn.execute("UPDATE knowledge_items SET answer = 'Yearly.' WHERE external_id = 'HR-1'")
        await conn.execute("DELETE FROM knowledge_embedding_queue")
        sent = len(server.requests)
        assert await indexer.catch_up(every_entry=False) == 0 and len(server.requests) == sent
        assert await indexer.catch_up(every_entry=True) == 1
    finally:
        await pool.close()


@pytest.mark.pgvector
async def test_indexer__a_text_written_while_its_entry_leaves_the_queue_stays_queued(
    fake, session, conn, database_url, admin
):
    """Taking current entries off the queue in the statement that found them current would lose a
    write committed meanwhile (its text unseen by that statement's snapshot): the entry would
    keep its old vector until a round over every entry. The queue rows a write holds are skipped,
    and never waited for (a writer of several statements could deadlock with that)."""
    server, url = fake
    await import_csv(conn, admin.account_id, KB)
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=3)
    writer = await asyncpg.connect(database_url, **CONNECT)
    try:
        wide = settings(url, batch_size=10)
        indexer = Indexer(pool, OpenAIEmbedder(wide, session), wide)
        assert await indexer.step(every_entry=False) == 4  # embedded, still queued
        async with writer.transaction():
            await writer.execute(
                "UPDATE knowledge_items SET answer = 'Hourly copies.' WHERE external_id = 'BAK-1'")
            # Not waiting for the write: done while it is open.
            assert await asyncio.wait_for(indexer.catch_up(every_entry=False), 10) == 0
        assert await conn.fetchval(
            "SELECT k.external_id FROM knowledge_embedding_queue q JOIN knowledge_items k ON k.id = q.item_id"
        ) == "BAK-1"
        assert await indexer.catch_up(every_entry=False) == 1
        assert server.requests[-1]["body"]["input"] == ["How often are backups taken?\nHourly copies."]
        assert await conn.fetchval(QUEUED) == 0
    finally:
        await writer.close()
        await pool.close()


@pytest.mark.pgvector
async def test_indexer__takes_entries_off_the_queue_a_bounded_batch_per_transaction(
    fake, session, conn, database_url, admin
):
    """After a large import the queue was emptied by one transaction locking and deleting every
    row; now DEQUEUE_BATCH rows a transaction, until a batch comes back short."""
    _server, url = fake
    await import_csv(conn, admin.account_id, KB)
    locks: list[str] = []

    def seen(logged) -> None:
        if "FOR UPDATE OF q SKIP LOCKED" in logged.query:
            locks.append(logged.query)

    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2,
                                     init=lambda c: _add_logger(c, seen))
    try:
        indexer = Indexer(pool, OpenAIEmbedder(settings(url), session), settings(url))
        indexer.dequeue_batch = 3
        assert await indexer.catch_up(every_entry=False) == 4
        assert await conn.fetchval(QUEUED) == 0
        assert len(locks) == 2  # 3 entries, then the last one (a short batch: done)
    finally:
        await pool.close()


@pytest.mark.pgvector
async def test_indexer__an_entry_the_backend_refuses_holds_back_no_other_entry(
    fake, session, conn, database_url, admin, make_account
):
    """An entry whose text the backend refuses (HTTP 400: past the model's input limit, where an
    answer may hold 100,000 characters) failed its whole batch, and the round with it, every
    round: written first, it stayed the oldest on the queue, so no entry of any account queued
    after it was embedded again (the service's dense retrieval stopped learning). Now the batch is
    embedded an entry at a time when refused; the refused entry keeps its claim (CLAIM_SECONDS)
    rather than being sent again every round."""
    server, url = fake
    server.longest = 1_000
    other = await make_account("Other")
    await import_csv(conn, other.account_id, "id,question,answer\nLONG-1,Everything?," + "x" * 5_000 + "\n")
    await import_csv(conn, admin.account_id, KB)
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    try:
        indexer = Indexer(pool, OpenAIEmbedder(settings(url, max_attempts=1), session), settings(url))
        assert await indexer.catch_up(every_entry=False) + await indexer.catch_up(every_entry=False) == 4
        embedded = await conn.fetch("SELECT k.external_id FROM knowledge_embeddings e"
                                    " JOIN knowledge_items k ON k.id = e.item_id")
        assert sorted(r["external_id"] for r in embedded) == ["BAK-1", "ENC-1", "END-1", "HR-1"]
        # Not sent again while its claim lasts, in a round over the queue or over every entry.
        sent = len(server.requests)
        assert await indexer.catch_up(every_entry=False) == 0 and await indexer.catch_up() == 0
        assert len(server.requests) == sent
        assert await conn.fetchval(QUEUED) == 1  # still queued: tried again once the claim lapses
        # A refusal of every request (a wrong key) is no entry's: the round fails at the batch,
        # sent once, its claims released.
        await conn.execute("UPDATE knowledge_items SET answer = 'Hourly.' WHERE external_id = 'BAK-1'")
        server.failures = [401]
        with pytest.raises(EmbeddingFailure, match="HTTP 401"):
            await indexer.catch_up(every_entry=False)
        assert len(server.requests) == sent + 1
        assert await indexer.catch_up(every_entry=False) == 1
    finally:
        await pool.close()


async def _add_logger(connection: asyncpg.Connection, callback) -> None:
    connection.add_query_logger(callback)


class _HeldEmbedder:
    """Embeds (fake_vector, in the 384 dimensions the migration indexed) only once `go` is set;
    `called` says it has the batch."""

    model = "held-embed"

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.go = asyncio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.called.set()
        await self.go.wait()
        return [fake_vector(text, 384) for text in texts]


@pytest.mark.pgvector
async def test_indexer__an_entry_deleted_while_its_batch_is_embedded_is_left_out(conn, database_url, admin):
    """A probe: an entry deleted while the indexer embedded its batch (its deletion committing
    while the vectors were stored) failed the whole batch on the foreign key, its vectors thrown
    away and embedded again next round, a warning each time. The others are stored now."""
    from conftest import lock_waiters

    await import_csv(conn, admin.account_id, KB)
    embedder = _HeldEmbedder()
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    deleting = await asyncpg.connect(database_url, **CONNECT)
    try:
        indexer = Indexer(pool, embedder, config_module.structure({}).embeddings)
        step = asyncio.create_task(indexer.step())
        await embedder.called.wait()
        async with deleting.transaction():
            await deleting.execute("DELETE FROM knowledge_items WHERE external_id = 'BAK-1'")
            embedder.go.set()
            await lock_waiters(conn, 1)  # the vectors' INSERT waits for the deletion
        assert await asyncio.wait_for(step, 10) == 4
    finally:
        await deleting.close()
        await pool.close()
    assert await conn.fetchval("SELECT count(*) FROM knowledge_embeddings") == 3
    assert await conn.fetchval("SELECT count(*) FROM knowledge_embedding_claims") == 0


async def _indexed(url: str, session, database_url: str) -> OpenAIEmbedder:
    """The fake server's embedder, once every entry of the database is embedded with it."""
    embedder = OpenAIEmbedder(settings(url), session)
    pool = await asyncpg.create_pool(database_url, **CONNECT, min_size=1, max_size=2)
    try:
        await Indexer(pool, embedder, settings(url)).catch_up()
    finally:
        await pool.close()
    return embedder


@pytest.fixture
async def embedder(fake, session, conn, database_url, admin) -> OpenAIEmbedder:
    """The fake server's embedder, with KB imported into the admin's account and embedded."""
    _, url = fake
    await import_csv(conn, admin.account_id, KB)
    return await _indexed(url, session, database_url)


@pytest.mark.pgvector
async def test_find_references__dense_finds_a_paraphrase_lexical_cannot(
    fake, session, conn, database_url, admin, make_account
):
    _, url = fake
    other = await make_account("Other")
    await import_csv(conn, admin.account_id, KB)
    await import_csv(conn, other.account_id, KB.replace("END-1", "OTHER-END"))
    embedder = await _indexed(url, session, database_url)
    question = "Do company laptops have safeguards?"  # no word in common with END-1
    # Past its review date: a new version, and a reference that says since when.
    review_by = await conn.fetchval(
        "UPDATE knowledge_items SET review_by = current_date - 1"
        " WHERE account_id = $1 AND external_id = 'END-1' RETURNING review_by", admin.account_id)

    assert await find_references(conn, admin.account_id, question) == []
    found = await find_references(conn, admin.account_id, question, embedder=embedder)

    assert found[0].external_id == "END-1"  # never another account's entry
    assert found[0].dense == pytest.approx(1.0, abs=0.05)
    assert found[0].score == 0.0  # the lexical score stays lexical
    assert (found[0].kb_version, found[0].stale_since) == (2, review_by.isoformat())

    # Where both rankings have something, the fused order keeps the lexical evidence.
    fused = await find_references(conn, admin.account_id, "How often are backups taken?",
                                  embedder=embedder)
    assert fused[0].external_id == "BAK-1" and fused[0].score > 0 and fused[0].dense is not None
    assert (fused[0].kb_version, fused[0].stale_since) == (1, None)


@pytest.mark.pgvector
async def test_find_references__dense_leaves_the_callers_settings_alone(
    embedder, conn, admin
):
    # knowledge_retrieve_nearest sets its HNSW settings and puts the caller's back: a caller's
    # transaction keeps its own (SET LOCAL in a savepoint once outlived it).
    question = "How often are backup copies restored?"
    async with conn.transaction():
        await conn.execute("SET LOCAL hnsw.ef_search = 17")
        found = await find_references(conn, admin.account_id, question, limit=10, embedder=embedder)
        assert await conn.fetchval("SHOW hnsw.ef_search") == "17"
        assert await conn.fetchval("SHOW hnsw.iterative_scan") == "off"
    # Every entry is near (four of them): each has its similarity, as pgvector computes it.
    by_id = {ref.external_id: ref.dense for ref in found}
    assert set(by_id) == {"END-1", "ENC-1", "BAK-1", "HR-1"}
    for line in KB.splitlines()[1:]:
        external_id, entry_question, answer = line.split(",", 2)
        entry = fake_vector(f"{entry_question}\n{answer}")
        expected = sum(a * b for a, b in zip(fake_vector(question), entry, strict=True))
        assert by_id[external_id] == pytest.approx(expected, abs=1e-4), external_id


@pytest.mark.pgvector
async def test_find_references__candidates_tallied_during_the_nearest_statement_score_as_after_it(
    fake, session, conn, database_url, admin
):
    # find_references tallies the lexical candidates while PostgreSQL finds the nearest entries;
    # only their length normalisation waits for the entries that join. The references must be
    # those of ranking everything afterwards, as before that overlap.
    from service import db
    from service.answering import retrieval

    await import_csv(conn, admin.account_id, KB + "BAK-2,Are backups encrypted?,Backup copies are "
                     "encrypted with AES-256 at rest in a second region and restored monthly.\n")
    embedder = await _indexed(fake[1], session, database_url)
    question = "Are backup copies encrypted at rest?"
    found = await find_references(conn, admin.account_id, question, limit=10, embedder=embedder)

    rows = await retrieval._retrieve(conn, admin.account_id, question)
    [vector] = await embedder.embed([question])
    nearest = await conn.fetch(
        db.query("knowledge_retrieve_nearest"), admin.account_id, embedder.model,
        embeddings.vector_literal(vector), len(vector), retrieval.DENSE_NEAREST,
        2 * retrieval.DENSE_NEAREST, [row["id"] for row in rows[1:]], rows[0]["lexemes"],
        rows[0]["concepts"],
    )
    dense = {row["id"]: row["similarity"] for row in nearest if row["similarity"] is not None}
    joins = [row for row in nearest if row["joins"]]
    after = await retrieval._rank(conn, admin.account_id, question, [*rows, *joins], 10, dense,
                                  retrieval._question(rows[0]))

    assert len(rows) > 2 and joins  # both kinds of candidate, so the lengths' mean needs the joins
    assert found == after
    assert any(ref.score > 0 for ref in found)


@pytest.mark.pgvector
async def test_find_references__an_error_while_the_nearest_statement_runs_leaves_the_connection_usable(
    embedder, conn, admin, monkeypatch
):
    # The nearest-entries statement is in flight while the candidates are tallied. If tallying
    # fails, the caller must get that error, and its transaction must roll back: a connection
    # still busy with the cancelled statement refused the ROLLBACK ("another operation is in
    # progress"), which hid the error and left the transaction open.
    from service.answering import retrieval

    def broken(question, row):
        raise ValueError("tally failed")

    monkeypatch.setattr(retrieval, "_tally", broken)
    with pytest.raises(ValueError, match="tally failed"):
        async with conn.transaction():
            await find_references(conn, admin.account_id, "How often are backups taken?",
                                  embedder=embedder)
    assert not conn.is_in_transaction()
    assert await conn.fetchval("SELECT 1") == 1


@pytest.mark.pgvector
async def test_find_references__the_similarities_may_take_a_generic_plan_that_parses_the_vector_once(
    embedder, conn, admin
):
    # knowledge_retrieve_nearest's similarities were a dynamic statement, planned with every
    # call. Now a cached generic plan may serve them (the planner picks one on large knowledge
    # bases), where the question's vector is a parameter: it must be parsed once per call (an
    # InitPlan), not once per entry, and the references must be those of a custom plan.
    question = "How often are backups restored?"
    custom = await find_references(conn, admin.account_id, question, limit=10, embedder=embedder)
    assert await conn.fetchval(
        "SELECT proconfig FROM pg_proc WHERE proname = 'knowledge_retrieve_nearest'") is None
    async with explained(conn, "plan_cache_mode = force_generic_plan") as plans:
        generic = await find_references(conn, admin.account_id, question, limit=10, embedder=embedder)
    assert generic == custom and {ref.external_id for ref in custom} == {"END-1", "ENC-1", "BAK-1", "HR-1"}
    [similarities] = [plan for plan in plans if "WITH concept_queries AS MATERIALIZED" in plan]
    conditions = [line.strip() for line in similarities.splitlines()
                  if ("Cond:" in line or "Filter:" in line) and "item_id = i.id" in line]
    assert conditions and all("$" in condition for condition in conditions), conditions
    assert "InitPlan" in similarities, similarities


@pytest.mark.pgvector
async def test_find_references__joining_entries_are_read_by_id_among_many_small_accounts(
    embedder, conn, admin
):
    # Many accounts of two entries each: a plan not knowing the account expects few entries an
    # account and may read the nearest entries through an index that starts with account_id
    # (every entry of the account asked for). They are read by their ids.
    await conn.execute(
        "INSERT INTO accounts (id, name) SELECT 'acct_many_' || g, 'Small' FROM generate_series(1, 3000) g")
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer)"
        " SELECT 'kb_many_' || g || '_' || n, 'acct_many_' || g, 'Question ' || n, 'Answer ' || n"
        "   FROM generate_series(1, 3000) g, generate_series(1, 2) n")
    await conn.execute("ANALYZE knowledge_items")
    async with explained(conn, "plan_cache_mode = force_generic_plan") as plans:
        found = await find_references(conn, admin.account_id, "Do company laptops have safeguards?",
                                      embedder=embedder)
    assert found[0].external_id == "END-1"
    [statement] = [plan for plan in plans if "WITH concept_queries AS MATERIALIZED" in plan]
    indexes = set(re.findall(r"(?:on|using) (knowledge_items_\w+)", statement))
    assert indexes == {"knowledge_items_pkey"}, statement


@pytest.mark.pgvector
async def test_find_references__backend_down_means_lexical_only(fake, session, conn, database_url, admin):
    server, url = fake
    await import_csv(conn, admin.account_id, KB)
    embedder = OpenAIEmbedder(settings(url, max_attempts=1), session)
    server.failures = [503]
    found = await find_references(conn, admin.account_id, "Is data encrypted at rest?", embedder=embedder)
    assert found[0].external_id == "ENC-1" and found[0].dense is None


@pytest.mark.pgvector
async def test_app__entries_written_through_the_api_are_embedded(fake, aiohttp_client, config, admin):
    server, url = fake
    from service.web.app import create_app
    from tests.conftest import with_config

    app = create_app(with_config(config, embeddings={"backend": "openai", "base_url": url,
                                                     "model": "fake-embed", "poll_seconds": 60.0}))
    client = await aiohttp_client(app)
    response = await client.post("/api/v1/knowledge_base_items", headers=admin.headers,
                                 json={"knowledge_base_item": {
                                     "question": "How are workstations secured?",
                                     "answer": "Every endpoint runs managed anti-malware."}})
    assert response.status == 201
    # Woken by the write, not by the minute-long poll.
    async with asyncio.timeout(10):
        while True:
            server.received.clear()
            if any(r["body"]["input"] == ["How are workstations secured?\nEvery endpoint runs "
                                          "managed anti-malware."] for r in server.requests):
                break
            await server.received.wait()


async def test_app__without_pgvector_starts_warns_once_and_answers_lexically(
    fake, aiohttp_client, config, conn, admin, caplog
):
    # As on a server without the extension: migration 0011 left no embeddings table.
    from tests.helpers_questions import answers_lexically_warning_once

    _server, url = fake
    await answers_lexically_warning_once(
        aiohttp_client, config, conn, admin, caplog,
        {"backend": "openai", "base_url": url, "model": "fake-embed"})


async def test_usable_embedder__without_the_table_none_and_one_warning(conn, caplog):
    # `eval` too: with a backend configured on a server without pgvector it evaluates lexically.
    await conn.execute("DROP TABLE IF EXISTS knowledge_embeddings")
    caplog.set_level("WARNING", logger="service.answering.embeddings")
    embedder = OpenAIEmbedder(settings("http://127.0.0.1:9/v1"), session=None)  # never called
    assert await embeddings.usable_embedder(conn, embedder) is None
    assert [r.getMessage()[:32] for r in caplog.records] == ["pgvector is not installed on thi"]


def test_decide__dense_retrievals_are_decided_by_the_dense_model_lexical_by_the_lexical():
    import attrs

    from service.answering import decision as coverage
    from service.answering.retrieval import Reference

    ref = Reference(kb_item_id="kb_1", external_id="X-1", title=None, question="Backups?",
                    answer="Nightly copies.", source=None, score=0.3, question_match=0.5, coverage=0.6)
    dense = attrs.evolve(ref, dense=0.7)
    assert "dense" in coverage.features("How often are backups taken?", [dense])
    # Both are shipped, each fitted by cross-validation on its kind of retrieval
    # (docs/answer-quality.md).
    assert coverage.DENSE_MODEL is not None and coverage.DENSE_MODEL.judges_dense
    assert coverage.model_for([dense]) is coverage.DENSE_MODEL
    assert coverage.model_for([ref]) is coverage.MODEL and not coverage.MODEL.judges_dense
    assert coverage.decide("How often are backups taken?", [ref], coverage.MODEL) == coverage.decide(
        "How often are backups taken?", [ref])


STORE = """
INSERT INTO knowledge_embeddings (item_id, model, account_id, content_hash, dimensions, embedding)
SELECT k.id, $1, k.account_id, md5(concat_ws(E'\\n', k.question, k.title, k.answer)), 3, '[1,0,0]'
  FROM knowledge_items k WHERE k.external_id = ANY($2::text[])
"""


@pytest.mark.pgvector
async def test_prune_other_models__only_once_the_configured_model_covers_every_entry(conn, admin):
    # Switching model (or onnx_kernels) leaves the old vectors in the shared HNSW index, where every
    # search walks past them.
    await import_csv(conn, admin.account_id, KB)
    every = ["END-1", "ENC-1", "BAK-1", "HR-1"]
    await conn.execute(STORE, "old-model", every)
    await conn.execute(STORE, "new-model", every[:3])
    assert await embeddings.prune_other_models(conn, "new-model") == (1, 0)  # HR-1 not yet
    assert await conn.fetchval("SELECT count(*) FROM knowledge_embeddings") == 7
    await conn.execute(STORE, "new-model", every[3:])
    assert await embeddings.prune_other_models(conn, "new-model") == (0, 4)
    assert await conn.fetch("SELECT DISTINCT model FROM knowledge_embeddings") == [("new-model",)]
    assert await embeddings.prune_other_models(conn, "new-model") == (0, 0)


def test_configured_model__the_name_each_backend_stores_vectors_under():
    from service.answering.minilm_onnx import MODEL, MODEL_INTEGER

    model = embeddings.configured_model
    assert model(EmbeddingsConfig(backend="onnx", onnx_kernels="integer")) == MODEL_INTEGER
    assert model(EmbeddingsConfig(backend="onnx", onnx_kernels="float")) == MODEL
    assert embeddings.configured_model(EmbeddingsConfig(backend="openai", model="m")) == "m"
    assert embeddings.configured_model(EmbeddingsConfig(backend="local")) == embeddings.LOCAL_MODEL
    assert embeddings.configured_model(EmbeddingsConfig(backend="none")) is None


async def test_queue_trigger__queues_exactly_the_entries_whose_text_a_statement_changed(conn, admin):
    """The update trigger tells changed text apart with EXCEPT ALL over the transition tables
    (joining them on id was a nested loop: re-importing 10,000 entries took 7-16 s more,
    BENCHMARKS.md), under which NULLs compare equal, as IS DISTINCT FROM has them."""
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, title, answer)"
        " SELECT 'kb_q' || n, $1, CASE WHEN n % 2 = 0 THEN 'Question ' || n END,"
        "        CASE WHEN n % 3 = 0 THEN 'Title ' || n END, 'Answer ' || n"
        "   FROM generate_series(1, 30) AS n", admin.account_id)
    assert await conn.fetchval(QUEUED) == 30
    await conn.execute("DELETE FROM knowledge_embedding_queue")
    # One statement: nulls kept as they are, one text per kind changed, the rest rewritten alike.
    await conn.execute(
        "UPDATE knowledge_items SET question = CASE id WHEN 'kb_q4' THEN 'New?' ELSE question END,"
        " title = CASE id WHEN 'kb_q9' THEN NULL WHEN 'kb_q5' THEN 'Titled' ELSE title END,"
        " answer = CASE id WHEN 'kb_q7' THEN 'Changed' ELSE answer END, tags = '{t}'")
    queued = await conn.fetch("SELECT item_id FROM knowledge_embedding_queue ORDER BY item_id")
    assert [r["item_id"] for r in queued] == ["kb_q4", "kb_q5", "kb_q7", "kb_q9"]
