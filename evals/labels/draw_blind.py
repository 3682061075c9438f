"""Blind label sheets for the compliance answers: every answer of
evals/results/llm-compliance-classifier-data/answers.jsonl, shuffled with a seed written
here and split into tuning and held-out halves *before* anyone labels them.

    python evals/labels/draw_blind.py   # writes evals/labels/compliance/{tuning,heldout}.blind.jsonl

A sheet row holds the question and the answer only: no gold, no classifier label, no
retrieval condition's result, so the annotator reads what the answer claims and nothing else.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = "20261123:compliance-labels"
HERE = Path(__file__).resolve().parent
ANSWERS = HERE.parent / "results" / "llm-compliance-classifier-data" / "answers.jsonl"
QUERIES = HERE.parents[2] / "shared" / "data" / "car-benchmarks" / "corpora" / "finsuperqa.queries.jsonl"


def main() -> None:
    questions = {q["query_id"]: q["query"] for q in map(json.loads, QUERIES.read_text().splitlines()) if q}
    answers = [json.loads(line) for line in ANSWERS.read_text().splitlines() if line.strip()]
    random.Random(SEED).shuffle(answers)
    half = len(answers) // 2
    for split, rows in (("tuning", answers[:half]), ("heldout", answers[half:])):
        out = HERE / "compliance" / f"{split}.blind.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as fh:
            for i, a in enumerate(rows):
                item = {
                    "item": f"{split}-{i:02d}",
                    "suite": "finsuperqa",
                    "query_id": a["query_id"],
                    "condition": a["condition"],
                    "question": questions[a["query_id"]],
                    "answer": a["answer"],
                }
                fh.write(json.dumps(item) + "\n")
        print(f"{len(rows)} answers -> {out}")


if __name__ == "__main__":
    main()
