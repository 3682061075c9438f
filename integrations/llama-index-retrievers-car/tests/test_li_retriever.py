"""CARRetriever over a real Chroma-backed VectorStoreIndex, with real MiniLM embeddings."""

from __future__ import annotations

import asyncio

import pytest
from car_rag import CallerContext, ControllingAuthorityRetriever
from llama_index.core.retrievers import QueryFusionRetriever, VectorIndexRetriever
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import BaseNode, NodeWithScore, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

from car_li_support import content_words
from llama_index.retrievers.car import (
    CAR_ANCHOR_ID,
    CAR_HIDDEN_SUPERSEDER,
    CAR_ROLE,
    CAR_RULE,
    CAR_STAGE1_RANK,
    CAR_STAGE1_SCORE,
    CAR_STATUS,
    CAR_SUPERSEDED_BY,
    CAR_VOIDED_BY,
    CAR_VOIDS,
    CARRetriever,
    NodeAuthorityLookup,
)

YAML_Q = "Can untrusted YAML with python object tags still execute code through yamlette load?"
TAR_Q = "Is tarnish extraction still vulnerable to path traversal via crafted archive member names?"


def ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.metadata["doc_id"] for n in nodes]


def by_id(nodes: list[NodeWithScore]) -> dict[str, dict]:
    return {n.node.metadata["doc_id"]: n.node.metadata for n in nodes}


def test_superseder_shares_no_words_with_the_query(records):
    texts = {r.doc_id: r.text for r in records}
    assert not content_words(YAML_Q) & content_words(texts["adv-yamlette-2.0.1-release"])
    assert not content_words(TAR_Q) & content_words(texts["adv-tarnish-1.4.5-release"])
    assert not content_words(TAR_Q) & content_words(texts["adv-tarnish-1.4.2-release"])


def test_vector_stage1_alone_misses_the_fix(index):
    plain = index.as_retriever(similarity_top_k=3).retrieve(YAML_Q)
    assert "adv-yamlette-disclosure" in ids(plain)
    assert "adv-yamlette-2.0.1-release" not in ids(plain)


def test_retriever_puts_the_fix_first_and_marks_the_disclosure(index, policy):
    retriever = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy)
    nodes = retriever.retrieve(YAML_Q)
    meta = by_id(nodes)
    assert ids(nodes)[0] == "adv-yamlette-2.0.1-release"
    fix, disclosure = meta["adv-yamlette-2.0.1-release"], meta["adv-yamlette-disclosure"]
    assert fix[CAR_STATUS] == "active" and fix[CAR_ROLE] == "superseder"
    assert fix[CAR_ANCHOR_ID] == "adv-yamlette-disclosure"
    assert [(e["doc_id"], e["rule"]) for e in fix[CAR_VOIDS]] == [("adv-yamlette-disclosure", "patch_fixes_disclosure")]
    assert fix[CAR_STAGE1_SCORE] is None and fix[CAR_STAGE1_RANK] is None
    assert disclosure[CAR_STATUS] == "superseded"
    assert disclosure[CAR_SUPERSEDED_BY] == ["adv-yamlette-2.0.1-release"]
    assert disclosure[CAR_RULE] == "patch_fixes_disclosure"
    assert [(e["doc_id"], e["rule"]) for e in disclosure[CAR_VOIDED_BY]] == [
        ("adv-yamlette-2.0.1-release", "patch_fixes_disclosure")
    ]
    assert disclosure[CAR_STAGE1_RANK] == 1 and isinstance(disclosure[CAR_STAGE1_SCORE], float)
    # superseded records come after every active one, nothing is dropped
    statuses = [n.node.metadata[CAR_STATUS] for n in nodes]
    assert statuses == sorted(statuses, key=lambda s: s == "superseded")
    assert len(nodes) == 4  # three anchors + the fix
    # the superseder scores like the anchor that brought it in
    scores = {n.node.metadata["doc_id"]: n.score for n in nodes}
    assert scores["adv-yamlette-2.0.1-release"] == scores["adv-yamlette-disclosure"]


def test_status_keys_visible_to_the_llm_rest_hidden(index, policy):
    from llama_index.core.schema import MetadataMode

    node = CARRetriever(index.as_retriever(similarity_top_k=2), index.vector_store, policy).retrieve(YAML_Q)[-1].node
    llm_text = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "car_status: superseded" in llm_text and "car_superseded_by" in llm_text
    assert "car_voided_by" not in llm_text and "car_tenant" not in llm_text
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == node.get_content()


