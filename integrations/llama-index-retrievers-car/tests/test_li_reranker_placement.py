"""Where a reranker goes (``docs/rerankers.md``): a pointwise reranker after car-rag puts a
superseded record back on top; after ``ActiveStatusFilter(mode="drop")``, or inside Stage 1 (the
wrapped retriever reranks before car-rag resolves), it cannot. The reranker is a real LlamaIndex
``BaseNodePostprocessor`` scoring by query-term overlap (a cross-encoder is not available offline),
which is what makes it pointwise: it scores each node's text alone, blind to status."""

from __future__ import annotations

import re

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index.postprocessor.car import ActiveStatusFilter
from llama_index.retrievers.car import CAR_STATUS, CARRetriever

QUERY = "Can untrusted YAML with python object tags still execute code through yamlette load?"
DISCLOSURE, RELEASE = "adv-yamlette-disclosure", "adv-yamlette-2.0.1-release"


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class QueryTermOverlapReranker(BaseNodePostprocessor):
    """A pointwise reranker: each node scored by how many of the query's words its text holds."""

    @classmethod
    def class_name(cls) -> str:
        return "QueryTermOverlapReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        assert query_bundle is not None
        query = _words(query_bundle.query_str)
        scored = [NodeWithScore(node=n.node, score=float(len(query & _words(n.node.get_content())))) for n in nodes]
        return sorted(scored, key=lambda n: -(n.score or 0.0))


class _RerankedRetriever(BaseRetriever):
    """Stage 1 with the reranker inside it: the index's candidates, reranked, then handed to car-rag."""

    def __init__(self, base: BaseRetriever, reranker: BaseNodePostprocessor):
        self.base, self.reranker = base, reranker
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.reranker.postprocess_nodes(self.base.retrieve(query_bundle), query_bundle)


def _ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.metadata["doc_id"] for n in nodes]


def test_a_pointwise_reranker_after_car_rag_puts_the_superseded_record_on_top(index, policy) -> None:
    nodes = CARRetriever.from_index(index, policy, k=12).retrieve(QUERY)
    assert _ids(nodes)[0] == RELEASE
    reranked = QueryTermOverlapReranker().postprocess_nodes(nodes, query_str=QUERY)
    assert _ids(reranked)[0] == DISCLOSURE  # the wrong placement: stale text outranks what controls it
    assert reranked[0].node.metadata[CAR_STATUS] == "superseded"


def test_after_the_drop_filter_the_reranker_orders_only_active_records(index, policy) -> None:
    nodes = CARRetriever.from_index(index, policy, k=12).retrieve(QUERY)
    active = ActiveStatusFilter(policy=policy, mode="drop").postprocess_nodes(nodes, query_str=QUERY)
    reranked = QueryTermOverlapReranker().postprocess_nodes(active, query_str=QUERY)
    assert DISCLOSURE not in _ids(reranked) and RELEASE in _ids(reranked)
    assert {n.node.metadata[CAR_STATUS] for n in reranked} == {"active"}


def test_a_reranker_inside_stage1_cannot_undo_resolution(index, policy) -> None:
    stage1 = _RerankedRetriever(index.as_retriever(similarity_top_k=6), QueryTermOverlapReranker())
    assert _ids(stage1.retrieve(QUERY))[0] == DISCLOSURE  # the reranker alone prefers the stale record
    nodes = CARRetriever.from_index(index, policy, retriever=stage1, k=12).retrieve(QUERY)
    assert _ids(nodes)[0] == RELEASE
    assert {n.node.metadata["doc_id"]: n.node.metadata[CAR_STATUS] for n in nodes}[DISCLOSURE] == "superseded"
