"""car-rag's authority metrics in LlamaIndex's own ``RetrieverEvaluator``: a plain vector
retriever that returns a disclosure without the release that fixed it is caught; CARRetriever
over the same index is not. The answer evaluator in ``BatchEvalRunner``. Real Chroma, real
MiniLM; the LLM is a fake, named as such."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from llama_index.core.base.response.schema import Response
from llama_index.core.evaluation import BatchEvalRunner, RetrieverEvaluator
from llama_index.core.evaluation.retrieval.metrics import HitRate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import TextNode

from llama_index.retrievers.car import CARRetriever, EvidenceSynthesizer, records_to_nodes
from llama_index.retrievers.car.metrics import (
    CARAnswerEvaluator,
    CARAuditMetric,
    CARClosureViolations,
    CARControllingHit,
    CARTheorem4,
)
from test_li_retriever import YAML_Q

DISCLOSURE, RELEASE = "adv-yamlette-disclosure", "adv-yamlette-2.0.1-release"


@pytest.fixture(scope="module")
def metrics(nodes, policy):
    return CARAuditMetric.all_from_nodes(nodes, policy)


def _evaluate(retriever, metrics):
    evaluator = RetrieverEvaluator(metrics=[HitRate(), *metrics], retriever=retriever)
    return asyncio.run(evaluator.aevaluate(YAML_Q, expected_ids=[DISCLOSURE]))


def test_the_evaluator_catches_a_vector_retriever_returning_stale_authority(index, metrics):
    result = _evaluate(index.as_retriever(similarity_top_k=3), metrics)
    assert DISCLOSURE in result.retrieved_ids and RELEASE not in result.retrieved_ids
    assert result.metric_vals_dict == {
        "hit_rate": 1.0,  # the stale record is "hit": LlamaIndex's metric cannot tell
        "car_closure_violations": 1.0,
        "car_controlling_hit": 0.0,
        "car_theorem4": 0.0,
    }
    (violation,) = result.metric_dict["car_closure_violations"].metadata["violations"]
    assert violation == {"doc_id": DISCLOSURE, "controlling": [RELEASE]}


def test_car_retriever_over_the_same_index_passes(index, policy, metrics):
    retriever = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy)
    result = _evaluate(retriever, metrics)
    assert result.retrieved_ids[0] == RELEASE
    assert {
        name: result.metric_vals_dict[name] for name in ("car_closure_violations", "car_controlling_hit", "car_theorem4")
    } == {
        "car_closure_violations": 0.0,
        "car_controlling_hit": 1.0,
        "car_theorem4": 1.0,
    }


def test_chunked_nodes_k_and_unknown_ids(records, policy):
    """Chunk nodes map to their record; only the first k are audited; ids outside the graph are reported."""
    nodes = records_to_nodes(records)
    chunks = [TextNode(id_=f"{n.node_id}#0", text=n.text[:40], metadata=n.metadata) for n in nodes]
    violations = CARClosureViolations.from_nodes(chunks, policy, k=2)
    found = violations.compute(
        retrieved_ids=[f"{DISCLOSURE}#0", "not-a-record", f"{RELEASE}#0"], expected_ids=[f"{DISCLOSURE}#0"]
    )
    assert found.score == 1.0 and found.metadata["unknown"] == ["not-a-record"]
    assert violations.compute(retrieved_ids=[f"{DISCLOSURE}#0", f"{RELEASE}#0"]).score == 0.0
    hit = CARControllingHit.from_nodes(chunks, policy)
    assert hit.compute(retrieved_ids=[f"{RELEASE}#0"], expected_ids=[f"{DISCLOSURE}#0"]).score == 1.0
    assert CARTheorem4.from_nodes(chunks, policy).compute(retrieved_ids=[], expected_ids=[DISCLOSURE]).score == 0.0


def test_nodes_without_car_metadata_are_refused_naming_the_record(policy):
    with pytest.raises(ValueError, match="note-1.*doc_type"):
        CARClosureViolations.from_nodes([TextNode(id_="note-1", text="a note", metadata={"doc_id": "note-1"})], policy)


def test_answer_evaluator_in_a_batch_run_flags_the_confidently_wrong_answer(index, policy, fake_llm):
    """Real query-engine responses (answers scripted into the fake LLM) through LlamaIndex's BatchEvalRunner."""
    engine = RetrieverQueryEngine(
        retriever=CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy),
        response_synthesizer=EvidenceSynthesizer(llm=fake_llm, policy=policy),
    )
    responses: list[Response] = []
    for answer in ("Yes: it is fixed in yamlette 2.0.1.", "No, it is still vulnerable: no patch has been released."):
        fake_llm.scripted = answer
        responses.append(cast(Response, engine.query(YAML_Q)))  # not streaming: a Response
    runner = BatchEvalRunner({"car_answer": CARAnswerEvaluator("security")})
    # BatchEvalRunner passes each extra keyword's list item by item; its stubs say dicts.
    extra: dict[str, Any] = {"reference": ["patched", "patched"], "fixed_version": ["2.0.1", "2.0.1"]}
    results = runner.evaluate_responses(queries=[YAML_Q, YAML_Q], responses=responses, **extra)["car_answer"]
    assert [(r.passing, r.score) for r in results] == [(True, 1.0), (False, 0.0)]
    assert results[1].feedback is not None and results[1].feedback.startswith("confident_wrong: ")
    with pytest.raises(ValueError, match="reference"):
        CARAnswerEvaluator("legal").evaluate(response="It is still good law.")
    with pytest.raises(ValueError, match="no answer classifier"):
        CARAnswerEvaluator("cooking")