def test_transitive_chain_two_fixes(index, policy):
    nodes = CARRetriever(index.as_retriever(similarity_top_k=2), index.vector_store, policy).retrieve(TAR_Q)
    meta = by_id(nodes)
    assert ids(nodes)[0] == "adv-tarnish-1.4.5-release"
    assert meta["adv-tarnish-1.4.5-release"][CAR_STATUS] == "active"
    assert meta["adv-tarnish-1.4.2-release"][CAR_STATUS] == "superseded"
    assert meta["adv-tarnish-1.4.2-release"][CAR_RULE] == "later_patch"
    assert meta["adv-tarnish-disclosure"][CAR_SUPERSEDED_BY] == ["adv-tarnish-1.4.5-release"]


def test_explicit_edge_of_a_type_no_rule_knows(index, policy):
    query = "Does inkwell markdown rendering still let link titles run script in the browser?"
    nodes = CARRetriever(index.as_retriever(similarity_top_k=1), index.vector_store, policy).retrieve(query)
    meta = by_id(nodes)
    assert ids(nodes) == ["adv-inkwell-bulletin-7", "adv-inkwell-disclosure"]
    assert meta["adv-inkwell-disclosure"][CAR_RULE] == "explicit"


def test_query_named_scope_is_looked_up(index, policy):
    # Stage 1 returns one unrelated node; the CVE id named in the query brings its chain in.
    query = "What changed for CVE-2099-30005 in unzipper?"
    retriever = CARRetriever(index.as_retriever(similarity_top_k=1), index.vector_store, policy)
    meta = by_id(retriever.retrieve(query))
    assert meta["adv-unzipper-0.9.1-release"][CAR_STATUS] == "active"
    assert meta["adv-unzipper-disclosure"][CAR_STATUS] == "superseded"
    assert meta["adv-unzipper-disclosure"][CAR_ROLE] in ("scope_match", "anchor")


def test_async_path_matches_sync(index, policy):
    retriever = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy)
    for query in (YAML_Q, TAR_Q):
        sync = retriever.retrieve(query)
        asyn = asyncio.run(retriever.aretrieve(query))
        assert ids(sync) == ids(asyn)
        assert [n.node.metadata[CAR_STATUS] for n in sync] == [n.node.metadata[CAR_STATUS] for n in asyn]
        assert [n.score for n in sync] == pytest.approx([n.score for n in asyn])


def test_equals_core_retriever_with_the_same_dense_stage1(index, policy, core_store, records):
    """Same MiniLM, same HNSW settings, same records: the LlamaIndex pipeline and car-rag's own
    retriever agree on every query, record by record, status by status."""
    core = ControllingAuthorityRetriever(core_store, anchors="dense", k1=3, fusion="rrf", latent_scope=False)
    wrapped = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy)
    queries = [YAML_Q, TAR_Q, "Is the vaultkit token comparison timing leak fixed?", "unsafe yaml loading in yamlsafe"]
    for query in queries:
        expected = core.retrieve(query)
        got = wrapped.retrieve(query)
        assert ids(got) == expected.doc_ids(), query
        assert [n.node.metadata[CAR_STATUS] for n in got] == [r.status for r in expected], query
        assert [n.node.metadata[CAR_SUPERSEDED_BY] for n in got] == [r.superseded_by for r in expected], query


def test_bm25_stage1_with_vector_store_lookup(index, nodes, policy):
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=2)
    plain = bm25.retrieve(TAR_Q)
    assert "adv-tarnish-1.4.5-release" not in ids(plain)
    result = CARRetriever(bm25, index.vector_store, policy).retrieve(TAR_Q)
    assert ids(result)[0] == "adv-tarnish-1.4.5-release"


def test_bm25_stage1_with_docstore_lookup(nodes, policy):
    """A BM25-only pipeline with no vector store: Stage 2 reads the nodes in memory."""
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=2)
    retriever = CARRetriever(bm25, nodes, policy)
    assert isinstance(retriever.lookup, NodeAuthorityLookup)
    assert ids(retriever.retrieve(YAML_Q))[0] == "adv-yamlette-2.0.1-release"


