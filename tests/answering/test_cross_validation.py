"""The eval's out-of-sample machinery on synthetic samples: fold assignments and the figures
repeated over several of them (service/answering/evaluation.py)."""

from __future__ import annotations

import random

from service.answering import evaluation
from service.answering.retrieval import Reference


def _samples(n: int = 60) -> list[evaluation.Sample]:
    """Questions whose first reference is right more often the higher its score: a decision on
    `score` can learn it, but not perfectly (some noise)."""
    rng = random.Random(7)
    found = []
    for i in range(n):
        answerable = i % 3 != 0
        right = answerable and i % 5 != 1
        score = min(1.0, max(0.0, (0.7 if right else 0.3) + rng.uniform(-0.3, 0.3)))
        reference = Reference(kb_item_id=f"k{i}", external_id=f"E{i}", title=None, question="q",
                              answer="a", source=None, score=score, coverage=0.5)
        found.append(evaluation.Sample(
            set="a" if i % 2 else "b", id=f"Q{i}", question=f"question {i}",
            references=(reference,), answerable=answerable, y=int(right), hit5=right))
    return found


def test_folds__each_split_is_stratified_and_a_different_split_moves_questions():
    items = _samples()
    first, again, other = (evaluation.folds(items), evaluation.folds(items),
                           evaluation.folds(items, split=3))
    assert first == again
    assert first != other
    for fold in (first, other):
        for k in range(evaluation.FOLDS):
            inside = [s for s, f in zip(items, fold, strict=True) if f == k]
            assert {s.y for s in inside} == {0, 1}
            assert {s.set for s in inside} == {"a", "b"}


def test_repeated__reports_the_mean_and_range_of_right_decisions_over_the_splits():
    items = _samples()
    counts = [
        evaluation.decision_figures(items, evaluation.cross_validated(items, ("score",), split=k))[
            "decisions_right"]
        for k in range(4)
    ]
    spread = evaluation.repeated(items, ("score",), repeats=4)["all"]
    assert spread == {"mean": round(sum(counts) / 4, 1), "low": min(counts), "high": max(counts),
                      "splits": 4, "questions": 60}
    # The score separates right first references from the rest: far better than chance.
    assert spread["low"] > 40
