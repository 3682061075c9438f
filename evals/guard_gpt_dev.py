"""The authority guard, alone (no repair), over the CAR paper's GPT-4o-mini answers: TUNING data.

    python evals/guard_gpt_dev.py      # writes evals/results/guard-ghsa-gpt4omini/

The 118 answers of ``ghsa_llm_answers_dev.jsonl`` (59 GHSA advisories x the paper's dense
and two-stage top 5) are judged by ``car-rag guard`` twice:

- ``no-evidence/`` (the top folder): the paper did not keep what each answer was shown, so
  the guard re-retrieves with car-rag's defaults and judges over the whole scopes of the top 5;
- ``reconstructed-evidence/``: the evidence rebuilt as the paper describes it (dense: MiniLM
  top 5 from the suite's store; two-stage: BM25 top 5 and the release notes of their scopes,
  here car-rag with ``anchors="bm25"`` and no latent scope) and passed with ``--evidence``.
  A reconstruction, not what the model saw: it exercises the evidence path on answers whose
  labels were read, and it decided one rule (the question's subject comes from the guard's
  own retrieval when the reader's evidence is about another scope).

The guard's rules were written and chosen on these answers; they are tuning figures. The
held-out figures are in ``evals/guard_heldout.py``. Goal (issue 30): flag at least 90% of
the confident-wrong answers and at most 5% of the rest. Because the guard and the classifier
read claims with the same rules (car_rag.claims), the figures are also given against the
hand labels of ``evals/labels/ghsa_llm_answers_dev.labels.jsonl``, which no rule wrote.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from car_rag.eval.stats import Rate
from car_rag_evals.guard_run import run_guard
from car_rag_evals.suites import default_corpora_dir, load_suite, open_suite_store

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "guard-ghsa-gpt4omini"
STORES = Path(".car-stores")


def _share(flagged: int, n: int) -> str:
    r = Rate(flagged, n)
    return f"{flagged}/{n} = {r.value:.1%} (95% CI {r.interval[0]:.1%}–{r.interval[1]:.1%})"


def _reconstructed_evidence(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the paper's two conditions put in front of the model, rebuilt from the suite's store."""
    from car_rag.retriever import ControllingAuthorityRetriever

    store = open_suite_store(load_suite("ghsa-freeform"), STORES, progress=False)
    two_stage = ControllingAuthorityRetriever(store, anchors="bm25", latent_scope=False)
    out = []
    for r in rows:
        if r["retrieval"] == "dense":
            ids = [h.doc_id for h in store.dense.search(store.embedder.encode([r["query"]])[0], 5)]
        else:
            ids = two_stage.retrieve(r["query"]).doc_ids(5)
        out.append({"query_id": r["id"], "condition": r["retrieval"], "records": ids, "form": "documents"})
    return out


def _against_the_goal(folder: Path, rows: list[dict[str, Any]]) -> None:
    guard = [json.loads(line) for line in (folder / "guard.jsonl").read_text().splitlines()]
    hand = {
        (r["id"], r["retrieval"]): r["label"]
        for r in map(json.loads, (HERE / "labels" / "ghsa_llm_answers_dev.labels.jsonl").read_text().splitlines())
    }
    lines = ["", "## Against the goal (tuning data)", ""]
    labels = (("classifier", lambda g: g["label"]), ("hand labels", lambda g: hand[(g["query_id"], g["condition"])]))
    for source_name, label_of in labels:
        cw = [g for g in guard if label_of(g) == "confident_wrong"]
        rest = [g for g in guard if label_of(g) != "confident_wrong"]
        lines.append(
            f"- {source_name}: flagged {_share(sum(g['flagged'] for g in cw), len(cw))} of the confident-wrong answers "
            f"(goal ≥ 90%) and {_share(sum(g['flagged'] for g in rest), len(rest))} of the rest (goal ≤ 5%)."
        )
    kinds = collections.Counter((hand[(g["query_id"], g["condition"])], f["kind"]) for g in guard for f in g["findings"])
    lines += ["", "Findings by hand label: " + ", ".join(f"{lab} / {kind} {n}" for (lab, kind), n in sorted(kinds.items())) + "."]
    flagged_rest = [g for g in guard if g["flagged"] and hand[(g["query_id"], g["condition"])] != "confident_wrong"]
    missed = [g for g in guard if not g["flagged"] and hand[(g["query_id"], g["condition"])] == "confident_wrong"]
    answers = {(r["id"], r["retrieval"]): r["answer"] for r in rows}
    for title, items in (
        ("Flagged answers not hand-labelled confident wrong", flagged_rest),
        ("Confident-wrong answers (hand) not flagged", missed),
    ):
        if items:
            lines += ["", f"{title}:", ""]
            for g in items:
                lines.append(
                    f"- `{g['query_id']}` / {g['condition']} (hand: {hand[(g['query_id'], g['condition'])]}): "
                    + ("; ".join(f["message"] for f in g["findings"]) or "no finding")
                )
                lines.append(f"  > {' '.join(answers[(g['query_id'], g['condition'])].split())}")
    with (folder / "summary.md").open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print((folder / "summary.md").read_text())


def main() -> int:
    source = default_corpora_dir().parent / "ghsa_llm_answers_dev.jsonl"
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        answers = Path(tmp) / "answers.jsonl"
        answers.write_text(
            "".join(json.dumps({"query_id": r["id"], "condition": r["retrieval"], "answer": r["answer"]}) + "\n" for r in rows)
        )
        run_guard(answers, OUT, suite_name="ghsa-freeform", stores_dir=STORES, command="python evals/guard_gpt_dev.py")
        _against_the_goal(OUT, rows)
        evidence = Path(tmp) / "evidence.jsonl"
        evidence.write_text("".join(json.dumps(e) + "\n" for e in _reconstructed_evidence(rows)))
        run_guard(
            answers,
            OUT / "reconstructed-evidence",
            suite_name="ghsa-freeform",
            stores_dir=STORES,
            evidence=evidence,
            command="python evals/guard_gpt_dev.py (reconstructed evidence)",
        )
        _against_the_goal(OUT / "reconstructed-evidence", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