def test_query_fusion_stage1(index, nodes, policy, fake_llm):
    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=3), BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=3)],
        llm=fake_llm,
        num_queries=1,  # no query generation: the fake LLM is never called
        mode=FUSION_MODES.RECIPROCAL_RANK,
        similarity_top_k=3,
        use_async=False,
    )
    retriever = CARRetriever(fusion, index.vector_store, policy)
    result = retriever.retrieve(YAML_Q)
    assert ids(result)[0] == "adv-yamlette-2.0.1-release"
    assert by_id(result)["adv-yamlette-disclosure"][CAR_STATUS] == "superseded"
    assert asyncio.run(retriever.aretrieve(YAML_Q)) and not fake_llm.prompts


def test_from_index_and_k1(index, policy):
    retriever = CARRetriever.from_index(index, policy, similarity_top_k=5, k1=1)
    assert isinstance(retriever.retriever, VectorIndexRetriever)
    result = retriever.retrieve(YAML_Q)
    anchors = [n for n in result if n.node.metadata[CAR_STAGE1_RANK] is not None]
    assert len(anchors) == 1


def test_caller_never_sees_a_restricted_fix(index, policy):
    query = "Can a network attacker still recover vaultkit API tokens through the timing side channel?"
    base = index.as_retriever(similarity_top_k=1)
    outsider = CARRetriever(base, index.vector_store, policy, caller=CallerContext("other-co", {"dev"}))
    meta = by_id(outsider.retrieve(query))
    assert list(meta) == ["adv-vaultkit-disclosure"]
    assert meta["adv-vaultkit-disclosure"][CAR_STATUS] == "superseded"
    assert meta["adv-vaultkit-disclosure"][CAR_HIDDEN_SUPERSEDER] is True
    assert meta["adv-vaultkit-disclosure"][CAR_SUPERSEDED_BY] == []
    insider = CARRetriever(base, index.vector_store, policy, caller=CallerContext("acme", {"security-team"}))
    assert ids(insider.retrieve(query)) == ["adv-vaultkit-3.1.0-release", "adv-vaultkit-disclosure"]


def test_anchor_voided_only_by_a_restricted_fix_keeps_its_stage1_place(index, policy):
    """Nothing the outsider may read takes the stale disclosure's place: it stays first, in
    the core's order, among the active records, and so do the plain node and the filter."""
    from llama_index.postprocessor.car import ActiveStatusFilter

    query = "Can a network attacker still recover vaultkit API tokens through the timing side channel?"
    stage1 = index.as_retriever(similarity_top_k=3).retrieve(query)
    assert ids(stage1)[0] == "adv-vaultkit-disclosure"
    outsider = CallerContext("other-co", {"dev"})
    retriever = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy, caller=outsider)
    nodes = retriever.retrieve(query)
    statuses = [(n.node.metadata[CAR_STATUS], n.node.metadata[CAR_HIDDEN_SUPERSEDER]) for n in nodes]
    assert ids(nodes)[0] == "adv-vaultkit-disclosure" and statuses[0] == ("superseded", True)
    assert ("active", False) in statuses[1:] and "adv-vaultkit-3.1.0-release" not in ids(nodes)
    assert ids(ActiveStatusFilter(mode="mark").postprocess_nodes(nodes, query_str=query)) == ids(nodes)
    plain = NodeWithScore(node=TextNode(text="Rotate tokens after upgrading.", id_="guidance"), score=0.5)
    resolved = retriever.resolve(query, [stage1[0], plain, *stage1[1:]]).nodes
    assert [n.node.node_id for n in resolved][:2] == ["adv-vaultkit-disclosure", "guidance"]


def test_nodes_without_car_metadata_pass_through(index, nodes, policy):
    plain = TextNode(text="General guidance: keep yamlette and other YAML parsers updated.", id_="guidance")
    bm25 = BM25Retriever.from_defaults(nodes=[*nodes, plain], similarity_top_k=3)
    result = CARRetriever(bm25, index.vector_store, policy).retrieve("yamlette YAML parsers guidance")
    meta = {n.node.node_id: n.node.metadata for n in result}
    assert meta["guidance"][CAR_STATUS] == "unresolved"
    assert "adv-yamlette-2.0.1-release" in meta


