"""Retrieval latency at scale: N synthetic entries in a scratch database, percentiles of
`find_references` over a set of synthetic questions.

    make bench-retrieval                      # 10,000 and 100,000 entries
    .venv/bin/python bench/retrieval.py 10000 --queries 300 [--naive] [--no-dense]

Text follows a Zipf distribution over a 30,000-word vocabulary (a few words in almost every
entry, most words rare), like real questionnaires. `--naive` also times the first version's
query (an OR of every question lexeme ranked with ts_rank_cd) for comparison.

Dense fusion is on by default, as in the service (embeddings.backend = "onnx"), measured three
ways in the same run beside the lexical ranking alone:
- `fused_db_ms`: a random 384-dimension vector per entry (HNSW) and a stand-in embedder that
  returns a random vector at once: the database and ranking side of dense retrieval;
- `fused_model_ms`: the same, but every question is also embedded by the real model (MiniLM int8
  on onnxruntime, its own thread as in the service). The synthetic words would cost the tokenizer
  ~3 pieces each, so the model embeds an English questionnaire question of similar length in
  their place (the entries' vectors are random anyway: only the time matters);
- `embed_ms`: the model's embedding alone.
Entries are not embedded by the model here (100,000 would take over an hour of CPU):
bench/questions.py times the indexer on 10,000 English entries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import resource
import statistics
import time
from pathlib import Path

import _setup  # the scratch database; puts the checkout on sys.path
import asyncpg

from service import db
from service.answering.minilm_onnx import OnnxEmbedder
from service.answering.retrieval import find_references
from service.domain import accounts, knowledge
from service.domain.ids import new_id

VOCABULARY = 30_000
SYLLABLES = ["ka", "to", "ri", "ne", "mo", "sa", "lu", "ve", "di", "po", "ga", "ze", "fi", "ba",
             "cu", "he", "ja", "wo", "xi", "yu", "pr", "st", "tr", "ch", "qu"]

NAIVE = """
WITH q AS (SELECT replace(plainto_tsquery('english', $2)::text, ' & ', ' | ')::tsquery AS query)
SELECT k.id, ts_rank_cd(k.search_vector, q.query, 32) AS score
  FROM knowledge_items k, q
 WHERE k.account_id = $1 AND q.query::text <> '' AND k.search_vector @@ q.query
 ORDER BY score DESC, k.id LIMIT 5
"""


def words(rng: random.Random) -> list[str]:
    made, seen = [], set()
    while len(made) < VOCABULARY:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            made.append(word)
    return made


def sampler(rng: random.Random, vocabulary: list[str]):
    weights = [1 / (rank + 1) ** 1.07 for rank in range(len(vocabulary))]
    cumulative = list(__import__("itertools").accumulate(weights))

    def text(n: int) -> str:
        return " ".join(rng.choices(vocabulary, cum_weights=cumulative, k=n))

    return text


async def load(conn: asyncpg.Connection, account_id: str, n: int, text) -> None:
    batch = 5_000
    for start in range(0, n, batch):
        size = min(batch, n - start)
        await conn.execute(
            db.query("upsert_knowledge_items"),
            account_id,
            [new_id("kb") for _ in range(size)],
            [text(random.randint(8, 20)) + "?" for _ in range(size)],
            [text(random.randint(20, 120)) for _ in range(size)],
            [None] * size,
            ["[]"] * size,
            [None] * size,
            [f"S-{start + i}" for i in range(size)],
            [None] * size,
        )


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 2)

    return {"p50": round(statistics.median(ordered), 2), "p95": at(0.95), "p99": at(0.99),
            "max": round(ordered[-1], 2)}


class RandomEmbedder:
    """Random unit-free vectors, instantly: times everything but the model."""

    model = "bench-random"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[random.random() - 0.5 for _ in range(384)] for _ in texts]


ENGLISH = [
    "Do you encrypt customer data at rest and in transit, and which algorithms and key lengths?",
    "Is multi-factor authentication enforced for all administrative access to production?",
    "How often are backups taken and tested?",
    "Describe your incident response process, including customer notification timelines.",
    "Do you perform annual penetration tests by an independent third party?",
    "Are background checks performed on employees with access to customer data?",
    "What is your data retention policy after contract termination?",
    "Do you maintain a SOC 2 Type II report or ISO 27001 certification?",
]


class ModelEmbedder:
    """The real model, timed on an English question instead of the synthetic one (see above);
    the vector it returns is random, like the entries'."""

    def __init__(self, integer_kernels: bool = False) -> None:
        self.onnx = OnnxEmbedder(integer_kernels=integer_kernels)
        self.model = RandomEmbedder.model
        self.turn = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.turn += 1
        await self.onnx.embed([ENGLISH[self.turn % len(ENGLISH)] for _ in texts])
        return [[random.random() - 0.5 for _ in range(384)] for _ in texts]


