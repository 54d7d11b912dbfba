"""Answer-quality evaluation: load a knowledge base into a scratch database, ask every question
through the real question pipeline (retrieval, the configured engine, confidence), one at a time,
and score the outcome against labels (hit@1, hit@5, decision accuracy, calibration, latency).
`fit_decision` refits the coverage model (service/answering/decision_model.json) and reports leave-one-out.

Files: KB CSV (id, question, answer, …), questions CSV (id, question), labels CSV
(question_id, kb_id, alt_kb_ids `;`-separated, coverage). See /work/shared/eval/README.md.
"""

from __future__ import annotations

import csv
import json
import math
import secrets
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiojobs
import asyncpg
import attrs

from .. import db
from ..answering import embeddings
from ..config import QuestionsConfig
from ..domain import accounts
from ..domain.knowledge import decode_csv, import_csv
from . import decision as coverage
from .retrieval import Reference


@attrs.frozen(kw_only=True)
class Label:
    kb_id: str | None
    alternatives: frozenset[str]

    @property
    def answerable(self) -> bool:
        return self.kb_id is not None

    def accepts(self, external_id: str | None) -> bool:
        return external_id is not None and (external_id == self.kb_id or external_id in self.alternatives)


def read_questions(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return [(row["id"], row["question"]) for row in csv.DictReader(handle)]


def read_labels(path: Path) -> dict[str, Label]:
    labels = {}
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            alternatives = {a.strip() for a in (row.get("alt_kb_ids") or "").split(";") if a.strip()}
            labels[row["question_id"]] = Label(
                kb_id=(row.get("kb_id") or "").strip() or None, alternatives=frozenset(alternatives)
            )
    return labels


async def ask_through_pipeline(
    pool: asyncpg.Pool, pipeline: Any, account_id: str, user_id: int, text: str
) -> tuple[list[str], dict[str, Any]]:
    """Ask one question as the API does (free of charge) and run it through the pipeline to
    `complete` in this task: (the references' external ids, best first, and the outcome)."""
    from ..domain.questions import create_question
    from .pipeline import Work

    async with pool.acquire() as conn:
        async with conn.transaction():
            question_id = await create_question(
                conn, account_id=account_id, user_id=user_id, text=text, charge=False
            )
        rows = await conn.fetch(db.query("claim_questions"), pipeline.owner, 1, 60.0)
    assert [row["id"] for row in rows] == [question_id], "the scratch database has one question"
    await pipeline.process(Work.from_row(rows[0]))
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM questions WHERE id = $1", question_id)
    stored = json.loads(row["references"]) if row["references"] else []
    return [r["external_id"] for r in stored], {
        "sufficient_context": row["sufficient_context"],
        "confidence": row["confidence"],
        "requires_attention": row["requires_attention"],
        "verbatim_answer": row["verbatim_answer"],
        "answer": row["answer"],
        "features": coverage.features(text, [Reference(**{
            f.name: r[f.name] for f in attrs.fields(Reference) if f.name in r}) for r in stored]),
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def score(
    outcomes: list[dict[str, Any]], labels: dict[str, Label], latencies_ms: list[float]
) -> dict[str, Any]:
    """The metrics over the labelled questions, and each question's outcome."""
    labelled = [o for o in outcomes if o["id"] in labels]
    answerable = [o for o in labelled if labels[o["id"]].answerable]
    hit1 = sum(1 for o in answerable if o["references"][:1] and labels[o["id"]].accepts(o["references"][0]))
    hit5 = sum(1 for o in answerable if any(labels[o["id"]].accepts(r) for r in o["references"][:5]))
    correct = 0
    for o in labelled:
        label = labels[o["id"]]
        o["correct"] = (
            bool(o["sufficient_context"]) and bool(o["references"]) and label.accepts(o["references"][0])
            if label.answerable
            else not o["sufficient_context"]
        )
        correct += o["correct"]
    bands = [(0.0, 0.5), (0.5, 0.8), (0.8, 0.9), (0.9, 1.01)]
    calibration = []
    for low, high in bands:
        inside = [o for o in labelled if low <= (o["confidence"] or 0.0) < high]
        calibration.append({
            "confidence": f"{low:.1f}-{min(high, 1.0):.1f}",
            "questions": len(inside),
            "correct": sum(1 for o in inside if o["correct"]),
        })
    confident = [o for o in labelled if (o["confidence"] or 0.0) >= 0.8]
    return {
        "hit_at_1": round(hit1 / len(answerable), 4) if answerable else None,
        "hit_at_5": round(hit5 / len(answerable), 4) if answerable else None,
        "decision_accuracy": round(correct / len(labelled), 4) if labelled else None,
        "confident_precision": (
            round(sum(o["correct"] for o in confident) / len(confident), 4) if confident else None
        ),
        "confident_questions": len(confident),
        "calibration": calibration,
        "latency_ms": {
            "p50": round(statistics.median(latencies_ms), 2) if latencies_ms else None,
            "p95": round(percentile(latencies_ms, 0.95), 2),
            "p99": round(percentile(latencies_ms, 0.99), 2),
        },
        "questions": outcomes,
    }


async def evaluate(
    server_url: str, kb_csv: Path, questions_csv: Path, labels_csv: Path,
    config: QuestionsConfig | None = None, engine: Any = None, embedder: Any = None,
) -> dict[str, Any]:
    """Run the evaluation in a scratch database on the server of `server_url`, then drop it."""
    from .engines.local import LocalEngine
    from .pipeline import Pipeline

    # Small local files, read once before anything runs: blocking reads are fine here.
    questions = read_questions(questions_csv)
    labels = read_labels(labels_csv)
    kb_text = decode_csv(kb_csv.read_bytes())  # noqa: ASYNC240 (see above)
    name = f"rfp_eval_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')  # name is ours: hex only
    finally:
        await admin.close()
    try:
        pool = await asyncpg.create_pool(db.with_database(server_url, name), min_size=1, max_size=4)
        scheduler = aiojobs.Scheduler(limit=None, close_timeout=1.0)
        try:
            async with pool.acquire() as conn:
                await db.migrate(conn)
                made = await accounts.create_account(conn, "Evaluation", "eval@example.invalid", 0)
                account_id = made["account"]["id"]
                user_id = made["member"]["user_id"]
                report = await import_csv(conn, account_id, kb_text)
            embedded = 0
            if embedder is not None:
                from ..config import EmbeddingsConfig
                from .embeddings import Indexer

                async with pool.acquire() as conn:
                    await embeddings.check_available(conn)
                started = time.perf_counter()
                embedded = await Indexer(pool, embedder, EmbeddingsConfig()).catch_up()
                embedding_seconds = time.perf_counter() - started
            pipeline = Pipeline(pool, engine or LocalEngine(), config or QuestionsConfig(), scheduler,
                                embedder)
            outcomes, latencies = [], []
            for question_id, text in questions:
                started = time.perf_counter()
                references, outcome = await ask_through_pipeline(
                    pool, pipeline, account_id, user_id, text
                )
                latencies.append((time.perf_counter() - started) * 1000)
                outcomes.append({"id": question_id, "question": text, "references": references,
                                 **outcome})
        finally:
            await scheduler.close()
            await pool.close()
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    result = score(outcomes, labels, latencies)
    result["knowledge_base"] = {"imported": report.imported, "rejected": len(report.rejected)}
    if embedder is not None:
        result["embeddings"] = {"model": embedder.model, "entries": embedded,
                                "seconds": round(embedding_seconds, 2)}
    return result


# -- fitting the coverage model ------------------------------------------------------------------


def _fit(rows: list[tuple[dict[str, float], int]], l2: float) -> coverage.Model:
    """Logistic regression by gradient descent on standardised features (a few dozen rows: no
    library needed), L2-penalised so that a small development set cannot push any coefficient far;
    returned on the raw features."""
    names = coverage.DENSE_FEATURES if any("dense" in v for v, _ in rows) else coverage.FEATURES
    rows = [({k: v.get(k, 0.0) for k in names}, y) for v, y in rows]
    mean = {k: statistics.fmean(v[k] for v, _ in rows) for k in names}
    scale = {k: statistics.pstdev([v[k] for v, _ in rows]) or 1.0 for k in names}
    data = [({k: (v[k] - mean[k]) / scale[k] for k in names}, y) for v, y in rows]
    weights = dict.fromkeys(names, 0.0)
    intercept = 0.0
    for _ in range(2000):
        model = coverage.Model(intercept=intercept, coefficients=weights)
        errors = [(model.probability(v) - y, v) for v, y in data]
        intercept -= 0.5 * sum(e for e, _ in errors) / len(data)
        weights = {
            k: weights[k] - 0.5 * (sum(e * v[k] for e, v in errors) / len(data) + l2 * weights[k])
            for k in names
        }
    return coverage.Model(
        intercept=round(intercept - sum(weights[k] * mean[k] / scale[k] for k in names), 4),
        coefficients={k: round(weights[k] / scale[k], 4) for k in names},
    )


def fit_decision(result: dict[str, Any], labels: dict[str, Label], l2: float = 0.3) -> dict[str, Any]:
    """Fit the coverage model on an evaluation's outcomes: does the first reference answer it?
    Returns the model, and decision accuracy in-sample and leave-one-out (each question decided
    by a model fitted without it)."""
    rows = []
    for o in result["questions"]:
        label = labels.get(o["id"])
        if label is None:
            continue
        right = bool(o["references"]) and label.accepts(o["references"][0])
        rows.append((o, o["features"], int(label.answerable and right), label.answerable))

    def accuracy(decide: Callable[[int], bool]) -> float:
        correct = sum(
            (decide(i) and y == 1) or (not decide(i) and not answerable)
            for i, (_, _, y, answerable) in enumerate(rows)
        )
        return round(correct / len(rows), 4)

    # Trained on the questions a decision can get right: the first reference is right (1) or
    # nothing answers the question (0). When the first reference is wrong for an answerable
    # question, either decision is wrong, so those teach nothing about the choice.
    def trained(skip: int | None) -> coverage.Model:
        return _fit([(f, y) for j, (_, f, y, answerable) in enumerate(rows)
                     if j != skip and (y or not answerable)], l2)

    model = trained(None)
    loo = [trained(i).probability(rows[i][1]) for i in range(len(rows))]
    # Calibration under leave-one-out: how often a decision made with confidence ≥ CONFIDENT
    # (the probability of the side it takes) was right.
    confident = [
        i for i, p in enumerate(loo) if max(p, 1 - p) >= coverage.CONFIDENT
    ]
    confident_right = sum(
        (loo[i] >= model.threshold and rows[i][2] == 1)
        or (loo[i] < model.threshold and not rows[i][3])
        for i in confident
    )
    return {
        "model": {"intercept": model.intercept, "coefficients": model.coefficients,
                  "threshold": model.threshold},
        "in_sample_accuracy": accuracy(lambda i: model.probability(rows[i][1]) >= model.threshold),
        "leave_one_out_accuracy": accuracy(lambda i: loo[i] >= model.threshold),
        "leave_one_out_confident": {"questions": len(confident), "correct": confident_right},
        "leave_one_out_probabilities": {rows[i][0]["id"]: round(p, 4) for i, p in enumerate(loo)},
    }