def test_chunks_of_one_record_stay_together(policy, records):
    from llama_index.retrievers.car import records_to_nodes

    node = records_to_nodes([r for r in records if r.doc_id == "adv-yamlette-disclosure"])[0]
    first = node.model_copy(update={"id_": "chunk-a", "text": node.text[:80]})
    second = node.model_copy(update={"id_": "chunk-b", "text": node.text[80:]})
    pool: list[BaseNode] = [first, second, *records_to_nodes(r for r in records if r.doc_id != "adv-yamlette-disclosure")]
    stage1 = [NodeWithScore(node=first, score=0.9), NodeWithScore(node=second, score=0.8)]
    resolved = CARRetriever(BM25Retriever.from_defaults(nodes=pool), pool, policy).resolve(YAML_Q, stage1).nodes
    assert [n.node.node_id for n in resolved] == ["adv-yamlette-2.0.1-release", "chunk-a", "chunk-b"]
    assert resolved[2].node.metadata[CAR_STATUS] == "superseded"
    assert resolved[2].node.metadata[CAR_STAGE1_RANK] == 2


def test_explicit_edge_from_another_scope_is_found(policy, records):
    # The core plans a lookup for records naming the anchor in `supersedes`, wherever their scope.
    from car_rag import Record

    from llama_index.retrievers.car import records_to_nodes

    bulletin = Record.model_validate(
        dict(
            doc_id="vendor-bulletin",
            text="Vendor bulletin 12.",
            doc_type="vendor_bulletin",
            scope={"package": "elsewhere"},
            published_at="2030-01-01",
            supersedes=["adv-yamlette-disclosure"],
        )
    )
    pool: list[BaseNode] = [*records_to_nodes([*records, bulletin])]
    stage1 = [NodeWithScore(node=n, score=1.0) for n in pool if n.node_id == "adv-yamlette-disclosure"]
    meta = by_id(CARRetriever(BM25Retriever.from_defaults(nodes=pool), pool, policy).resolve(YAML_Q, stage1).nodes)
    assert "vendor-bulletin" in meta["adv-yamlette-disclosure"][CAR_SUPERSEDED_BY]
    assert meta["vendor-bulletin"][CAR_ROLE] == "superseder"


def test_an_ambiguous_question_carries_its_ambiguity_and_scope_probabilities(embed_model):
    from car_rag import Record, load_policy
    from llama_index.core import VectorStoreIndex

    from llama_index.retrievers.car import CAR_AMBIGUITY, CAR_SCOPE_PROBABILITY, records_to_nodes

    attack = "Prototype pollution in the merge helper lets a remote attacker alter object prototypes."
    records = [
        Record(doc_id=f"{pkg}-d", text=attack, doc_type="vulnerability_disclosure", scope={"package": pkg, "cve_id": cve})
        for pkg, cve in (("alpha-utils", "CVE-2034-0001"), ("beta-utils", "CVE-2034-0002"))
    ]
    records.append(
        Record(
            doc_id="alpha-utils-p",
            text="Release 3.1.0: maintenance.",
            doc_type="patch_release",
            scope={"package": "alpha-utils", "cve_id": "CVE-2034-0001"},
        )
    )
    index = VectorStoreIndex(records_to_nodes(records), embed_model=embed_model)
    retriever = CARRetriever.from_index(index, load_policy("security-advisory"), similarity_top_k=2)
    nodes = retriever.retrieve("Has the prototype pollution in merge been fixed?")
    meta = by_id(nodes)
    ambiguity = meta["alpha-utils-p"][CAR_AMBIGUITY]
    assert ambiguity["scopes"] == 2 and ambiguity["states"] == {"patched": 1, "vulnerable": 1}
    assert all(m[CAR_AMBIGUITY] == ambiguity for m in meta.values())
    assert meta["beta-utils-d"][CAR_SCOPE_PROBABILITY] == pytest.approx(0.5, abs=0.01)
    # Named, the package is the question's scope: no ambiguity, probability 1.0.
    named = by_id(retriever.retrieve("Has the prototype pollution in alpha-utils been fixed?"))
    assert named["alpha-utils-p"][CAR_AMBIGUITY] is None
    assert named["alpha-utils-p"][CAR_SCOPE_PROBABILITY] == pytest.approx(1.0)
