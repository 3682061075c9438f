"""car-rag's Theorem-4 audit and confident-wrong rate inside RAGAS and DeepEval, on the demo corpus.

Two retrievers answer the demo questions: a plain BM25 top 5 (bm25s over the record texts, the
Stage 1 many pipelines run) and car-rag's Stages 2-3 over that same BM25 ranking
(``DictStore.resolve``). Each top 5 is scored by the RAGAS metrics
(``car_rag.eval.ragas_metrics``, ``batch_score``) and by the DeepEval metrics
(``car_rag.eval.deepeval_metrics``, ``deepeval.evaluate``) with the question's anchor as the
expected record; then the answer metric labels two written answers to the first question.
No LLM, no network.

Run:  pip install "car-rag[ragas,deepeval]"
      DEEPEVAL_TELEMETRY_OPT_OUT=1 RAGAS_DO_NOT_TRACK=true python examples/ragas_deepeval_audit.py
"""

from __future__ import annotations

import os

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import bm25s  # noqa: E402
from deepeval import evaluate  # noqa: E402
from deepeval.evaluate.configs import DisplayConfig  # noqa: E402
from deepeval.test_case import LLMTestCase, RetrievedContextData  # noqa: E402

import car_rag  # noqa: E402
from car_rag import Policy, Record, load_policy, load_records  # noqa: E402
from car_rag.dict_store import DictStore  # noqa: E402
from car_rag.eval import deepeval_metrics, ragas_metrics  # noqa: E402

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
K = 5


def retrievers(records: list[Record], policy: Policy) -> dict[str, Callable[[str], list[str]]]:
    """The two top-5 retrievers compared: plain BM25, and car-rag's Stages 2-3 over its top 10."""
    texts = {r.doc_id: r.text for r in records}
    ids = list(texts)
    bm25 = bm25s.BM25()
    bm25.index(bm25s.tokenize(list(texts.values()), stopwords="en", show_progress=False), show_progress=False)
    store = DictStore.of(records)

    def plain_bm25(question: str) -> list[str]:
        hits, _ = bm25.retrieve(bm25s.tokenize([question], stopwords="en", show_progress=False), k=10, show_progress=False)
        return [ids[int(i)] for i in hits[0]]

    return {
        "bm25": lambda q: plain_bm25(q)[:K],
        "car-rag over bm25": lambda q: store.resolve(policy, q, plain_bm25(q)).doc_ids()[:K],
    }


def main() -> dict[str, dict[str, Any]]:
    """Each retriever's RAGAS sums and DeepEval passes over the demo questions."""
    records = load_records(DEMO / "corpus.jsonl").records
    policy = load_policy(DEMO / "policy.toml")
    questions = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]
    texts = {r.doc_id: r.text for r in records}
    systems = retrievers(records, policy)
    ragas = ragas_metrics.CARAuditMetric.all_from_records(records, policy, k=K)
    deepeval = deepeval_metrics.CARAuditMetric.all_from_records(records, policy, k=K)
    totals: dict[str, dict[str, Any]] = {}
    for system, retrieve in systems.items():
        sets = [(q, retrieve(q["query"])) for q in questions]
        rows = [{"retrieved_context_ids": got, "reference_context_ids": q["anchor_doc_ids"][:1]} for q, got in sets]
        row = {m.name: sum(r.value for r in m.batch_score(rows)) for m in ragas}
        cases = [
            LLMTestCase(
                input=q["query"],
                retrieval_context=[RetrievedContextData(context=texts[d], source=d) for d in got],
                metadata={"expected_ids": q["anchor_doc_ids"][:1]},
            )
            for q, got in sets
        ]
        result = evaluate(cases, deepeval, display_config=DisplayConfig(show_indicator=False, print_results=False))
        passed = {m.metric: 0 for m in deepeval}
        for test in result.test_results:
            for data in test.metrics_data or []:
                passed[data.name] += bool(data.success)
        totals[system] = {"questions": len(sets), "ragas": row, "deepeval_passed": passed}
        print(f"{system}: RAGAS sums {row}; DeepEval passed {passed} of {len(sets)}")

    wrong = ragas_metrics.CARConfidentWrong("security")
    first = questions[0]
    for answer in ("Yes, lodash is still vulnerable: no fix has been released.", "It was fixed in lodash 4.17.12."):
        found = wrong.score(response=answer, reference=first["answer"], fixed_version="4.17.12")
        print(f"car_confident_wrong={found.value:.0f} for {answer!r}: {found.reason}")
    return totals


if __name__ == "__main__":
    main()
