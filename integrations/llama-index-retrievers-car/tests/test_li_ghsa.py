"""ghsa-freeform (159 real advisories, 2,318 records): a LlamaIndex BM25 Stage 1 wrapped by
CARRetriever, Stage 2 by lookups over the nodes, against car-rag's core resolving the same
anchors over the corpus-wide authority graph (what a CARStore holds). No embeddings are
computed here (MiniLM over 2,318 long records takes minutes on one CPU); the Chroma-backed
comparison is ``evals/integrations/llamaindex_parity.py``."""

from __future__ import annotations

import pytest
from car_rag import load_records
from car_rag.adapters import AuthorityGraph
from car_rag.queries import load_queries
from car_rag.resolution import resolve_authority
from llama_index.retrievers.bm25 import BM25Retriever

from llama_index.retrievers.car import CARRetriever, records_to_nodes

K = 5


@pytest.fixture(scope="module")
def ghsa(corpora, policy):
    report = load_records(corpora / "ghsa-freeform.corpus.jsonl")
    assert report.errors == [] and len(report.records) == 2318
    graph = AuthorityGraph(policy)
    for record in report.records:
        graph.add(record)
    nodes = records_to_nodes(report.records)
    queries = load_queries(corpora / "ghsa-freeform.queries.jsonl")
    return graph, nodes, queries


def test_tca_at_5_equals_core_on_the_same_bm25_anchors(ghsa, policy):
    graph, nodes, queries = ghsa
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=K)
    wrapped = CARRetriever(bm25, nodes, policy)
    ours = theirs = 0
    for q in queries:
        stage1 = bm25.retrieve(q.query)
        resolved = wrapped.resolve(q.query, stage1)
        anchors = resolved.result.anchors
        expected = resolve_authority(graph, policy, q.query, anchors)  # what the core retriever's Stage 2+3 runs
        got = [n.node.metadata["doc_id"] for n in resolved.nodes]
        assert got == expected.doc_ids(), q.query_id
        assert [n.node.metadata["car_status"] for n in resolved.nodes] == [r.status for r in expected], q.query_id
        ours += bool(set(q.gold_doc_ids) & set(got[:K]))
        theirs += bool(set(q.gold_doc_ids) & set(expected.doc_ids(K)))
    assert len(queries) == 159
    assert ours == theirs
    assert ours >= 150, f"TCA@5 = {ours}/159"
