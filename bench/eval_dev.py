"""Development helper: run the evaluation on ../shared/eval and print per-question features."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from service import db
from service.evaluation import evaluate

EVAL = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/eval")


async def main() -> None:
    server = db.EmbeddedPostgres(Path("var/bench"))
    try:
        result = await evaluate(
            server.url(), EVAL / "kb.csv", EVAL / "dev_questions.csv", EVAL / "dev_labels.csv"
        )
    finally:
        server.stop()
    if "--json" in sys.argv:
        print(json.dumps(result, indent=1))
        return
    from service.evaluation import read_labels

    labels = read_labels(EVAL / "dev_labels.csv")
    for o in result["questions"]:
        label = labels[o["id"]]
        mark = "ok " if o["correct"] else "BAD"
        print(f"{mark} {o['id']:9} want={label.kb_id or '-':9} got={o['references'][:3]} "
              f"suff={o['sufficient_context']} conf={o['confidence']}")
    for key in ("hit_at_1", "hit_at_5", "decision_accuracy", "confident_precision",
                "confident_questions", "latency_ms", "calibration"):
        print(key, result[key])


asyncio.run(main())
