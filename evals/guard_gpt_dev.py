"""The authority guard, alone (no repair), over the CAR paper's GPT-4o-mini answers.

    python evals/guard_gpt_dev.py      # writes evals/results/guard-ghsa-gpt4omini/

The 118 answers of ``ghsa_llm_answers_dev.jsonl`` (59 GHSA advisories x the paper's dense
and two-stage top 5) are judged by ``car-rag guard`` against car-rag's own default
retrieval for each query. Goal (reader-first issue): flag at least 90% of the answers
the classifier labels confident wrong and at most 5% of the rest. Because the guard and
the classifier read claims with the same rules (car_rag.claims), the figures are also
given against the hand labels of ``evals/labels/ghsa_llm_answers_dev.labels.jsonl``,
which no rule wrote.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
from pathlib import Path

from car_rag.eval.stats import Rate
from car_rag_evals.guard_run import run_guard
from car_rag_evals.suites import default_corpora_dir

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "guard-ghsa-gpt4omini"


def _share(flagged: int, n: int) -> str:
    r = Rate(flagged, n)
    return f"{flagged}/{n} = {r.value:.1%} (95% CI {r.interval[0]:.1%}–{r.interval[1]:.1%})"


def main() -> int:
    source = default_corpora_dir().parent / "ghsa_llm_answers_dev.jsonl"
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        answers = Path(tmp) / "answers.jsonl"
        answers.write_text("".join(json.dumps({"query_id": r["id"], "condition": r["retrieval"], "answer": r["answer"]}) + "\n" for r in rows))
        run_guard(answers, OUT, suite_name="ghsa-freeform", command="python evals/guard_gpt_dev.py")
    guard = [json.loads(line) for line in (OUT / "guard.jsonl").read_text().splitlines()]
    hand = {(r["id"], r["retrieval"]): r["label"] for r in map(json.loads, (HERE / "labels" / "ghsa_llm_answers_dev.labels.jsonl").read_text().splitlines())}
    lines = ["", "## Against the goal", ""]
    for source_name, label_of in (("classifier", lambda g: g["label"]), ("hand labels", lambda g: hand[(g["query_id"], g["condition"])])):
        cw = [g for g in guard if label_of(g) == "confident_wrong"]
        rest = [g for g in guard if label_of(g) != "confident_wrong"]
        lines.append(f"- {source_name}: flagged {_share(sum(g['flagged'] for g in cw), len(cw))} of the confident-wrong answers "
                     f"(goal ≥ 90%) and {_share(sum(g['flagged'] for g in rest), len(rest))} of the rest (goal ≤ 5%).")
    kinds = collections.Counter((hand[(g["query_id"], g["condition"])], f["kind"]) for g in guard for f in g["findings"])
    lines += ["", "Findings by hand label: " + ", ".join(f"{lab} / {kind} {n}" for (lab, kind), n in sorted(kinds.items())) + "."]
    flagged_rest = [g for g in guard if g["flagged"] and hand[(g["query_id"], g["condition"])] != "confident_wrong"]
    if flagged_rest:
        lines += ["", "Flagged answers not hand-labelled confident wrong:", ""]
        answers = {(r["id"], r["retrieval"]): r["answer"] for r in rows}
        for g in flagged_rest:
            lines.append(f"- `{g['query_id']}` / {g['condition']} (hand: {hand[(g['query_id'], g['condition'])]}): "
                         + "; ".join(f["message"] for f in g["findings"]))
            lines.append(f"  > {' '.join(answers[(g['query_id'], g['condition'])].split())}")
    with (OUT / "summary.md").open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print((OUT / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
