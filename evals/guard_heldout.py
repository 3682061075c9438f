"""The authority guard on the committed reader runs, judged against the evidence each answer
was generated from: HELD-OUT figures.

    python evals/guard_heldout.py      # writes evals/results/guard-heldout/

Every committed ``eval-llm`` run with labelled answers (``evals/results/llm-*/…/answers.labelled.jsonl``,
the offline reader Qwen2.5-Coder-1.5B on GHSA, CVEPatchQA, LegalPrecedentQA and FinSuperQA)
is passed to ``car-rag guard`` as the answers *and* as the evidence: each row's
``context_doc_ids`` is what its condition showed the reader. The guard's rules were fixed on
the GPT-4o-mini dev answers (``evals/guard_gpt_dev.py``) before this script was first run;
none of these answers was read to write them.

Goal (issue 30): flag at least 90% of the answers labelled confident wrong, and at most 5%
of the others. Labels are the ones committed beside the answers (the rule classifier's, as
the run wrote them). Rates count every answer (one the guard cannot judge is not flagged),
with Wilson 95% intervals. The "others" are split: answers that state nothing wrong
(``correct``, ``uncertain``, ``patched_no_version``: a flag there is a false flag), and
``patched_wrong_version`` (the right state with a version other than the gold's, where a
version finding can be a true catch; on GHSA the gold is one release tag, so a correct other
branch's version is labelled wrong too). The pooled line counts each distinct answer once
(the runs share answers: the same prompt gave the same answer).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

from car_rag.eval.stats import Rate
from car_rag_evals.guard_run import run_guard

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OUT = RESULTS / "guard-heldout"
STORES = Path(".car-stores")

RUNS = {  # run folder under evals/results -> the suite its answers are about
    "llm-ghsa-freeform": "ghsa-freeform",
    "llm-ghsa-freeform-v1": "ghsa-freeform",
    "llm-ghsa-freeform-prompt-tail": "ghsa-freeform",
    "llm-ghsa-freeform-reader/final-dev-subset": "ghsa-freeform",
    "llm-ghsa-freeform-reader/choices/v1-ids-in-digest": "ghsa-freeform",
    "llm-ghsa-freeform-reader/choices/v2-state-sentence-first": "ghsa-freeform",
    "llm-ghsa-freeform-reader/choices/v3-plain-instructions": "ghsa-freeform",
    "llm-cvepatchqa-freeform-heldout": "cvepatchqa-freeform",
    "llm-legalprecedentqa-freeform-heldout": "legalprecedentqa-freeform",
    "llm-legal-classifier-data/template": "legalprecedentqa",
    "llm-legal-classifier-data/freeform": "legalprecedentqa-freeform",
    "llm-compliance-classifier-data": "finsuperqa",
}
NAMELESS = frozenset({"cvepatchqa-freeform", "legalprecedentqa-freeform"})
"""Suites whose questions name no entity: each matches several scopes alike (the result's
ambiguity), so an answer that picks one state is what the guard flags there (``ambiguous_state``),
whatever the label (the label assumes the benchmark's one scope was meant)."""
WRONG = "confident_wrong"
NOTHING_WRONG = ("correct", "uncertain", "patched_no_version")
COMMAND = "python evals/guard_heldout.py"


def _rate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return Rate(sum(r["flagged"] for r in rows), len(rows)).to_dict() if rows else {"successes": 0, "n": 0}


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = collections.defaultdict(list)
    for r in rows:
        by[r["label"]].append(r)
    return {
        "answers": len(rows),
        "confident_wrong_flagged": _rate(by[WRONG]),
        "others_flagged": _rate([r for r in rows if r["label"] != WRONG]),
        "nothing_wrong_flagged": _rate([r for lab in NOTHING_WRONG for r in by[lab]]),
        "wrong_version_flagged": _rate(by["patched_wrong_version"]),
        "findings": dict(sorted(collections.Counter(f"{r['label']} / {f['kind']}" for r in rows for f in r["findings"]).items())),
        "unjudged": sum(not r["judged"] for r in rows),
    }


def _cell(rate: dict[str, Any]) -> str:
    if not rate.get("n"):
        return "–"
    lo, hi = rate["ci95"]
    return f"{rate['successes']}/{rate['n']} = {rate['value']:.1%} ({lo:.1%}–{hi:.1%})"


def _row(figures: dict[str, Any]) -> str:
    keys = ("confident_wrong_flagged", "others_flagged", "nothing_wrong_flagged", "wrong_version_flagged")
    return " | ".join(_cell(figures[k]) for k in keys)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="results folder (default: evals/results/guard-heldout)")
    parser.add_argument("--note", default="", help="a paragraph for the summary: what changed since the held-out run")
    args = parser.parse_args()
    out, note = args.out.resolve(), args.note
    command = COMMAND + (f" --out {out.relative_to(HERE.parent)} --note ..." if out != OUT else "")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs: dict[str, Any] = {}
    pooled: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for run, suite in RUNS.items():
        answers = RESULTS / run / "answers.labelled.jsonl"
        folder = out / run
        run_guard(
            answers,
            folder,
            suite_name=suite,
            stores_dir=STORES,
            evidence=answers,
            progress=False,
            command=f"car-rag guard --suite {suite} --answers {answers.relative_to(HERE.parent)} "
            f"--evidence {answers.relative_to(HERE.parent)} --out {folder.relative_to(HERE.parent)}",
        )
        labelled = [json.loads(line) for line in answers.read_text(encoding="utf-8").splitlines() if line.strip()]
        guarded = [json.loads(line) for line in (folder / "guard.jsonl").read_text(encoding="utf-8").splitlines()]
        rows = [{**g, "label": a["label"]} for a, g in zip(labelled, guarded, strict=True)]
        for a, r in zip(labelled, rows):
            pooled.setdefault((suite, a["query_id"], a["condition"], a["answer"]), r)
        conditions = dict.fromkeys(r["condition"] for r in rows)
        by_condition = {c: _figures([r for r in rows if r["condition"] == c]) for c in conditions}
        runs[run] = {
            "suite": suite,
            **_figures(rows),
            "by_condition": by_condition,
            "basis": dict(collections.Counter(r["basis"] for r in rows)),
        }
    split = "held-out" if not note else f"not held out: {note}"
    groups = {
        "questions that name their entity": [r for k, r in pooled.items() if k[0] not in NAMELESS],
        "questions that name none (free-form CVE and legal)": [r for k, r in pooled.items() if k[0] in NAMELESS],
    }
    summary: dict[str, Any] = {
        "command": command,
        "generated": started,
        "split": split,
        "runs": runs,
        "pooled_distinct_answers": _figures(list(pooled.values())),
        "pooled_by_question_form": {name: _figures(rows) for name, rows in groups.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    lines = [
        f"# Authority guard on the committed reader runs ({'held out' if not note else 'NOT held out'})",
        "",
        *([note, ""] if note else []),
        f"Generated by `{command}` on {started}: each run's `answers.labelled.jsonl` passed to `car-rag guard` as the "
        "answers and as the evidence (`context_doc_ids`: what the condition showed the reader). Rules fixed on the "
        "GPT-4o-mini dev answers (`evals/results/guard-ghsa-gpt4omini/`, tuning) before this was first run. Labels: "
        "the committed ones. Rates over every answer (unjudged = not flagged), Wilson 95% intervals. "
        "*Others* = every label but confident_wrong; of them, *nothing wrong* = correct, uncertain, "
        "patched_no_version (a flag there is a false flag) and *wrong version* = patched_wrong_version.",
        "",
        "| run | suite | answers | confident wrong flagged (goal ≥ 90%) | others flagged (goal ≤ 5%) | nothing wrong flagged "
        "| wrong version flagged | unjudged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pooled_rows = [("**pooled, distinct answers**", {"suite": "all", **summary["pooled_distinct_answers"]})]
    pooled_rows += [(f"pooled: {name}", {"suite": "", **figures}) for name, figures in summary["pooled_by_question_form"].items()]
    for run, e in [*runs.items(), *pooled_rows]:
        lines.append(f"| {run} | {e['suite']} | {e['answers']} | {_row(e)} | {e['unjudged']} |")
    lines += [
        "",
        "## By condition",
        "",
        "| run | condition | answers | confident wrong flagged | others flagged | nothing wrong "
        "flagged | wrong version flagged |",
        "|---|---|---|---|---|---|---|",
    ]
    for run, e in runs.items():
        for cond, c in e["by_condition"].items():
            lines.append(f"| {run} | {cond} | {c['answers']} | {_row(c)} |")
    lines += ["", "## Findings by label (pooled, distinct answers)", ""]
    lines += [f"- {k}: {n}" for k, n in summary["pooled_distinct_answers"]["findings"].items()]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
