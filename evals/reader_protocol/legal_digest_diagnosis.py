"""Why car-reader was confidently wrong on held-out legal questions: what its digest said.

A diagnosis after the held-out answers were scored (nothing is chosen from it). For each
held-out query it rebuilds car-reader's context exactly as the run did (run it from a
checkout of the frozen choices, e1fc081, with PYTHONPATH set to it) and records the
digest lines, whether the controlling (overruling) record was shown, and the reader's
label from the run. Writes ``digest_diagnosis.md`` and ``.jsonl`` beside the run.

    PYTHONPATH=/path/to/frozen python evals/reader_protocol/legal_digest_diagnosis.py \
        evals/results/llm-legalprecedentqa-freeform-heldout
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

from car_rag.eval.runner import open_suite_store
from car_rag.eval.suites import load_suite
from car_rag.queries import load_queries
from car_rag.reader_render import render_reader
from car_rag.retriever import ControllingAuthorityRetriever


def main(run_dir: Path) -> None:
    labels = {
        (r["query_id"], r["condition"]): r["label"]
        for r in map(json.loads, (run_dir / "answers.labelled.jsonl").read_text().splitlines())
    }
    ids = sorted({q for q, c in labels if c == "car-reader"})
    suite = load_suite("legalprecedentqa-freeform", None)
    store = open_suite_store(suite, Path(".car-stores"), False)
    retriever = ControllingAuthorityRetriever(store, anchors="hybrid", k1=10, depth=50)
    queries = {q.query_id: q for q in load_queries(suite.queries) if q.query_id in set(ids)}
    rows = []
    for qid in ids:
        q = queries[qid]
        result = retriever.retrieve(q.query)
        context = render_reader(result, policy=store.policy, k=5, token_budget=1500, query_id=qid)
        digest = re.search(r"<digest>(.*?)</digest>", context, re.S)
        lines = digest.group(1).strip().splitlines() if digest else []
        shown = {r.doc_id for r in result.top(5)}
        says = (
            "overruled"
            if any(": overruled." in ln or "no longer good law" in ln for ln in lines)
            else "good law only"
            if any("good law" in ln for ln in lines)
            else "no state"
        )
        rows.append(
            {
                "query_id": qid,
                "digest": lines,
                "digest_says": says,
                "controlling_shown": bool(set(q.gold_doc_ids) & shown),
                "car-reader": labels[(qid, "car-reader")],
                "car-plain": labels[(qid, "car-plain")],
            }
        )
    with (run_dir / "digest_diagnosis.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    table = collections.Counter((r["digest_says"], r["car-reader"]) for r in rows)
    out = [
        "# car-reader on held-out legal: what the digest said, against the reader's label",
        "",
        "Made after scoring, by `evals/reader_protocol/legal_digest_diagnosis.py` (a diagnosis; nothing was chosen from it).",
        "",
        "| digest says | car-reader correct | confident wrong | uncertain |",
        "|---|---|---|---|",
    ]
    for says in ("overruled", "good law only", "no state"):
        out.append(f"| {says} | {table[(says, 'correct')]} | {table[(says, 'confident_wrong')]} | {table[(says, 'uncertain')]} |")
    (run_dir / "digest_diagnosis.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
