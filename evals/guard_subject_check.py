"""Where the guard takes the question's subject from: how often car-rag's default retrieval
puts the gold record's scope first, per reader run's queries (no answer is read).

    python evals/guard_subject_check.py

``car-rag guard`` judges a stale state about the question's subject, and takes that subject
from its own retrieval's top record (the reader's evidence may be about another scope). On a
suite whose questions cannot name their scope, that record is rarely the gold's, and the
guard judges another scope (or, once results carry an ``ambiguity``, the ambiguity).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from car_rag.queries import load_queries
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag_evals.suites import load_suite, open_suite_store

HERE = Path(__file__).resolve().parent
RUNS = {  # a run per suite: its queries
    "ghsa-freeform": "llm-ghsa-freeform",
    "cvepatchqa-freeform": "llm-cvepatchqa-freeform-heldout",
    "legalprecedentqa-freeform": "llm-legalprecedentqa-freeform-heldout",
    "legalprecedentqa": "llm-legal-classifier-data/template",
    "finsuperqa": "llm-compliance-classifier-data",
}


def main() -> int:
    print("| suite | queries | top record in the gold's scope | results with an ambiguity |\n|---|---|---|---|")
    for name, run in RUNS.items():
        suite = load_suite(name)
        store = open_suite_store(suite, Path(".car-stores"), progress=False)
        retriever = ControllingAuthorityRetriever(store)
        queries = {q.query_id: q for q in load_queries(suite.queries)}
        answers = HERE / "results" / run / "answers.labelled.jsonl"
        ids = sorted({json.loads(line)["query_id"] for line in answers.read_text(encoding="utf-8").splitlines() if line.strip()})
        same = ambiguous = 0
        for qid in ids:
            result = retriever.retrieve(queries[qid].query)
            gold = store.records[queries[qid].gold_doc_ids[0]]
            top = result.ranked[0].record
            same += all(top.scope.get(k) == gold.scope.get(k) for k in store.policy.scope_keys if k in gold.scope)
            ambiguous += result.ambiguity is not None
        print(f"| {name} | {len(ids)} | {same} | {ambiguous} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
