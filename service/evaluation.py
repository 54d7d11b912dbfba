"""Answer-quality evaluation: load a knowledge base into a scratch database, ask every question,
score the outcome against labels (hit@1, hit@5, decision accuracy, calibration, latency).

Files: KB CSV (id, question, answer, …), questions CSV (id, question), labels CSV
(question_id, kb_id, alt_kb_ids `;`-separated, coverage). See /work/shared/eval/README.md.
"""

from __future__ import annotations

import csv
import math
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import attrs

from . import accounts, db
from .knowledge import decode_csv, import_csv
from .retrieval import Reference, find_references

# Asks one question in an account: (references best first, outcome fields of the answer).
Asker = Callable[[asyncpg.Connection, str, str], Awaitable[tuple[list[Reference], dict[str, Any]]]]


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


async def retrieval_asker(
    conn: asyncpg.Connection, account_id: str, question: str
) -> tuple[list[Reference], dict[str, Any]]:
    """Retrieval and coverage assessment only, without an answer engine."""
    from .coverage import assess

    references = await find_references(conn, account_id, question, limit=5)
    coverage = await assess(conn, account_id, question, references)
    answer = references[0].answer if coverage.sufficient and references else None
    return references, {
        "sufficient_context": coverage.sufficient,
        "confidence": coverage.confidence,
        "verbatim_answer": answer is not None,
        "answer": answer,
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
    server_url: str, kb_csv: Path, questions_csv: Path, labels_csv: Path, asker: Asker = retrieval_asker
) -> dict[str, Any]:
    """Run the evaluation in a scratch database on the server of `server_url`, then drop it."""
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
        conn = await asyncpg.connect(db.with_database(server_url, name))
        try:
            await db.migrate(conn)
            made = await accounts.create_account(conn, "Evaluation", "eval@example.invalid", 0)
            account_id = made["account"]["id"]
            report = await import_csv(conn, account_id, kb_text)
            outcomes, latencies = [], []
            for question_id, text in questions:
                started = time.perf_counter()
                references, outcome = await asker(conn, account_id, text)
                latencies.append((time.perf_counter() - started) * 1000)
                outcomes.append({
                    "id": question_id,
                    "question": text,
                    "references": [r.external_id for r in references],
                    **outcome,
                })
        finally:
            await conn.close()
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    result = score(outcomes, labels, latencies)
    result["knowledge_base"] = {"imported": report.imported, "rejected": len(report.rejected)}
    return result
