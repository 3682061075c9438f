"""``CARRetriever.from_index`` with car-rag's own Stage 1 (``CARIndexRetriever``): the index's dense
search and BM25 over its nodes, calibrated fusion, the scope posterior, then the core's Stages 2
and 3. Real MiniLM, the in-memory default index and a Chroma-backed one, compared with the core
retriever over a ``CARStore`` of the same records."""

from __future__ import annotations

import pytest
from car_rag import CallerContext, ControllingAuthorityRetriever, Record
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index.retrievers.car import (
    CAR_SCOPE_PROBABILITY,
    CAR_STATUS,
    CARIndexRetriever,
    CARRetriever,
    MissingAuthorityMetadata,
    record_to_node,
    records_to_nodes,
)

QUERIES = [
    "Can untrusted YAML with python object tags still execute code through yamlette load?",
    "Is the tarnish HTML sanitizer bypass fixed?",
    "Zip Slip path traversal in unzipper extraction",
    "timing side channel in vaultkit credential comparison",
    "Is inkwell CVE-2099-30003 still exploitable?",
]


@pytest.fixture()
def memory_index(records, embed_model) -> VectorStoreIndex:
    """A fresh in-memory default index (tests below insert into it)."""
    return VectorStoreIndex(records_to_nodes(records), embed_model=embed_model)


def _ranking(nodes) -> list[tuple[str, str]]:
    return [(n.node.metadata["doc_id"], n.node.metadata[CAR_STATUS]) for n in nodes]


def _core_ranking(core: ControllingAuthorityRetriever, query: str, k: int = 5) -> list[tuple[str, str]]:
    return [(r.doc_id, str(r.status)) for r in core.retrieve(query)][:k]


def _posterior(result) -> list[tuple[str, float | None]]:
    return [(r.doc_id, None if r.scope_probability is None else round(r.scope_probability, 5)) for r in result]


def test_from_index_defaults_to_the_core_stage1_and_ranks_as_the_core_on_the_in_memory_index(memory_index, policy, core_store):
    assert isinstance(memory_index.vector_store, SimpleVectorStore)
    retriever = CARRetriever.from_index(memory_index, policy)
    assert isinstance(retriever, CARIndexRetriever)
    core = ControllingAuthorityRetriever(core_store)
    for query in QUERIES:
        assert _ranking(retriever.retrieve(query)) == _core_ranking(core, query), query
        ours, theirs = retriever.retrieve_result(query), core.retrieve(query)
        assert _posterior(ours) == _posterior(theirs), query
        assert [h.doc_id for h in ours.anchors] == [h.doc_id for h in theirs.anchors], query


def test_the_core_stage1_on_a_chroma_backed_index_ranks_as_the_core(index, policy, core_store):
    retriever = CARRetriever.from_index(index, policy)  # nodes read from the vector store (it keeps text)
    core = ControllingAuthorityRetriever(core_store)
    for query in QUERIES:
        assert _ranking(retriever.retrieve(query)) == _core_ranking(core, query), query


def test_nodes_carry_the_scope_posterior_and_a_superseded_record_is_marked(memory_index, policy):
    nodes = CARRetriever.from_index(memory_index, policy, k=12).retrieve(QUERIES[0])
    meta = {n.node.metadata["doc_id"]: n.node.metadata for n in nodes}
    assert nodes[0].node.metadata["doc_id"] == "adv-yamlette-2.0.1-release"
    assert meta["adv-yamlette-disclosure"][CAR_STATUS] == "superseded"
    assert meta["adv-yamlette-2.0.1-release"][CAR_SCOPE_PROBABILITY] > 0.5
    assert all(CAR_SCOPE_PROBABILITY in m for m in meta.values())


def test_min_confidence_and_stage1_options_reach_the_core(memory_index, policy):
    retriever = CARRetriever.from_index(memory_index, policy, min_confidence=0.9, k1=3, depth=20)
    assert (retriever.core.min_confidence, retriever.core.k1, retriever.core.depth) == (0.9, 3, 20)


def test_the_caller_is_kept_in_every_stage(memory_index, policy):
    query = QUERIES[3]
    outsider = CARRetriever.from_index(memory_index, policy, caller=CallerContext(principals=["someone"]), k=12)
    insider = CARRetriever.from_index(memory_index, policy, caller=CallerContext(principals=["security-team"]), k=12)
    assert "adv-vaultkit-3.1.0-release" not in [d for d, _ in _ranking(outsider.retrieve(query))]
    assert ("adv-vaultkit-3.1.0-release", "active") in _ranking(insider.retrieve(query))


def test_inserts_and_deletes_through_the_index_are_followed(memory_index, policy, records):
    retriever = CARRetriever.from_index(memory_index, policy, k=12)
    query = "Zip Slip path traversal in unzipper: which release fixes it?"
    assert dict(_ranking(retriever.retrieve(query)))["adv-unzipper-0.9.1-release"] == "active"
    base = next(r for r in records if r.doc_id == "adv-unzipper-0.9.1-release")
    newer = Record.model_validate(
        {
            **base.model_dump(),
            "doc_id": "adv-unzipper-0.9.4-release",
            "version": "0.9.4",
            "published_at": "2024-09-01",
            "text": "Release 0.9.4 of unzipper hardens the Zip Slip path traversal fix for symlinked entries.",
        }
    )
    memory_index.insert_nodes([record_to_node(newer)])  # through the index: seen on the next query
    statuses = dict(_ranking(retriever.retrieve(query)))
    assert statuses["adv-unzipper-0.9.4-release"] == "active"
    assert statuses["adv-unzipper-0.9.1-release"] == "superseded"
    retriever.delete_ref_doc("adv-unzipper-0.9.4-release")
    statuses = dict(_ranking(retriever.retrieve(query)))
    assert "adv-unzipper-0.9.4-release" not in statuses
    assert statuses["adv-unzipper-0.9.1-release"] == "active"
    assert len(retriever.corpus) == len(records)


def test_an_index_without_car_rag_metadata_is_refused_naming_the_keys_and_the_extraction_route(embed_model, policy):
    index = VectorStoreIndex.from_documents(
        [Document(text="lodash 4.17.21 fixes prototype pollution", metadata={"source": "blog"})], embed_model=embed_model
    )
    with pytest.raises(MissingAuthorityMetadata, match="doc_type") as caught:
        CARRetriever.from_index(index, policy)
    assert "CARAuthorityExtractor" in str(caught.value) and "car-rag extract" in str(caught.value)
    # wrapping a retriever of one's own stays available, and passes such nodes through
    wrapped = CARRetriever.from_index(index, policy, retriever=index.as_retriever(similarity_top_k=1))
    assert isinstance(wrapped, CARRetriever)
    assert wrapped.retrieve("lodash")[0].node.metadata[CAR_STATUS] == "unresolved"
