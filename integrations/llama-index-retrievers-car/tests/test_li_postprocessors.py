"""SupersessionExpander and ActiveStatusFilter, alone and inside a real RetrieverQueryEngine."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import QueryBundle

from llama_index.postprocessor.car import ActiveStatusFilter, SupersessionExpander
from llama_index.retrievers.car import CAR_STATUS, CAR_SUPERSEDED_BY, CAR_VOIDS, CARRetriever
from test_li_retriever import TAR_Q, YAML_Q, by_id, ids


def test_fields_are_described_pydantic_fields(index, policy):
    for cls in (SupersessionExpander, ActiveStatusFilter):
        assert issubclass(cls, BaseNodePostprocessor)
        assert cls.class_name() == cls.__name__
        for name, info in cls.model_fields.items():
            if name != "callback_manager":
                assert info.description, (cls.__name__, name)
    expander = SupersessionExpander(store=index.vector_store, policy="security-advisory")
    assert expander.policy == policy
    assert expander.to_dict()["class_name"] == "SupersessionExpander"  # serialises without the store


def test_expander_adds_the_vocabulary_disjoint_fix(index, policy):
    plain = index.as_retriever(similarity_top_k=3).retrieve(YAML_Q)
    assert "adv-yamlette-2.0.1-release" not in ids(plain)
    expander = SupersessionExpander(index.vector_store, policy)
    expanded = expander.postprocess_nodes(plain, query_str=YAML_Q)
    assert ids(expanded)[0] == "adv-yamlette-2.0.1-release"
    assert set(ids(plain)) < set(ids(expanded))
    assert by_id(expanded)["adv-yamlette-disclosure"][CAR_STATUS] == "superseded"
    again = asyncio.run(expander.apostprocess_nodes(plain, query_bundle=QueryBundle(YAML_Q)))
    assert ids(again) == ids(expanded)


def test_expander_matches_the_retriever(index, policy):
    base = index.as_retriever(similarity_top_k=3)
    expanded = SupersessionExpander(index.vector_store, policy).postprocess_nodes(base.retrieve(TAR_Q), query_str=TAR_Q)
    wrapped = CARRetriever(base, index.vector_store, policy).retrieve(TAR_Q)
    assert ids(expanded) == ids(wrapped)


def test_expander_needs_a_store(policy):
    with pytest.raises(ValueError, match="store"):
        SupersessionExpander(policy=policy)


def test_filter_drops_superseded_and_keeps_provenance(index, policy):
    resolved = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy).retrieve(TAR_Q)
    kept = ActiveStatusFilter().postprocess_nodes(resolved, query_str=TAR_Q)  # car_status present: no policy needed
    assert all(n.node.metadata[CAR_STATUS] == "active" for n in kept)
    assert "adv-tarnish-disclosure" not in ids(kept)
    voided = {e["doc_id"] for e in by_id(kept)["adv-tarnish-1.4.5-release"][CAR_VOIDS]}
    assert {"adv-tarnish-disclosure", "adv-tarnish-1.4.2-release"} <= voided


def test_filter_mark_mode_keeps_everything_active_first(index, policy):
    resolved = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy).retrieve(TAR_Q)
    marked = ActiveStatusFilter(mode="mark").postprocess_nodes(list(reversed(resolved)), query_str=TAR_Q)
    assert set(ids(marked)) == set(ids(resolved))
    statuses = [n.node.metadata[CAR_STATUS] for n in marked]
    assert statuses == sorted(statuses, key=lambda s: s == "superseded")


def test_filter_alone_with_a_store_drops_a_stale_anchor(index, policy):
    """Straight after a plain vector retriever: the fix is not in the list, but the store knows it."""
    plain = index.as_retriever(similarity_top_k=3).retrieve(YAML_Q)
    marked = ActiveStatusFilter(store=index.vector_store, policy=policy, mode="mark").postprocess_nodes(plain, query_str=YAML_Q)
    assert set(ids(marked)) == set(ids(plain))  # a filter adds nothing
    disclosure = by_id(marked)["adv-yamlette-disclosure"]
    assert disclosure[CAR_STATUS] == "superseded"
    assert disclosure[CAR_SUPERSEDED_BY] == ["adv-yamlette-2.0.1-release"]
    dropped = ActiveStatusFilter(store=index.vector_store, policy=policy).postprocess_nodes(plain, query_str=YAML_Q)
    assert "adv-yamlette-disclosure" not in ids(dropped)
    asyn = asyncio.run(ActiveStatusFilter(store=index.vector_store, policy=policy).apostprocess_nodes(plain, query_str=YAML_Q))
    assert ids(asyn) == ids(dropped)


def test_filter_without_a_store_resolves_among_the_nodes(index, policy):
    nodes = index.as_retriever(similarity_top_k=8).retrieve(TAR_Q)
    assert {"adv-tarnish-disclosure", "adv-tarnish-1.4.5-release"} <= set(ids(nodes))
    kept = ActiveStatusFilter(policy=policy).postprocess_nodes(nodes, query_str=TAR_Q)
    assert "adv-tarnish-disclosure" not in ids(kept)
    assert "adv-tarnish-1.4.5-release" in ids(kept)
    with pytest.raises(ValueError, match="policy"):
        ActiveStatusFilter().postprocess_nodes(nodes, query_str=TAR_Q)


def test_postprocessors_in_a_real_query_engine(index, policy, fake_llm):
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=3),
        llm=fake_llm,
        node_postprocessors=[
            SupersessionExpander(store=index.vector_store, policy=policy),
            ActiveStatusFilter(),
        ],
    )
    response = engine.query(YAML_Q)
    sources = ids(response.source_nodes)
    assert sources[0] == "adv-yamlette-2.0.1-release"
    assert "adv-yamlette-disclosure" not in sources
    prompt = fake_llm.prompts[-1]
    assert "Switched the default constructor to the restricted one" in prompt  # the fix's text reached the LLM
    assert "car_status: active" in prompt
    assert "!!python/object" not in prompt  # the superseded disclosure did not

    response = asyncio.run(engine.aquery(YAML_Q))
    assert ids(response.source_nodes)[0] == "adv-yamlette-2.0.1-release"
