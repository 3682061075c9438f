"""The Theorem-4 audit inside LlamaIndex's own ``RetrieverEvaluator``, checked against the harness.

``evals/audit_frameworks.py`` audits LlamaIndex's ``QueryFusionRetriever`` (BM25 + vector, RRF,
depth 100) with ``car_rag.eval.audit.audit_retriever``. Here the same retriever over the same
store runs in ``RetrieverEvaluator`` with car-rag's metrics (``llama_index.retrievers.car.metrics``,
k=5, expected id = the question's first labelled anchor, the graph built from the corpus's
nodes), and the totals are compared with ``audit_retriever`` on the same retrieved sets: the
metrics must give the harness's figures.

Run:  python evals/integrations/evaluator_audit.py [--suite ghsa-freeform] [--stores .car-stores]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from llama_index.core.evaluation import RetrieverEvaluator  # noqa: E402
from llama_index.retrievers.car import records_to_nodes  # noqa: E402
from llama_index.retrievers.car.metrics import CARAuditMetric  # noqa: E402

from car_rag import load_records  # noqa: E402
from car_rag.eval.audit import audit_retriever  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag_evals.framework_systems import llamaindex_fusion_retriever  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402
from car_rag_evals.suites import load_suite, open_suite_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


async def run(suite_name: str, stores: Path, depth: int, k: int) -> dict[str, Any]:
    suite = load_suite(suite_name)
    store = open_suite_store(suite, stores, progress=False)
    nodes = records_to_nodes(load_records(suite.corpus).records)
    metrics = CARAuditMetric.all_from_nodes(nodes, suite.policy, k=k)
    evaluator = RetrieverEvaluator(metrics=metrics, retriever=llamaindex_fusion_retriever(store, depth))
    queries = [(q.query, q.anchor_doc_ids[0] if q.anchor_doc_ids else None) for q in load_queries(suite.queries)]
    totals = {"car_closure_violations": 0.0, "car_controlling_hit": 0.0, "car_theorem4": 0.0}
    sets_with_violations = 0
    retrieved: dict[str, list[str]] = {}
    for question, anchor in queries:
        result = await evaluator.aevaluate(question, expected_ids=[anchor] if anchor else [])
        retrieved[question] = result.retrieved_ids
        for name in totals:
            totals[name] += result.metric_vals_dict[name]
        sets_with_violations += result.metric_vals_dict["car_closure_violations"] > 0
    # The harness's audit of the very sets the evaluator saw.
    harness = audit_retriever(lambda q: retrieved[q], queries, store.graph, k=k)
    store.close()
    with_anchor = sum(1 for _, a in queries if a)
    evaluator_row = {
        "queries": len(queries),
        "sets_with_violations": sets_with_violations,
        "violations": int(totals["car_closure_violations"]),
        "controlling_hit": int(totals["car_controlling_hit"]),
        "theorem4": f"{int(totals['car_theorem4'])}/{with_anchor}",
    }
    harness_row = {
        "queries": harness.queries,
        "sets_with_violations": harness.sets_with_violations,
        "violations": harness.violations,
        "theorem4": f"{harness.theorem4.successes}/{harness.theorem4.n}" if harness.theorem4 else None,
    }
    return {"suite": suite_name, "k": k, "depth": depth, "evaluator": evaluator_row, "harness": harness_row}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="ghsa-freeform")
    parser.add_argument("--stores", type=Path, default=ROOT / ".car-stores")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "integrations")
    args = parser.parse_args()
    started = time.perf_counter()
    result = asyncio.run(run(args.suite, args.stores, args.depth, args.k))
    header = results_header(__file__)
    result["command"], result["generated"] = header.command, header.when
    result["seconds"] = round(time.perf_counter() - started, 1)
    ev, ha = result["evaluator"], result["harness"]
    same = all(ev[key] == ha[key] for key in ("queries", "sets_with_violations", "violations", "theorem4"))
    result["agree"] = same
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"evaluator_audit-{args.suite}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    if not same:
        raise SystemExit("the evaluator's metrics and the harness's audit disagree")


if __name__ == "__main__":
    main()
