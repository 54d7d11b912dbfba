"""Two versions of the retrieval functions side by side: the working tree's and a git revision's,
called in turn on one connection for the same questions, so that the machine's drift (large on a
shared 2-core VM) hits both alike. What a change of sql/functions/ saves is then visible even
when whole-service benchmarks run minutes apart differ by more than that.

    .venv/bin/python bench/sql_ab.py --rev 5065ee0                  # random entry vectors
    .venv/bin/python bench/sql_ab.py --rev 5065ee0 --vectors model  # the model's (HNSW's usual case)

The knowledge base and questions are bench/questions.py's (10,000 entries by default). The
revision's definition is created beside the current one under another name (`…__old`); the
helpers both call (knowledge_candidate_vector, knowledge_text) are the working tree's. For
`knowledge_retrieve_nearest`, each question's lexical candidates come from the current
`knowledge_retrieve`, as in the service. Times are wall milliseconds per call, round trip
included; `calls_whose_rows_differ` counts the calls whose two versions returned different rows
(order aside), which a change meant to keep results must leave at 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import subprocess
import time

import _setup  # the scratch database; puts the checkout on sys.path
import asyncpg
import questions as bench_questions  # bench/questions.py: its knowledge base and questions

from service import db
from service.answering import embeddings, retrieval
from service.answering.minilm_onnx import MODEL_INTEGER, OnnxEmbedder

FUNCTIONS = ("knowledge_retrieve", "knowledge_retrieve_nearest")


def _rows(rows: list[asyncpg.Record]) -> list[str]:
    """Rows to compare, in a fixed order; a candidate's `matched` concepts are a set (retrieval.py
    only asks whether one is in it), so their order does not count."""
    return sorted(repr({**row, "matched": sorted(row["matched"] or [])} if "matched" in row else
                       dict(row)) for row in rows)


def old_definition(rev: str, name: str) -> str:
    """The revision's sql/functions/{name}.sql, creating `{name}__old` instead."""
    text = subprocess.run(
        ["git", "show", f"{rev}:sql/functions/{name}.sql"], cwd=_setup.ROOT,
        capture_output=True, text=True, check=True,
    ).stdout
    if f"FUNCTION {name}(" not in text:
        raise SystemExit(f"{rev}:sql/functions/{name}.sql does not define {name}")
    return text.replace(f"FUNCTION {name}(", f"FUNCTION {name}__old(")


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the git revision to compare the working tree with")
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--passes", type=int, default=3, help="each question called this often per version")
    parser.add_argument("--vectors", choices=["random", "model"], default="random",
                        help="entry and question vectors: random (seconds), or the model's (~70 s)")
    args = parser.parse_args()

    server_url, server = _setup.server_url()
    url = None
    try:
        url, _, asked = await bench_questions.prepare(server_url, args.entries)
        await bench_questions.embed_entries(url, args.vectors, integer_kernels=True)
        conn = await asyncpg.connect(url)
        try:
            result = await compare(conn, args, asked)
        finally:
            await conn.close()
        result |= {"rev": args.rev, "entries": args.entries, "vectors": args.vectors,
                   "machine": f"{platform.machine()}, {platform.python_version()}"}
        print(json.dumps(result))
    finally:
        if url is not None:
            admin = await asyncpg.connect(server_url)
            await admin.execute(f'DROP DATABASE IF EXISTS "{_setup.database_name(url)}" WITH (FORCE)')
            await admin.close()
        if server is not None:
            server.stop()
    return 0


async def compare(conn: asyncpg.Connection, args: argparse.Namespace, asked: list[str]) -> dict:
    for name in FUNCTIONS:
        await conn.execute(old_definition(args.rev, name))
    account = await conn.fetchval("SELECT id FROM accounts")
    questions = random.Random(3).sample(asked, min(args.questions, len(asked)))
    if args.vectors == "model":
        embedder = OnnxEmbedder(integer_kernels=True)
        vectors = embedder.encode(questions)
    else:
        rng = random.Random(5)
        vectors = [[rng.random() - 0.5 for _ in range(384)] for _ in questions]
    calls: dict[str, list[tuple]] = {name: [] for name in FUNCTIONS}
    for question, vector in zip(questions, vectors, strict=True):
        lexical = (account, question, retrieval.CANDIDATE_BUDGET, retrieval.CANDIDATE_LIMIT,
                   retrieval.RERANK, [])
        rows = await conn.fetch(db.query("knowledge_retrieve"), *lexical)
        calls["knowledge_retrieve"].append(lexical)
        calls["knowledge_retrieve_nearest"].append((
            account, MODEL_INTEGER, embeddings.vector_literal(vector), len(vector),
            retrieval.DENSE_NEAREST, 2 * retrieval.DENSE_NEAREST, [row["id"] for row in rows[1:]],
            rows[0]["lexemes"], rows[0]["concepts"],
        ))
    out = {}
    for name, arguments in calls.items():
        placeholders = ", ".join(f"${i}" for i in range(1, len(arguments[0]) + 1))
        statements = {version: f"SELECT * FROM {name}{suffix}({placeholders})"
                      for version, suffix in (("old", "__old"), ("new", ""))}
        for call in arguments[:20]:  # warm: caches, and the plans a function may cache
            for statement in statements.values():
                await conn.fetch(statement, *call)
        times: dict[str, list[float]] = {"old": [], "new": []}
        differ = 0
        for done in range(args.passes):
            for index, call in enumerate(arguments):
                # Each version first for half the calls of every pass: the second call of a
                # question finds the pages the first one read.
                order = ("old", "new") if (done + index) % 2 == 0 else ("new", "old")
                rows = {}
                for version in order:
                    started = time.perf_counter()
                    rows[version] = await conn.fetch(statements[version], *call)
                    times[version].append(1000 * (time.perf_counter() - started))
                # The same rows, in whatever order (the old ts_rank cut ordered them differently).
                differ += _rows(rows["old"]) != _rows(rows["new"])
        out[name] = {
            version: {"mean_ms": round(statistics.fmean(t), 3), "p50_ms": round(statistics.median(t), 3)}
            for version, t in times.items()
        } | {"new_over_old_mean": round(statistics.fmean(times["new"]) / statistics.fmean(times["old"]), 3),
             "calls_whose_rows_differ": differ}
    return out


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
