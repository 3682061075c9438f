"""Audit your own LlamaIndex retriever in your own ``RetrieverEvaluator``: car-rag's metrics.

The demo corpus (security advisories, release notes, rulings) goes into an in-memory
``VectorStoreIndex`` embedded with the packaged all-MiniLM-L6-v2 (no download). The retriever
under audit is the hybrid one LlamaIndex's docs build: ``QueryFusionRetriever`` over the
vector retriever and BM25, reciprocal-rank fusion, top 5. ``RetrieverEvaluator`` runs it with
LlamaIndex's own ``hit_rate`` and ``mrr`` and car-rag's three authority metrics
(``llama_index.retrievers.car.metrics``): closure violations (a superseded record returned
without what supersedes it), the controlling-record hit and Theorem 4 (both at once). Then the
same fusion retriever wrapped in ``CARRetriever``, for contrast. No labels beyond each
question's expected record: the metrics read the authority graph from the nodes' metadata.

    pip install -e ./integrations/llama-index-retrievers-car llama-index-retrievers-bm25
    python examples/llamaindex_evaluator_audit.py
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.evaluation import RetrieverEvaluator  # noqa: E402
from llama_index.core.evaluation.retrieval.metrics import MRR, HitRate  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.retrievers import BaseRetriever, QueryFusionRetriever  # noqa: E402
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES  # noqa: E402
from llama_index.retrievers.bm25 import BM25Retriever  # noqa: E402
from llama_index.retrievers.car import CAREmbedding, CARRetriever, NodeAuthorityLookup, records_to_nodes  # noqa: E402
from llama_index.retrievers.car.metrics import CARAuditMetric  # noqa: E402

import car_rag  # noqa: E402
from car_rag import load_policy, load_records  # noqa: E402

DEMO = Path(car_rag.__file__).parent / "data" / "demo"
K = 5


def fusion_retriever(index: VectorStoreIndex, nodes: list) -> QueryFusionRetriever:
    """The retriever a LlamaIndex user already runs (num_queries=1: no LLM is called; the
    MockLLM only stops the constructor from resolving OpenAI)."""
    return QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=10), BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=10)],
        llm=MockLLM(),
        num_queries=1,
        mode=FUSION_MODES.RECIPROCAL_RANK,
        similarity_top_k=K,
        use_async=False,
    )


async def evaluate(retriever: BaseRetriever, metrics: list, questions: list[dict]) -> dict[str, float]:
    """Each metric's total over the questions, as the evaluator reports them."""
    evaluator = RetrieverEvaluator(metrics=[HitRate(), MRR(), *metrics], retriever=retriever)
    totals: dict[str, float] = {}
    for q in questions:
        result = await evaluator.aevaluate(q["query"], expected_ids=q["anchor_doc_ids"])
        for name, value in result.metric_vals_dict.items():
            totals[name] = totals.get(name, 0.0) + value
            if name == "car_closure_violations" and value:
                totals["sets_with_violations"] = totals.get("sets_with_violations", 0.0) + 1
    return totals


def main() -> None:
    policy = load_policy(DEMO / "policy.toml")
    nodes = records_to_nodes(load_records(DEMO / "corpus.jsonl").records)
    questions = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]
    index = VectorStoreIndex(nodes, embed_model=CAREmbedding())
    metrics = CARAuditMetric.all_from_nodes(nodes, policy, k=K)
    fusion = fusion_retriever(index, nodes)
    systems = {
        "QueryFusionRetriever": fusion,
        "CARRetriever(QueryFusionRetriever)": CARRetriever(fusion, NodeAuthorityLookup(nodes), policy, k=K),
    }
    n = len(questions)
    print(f"{n} demo questions, top {K}; expected id = the question's anchor record")
    for name, retriever in systems.items():
        t = asyncio.run(evaluate(retriever, metrics, questions))
        print(
            f"{name}: closure violations {t['car_closure_violations']:.0f} in {t.get('sets_with_violations', 0):.0f}/{n} sets; "
            f"controlling-record hit {t['car_controlling_hit']:.0f}/{n}; Theorem 4 {t['car_theorem4']:.0f}/{n}; "
            f"hit_rate {t['hit_rate'] / n:.2f}; mrr {t['mrr'] / n:.2f}"
        )


if __name__ == "__main__":
    main()