RANDOM_VECTORS = """
INSERT INTO knowledge_embeddings (item_id, model, account_id, content_hash, dimensions, embedding)
SELECT k.id, 'bench-random', k.account_id, '', 384,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384) WHERE k.id IS NOT NULL)::vector
  FROM knowledge_items k
"""


async def run(server_url: str, n: int, queries: int, naive: bool, dense: bool = False,
              keep_pending: bool = False, integer_kernels: bool = False) -> dict:
    async with _setup.scratch_database(server_url) as conn:
        account_id = (await accounts.create_account(conn, "Bench", "b@example.invalid"))["account"]["id"]
        rng = random.Random(7)
        text = sampler(rng, words(rng))
        started = time.perf_counter()
        await load(conn, account_id, n, text)
        if not keep_pending:  # what an import does (knowledge.import_csv)
            await knowledge.merge_pending_index(conn)
        await conn.execute("ANALYZE")
        load_s = time.perf_counter() - started
        questions = [text(random.randint(8, 25)) + "?" for _ in range(queries)]
        for question in questions[:20]:  # warm the caches
            await find_references(conn, account_id, question)
        timings, found = [], 0
        for question in questions:
            t0 = time.perf_counter()
            refs = await find_references(conn, account_id, question)
            timings.append((time.perf_counter() - t0) * 1000)
            found += bool(refs)
        result = {"entries": n, "queries": queries, "load_seconds": round(load_s, 1),
                  "answered": found, "find_references_ms": percentiles(timings)}
        if naive:
            naive_timings = []
            for question in questions[:50]:
                t0 = time.perf_counter()
                await conn.fetch(NAIVE, account_id, question)
                naive_timings.append((time.perf_counter() - t0) * 1000)
            result["naive_or_ts_rank_cd_ms"] = percentiles(naive_timings)
        if dense:
            started = time.perf_counter()
            await conn.execute(RANDOM_VECTORS)
            await conn.execute("ANALYZE knowledge_embeddings")
            result["dense_load_seconds"] = round(time.perf_counter() - started, 1)
            model = ModelEmbedder(integer_kernels)
            result["onnx_kernels"] = "integer" if integer_kernels else "float"
            for label, embedder in (("fused_db_ms", RandomEmbedder()), ("fused_model_ms", model)):
                for question in questions[:20]:
                    await find_references(conn, account_id, question, embedder=embedder)
                dense_timings = []
                for question in questions:
                    t0 = time.perf_counter()
                    await find_references(conn, account_id, question, embedder=embedder)
                    dense_timings.append((time.perf_counter() - t0) * 1000)
                result[label] = percentiles(dense_timings)
            embed_timings = []
            for i in range(queries):
                t0 = time.perf_counter()
                await model.onnx.embed([ENGLISH[i % len(ENGLISH)]])
                embed_timings.append((time.perf_counter() - t0) * 1000)
            result["embed_ms"] = percentiles(embed_timings)
        result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        result["load_average"] = [round(x, 2) for x in __import__("os").getloadavg()]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--naive", action="store_true")
    parser.add_argument("--no-dense", dest="dense", action="store_false",
                        help="lexical retrieval only (embeddings.backend = \"none\")")
    parser.add_argument("--onnx-kernels", choices=("float", "integer"), default="integer",
                        help="the model's embeddings.onnx_kernels (default: the service's, integer)")
    parser.add_argument("--keep-pending", action="store_true",
                        help="leave the GIN pending list as the load left it (no merge, as before 0013)")
    args = parser.parse_args()
    random.seed(11)
    server = db.EmbeddedPostgres(Path("var/bench"))
    try:
        print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
              f"{__import__('os').cpu_count()} CPUs, Python {platform.python_version()}, "
              f"{time.strftime('%Y-%m-%d')}")
        for n in args.sizes:
            result = asyncio.run(run(server.url(), n, args.queries, args.naive, args.dense,
                                     args.keep_pending, args.onnx_kernels == "integer"))
            print(json.dumps(result), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
