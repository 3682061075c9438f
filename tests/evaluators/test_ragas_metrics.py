"""car-rag's audit and confident-wrong metrics as RAGAS 0.4 metrics, scored by RAGAS's own
``ascore`` / ``score`` / ``batch_score`` on the demo corpus (no LLM)."""

from __future__ import annotations

import asyncio

import pytest

ragas_metrics = pytest.importorskip("car_rag.eval.ragas_metrics", exc_type=ImportError)

from ragas.metrics.collections.base import BaseMetric  # noqa: E402
from ragas.metrics.result import MetricResult  # noqa: E402

from car_rag.eval.audit import audit_set  # noqa: E402
from conftest import DISCLOSURE, RELEASE  # noqa: E402


@pytest.fixture(scope="module")
def metrics(demo_records, demo_policy):
    return {m.name: m for m in ragas_metrics.CARAuditMetric.all_from_records(demo_records, demo_policy, k=5)}


def scores(metrics, retrieved, expected=(DISCLOSURE,)):
    return {
        name: m.score(retrieved_context_ids=list(retrieved), reference_context_ids=list(expected)).value
        for name, m in metrics.items()
    }


def test_they_are_ragas_metrics_with_ragas_results(metrics) -> None:
    assert set(metrics) == {"car_closure_violations", "car_controlling_hit", "car_theorem4"}
    for metric in metrics.values():
        assert isinstance(metric, BaseMetric)
        assert isinstance(asyncio.run(metric.ascore([RELEASE], [DISCLOSURE])), MetricResult)


def test_a_stale_record_alone_is_a_violation_naming_what_controls_it(metrics) -> None:
    assert scores(metrics, [DISCLOSURE]) == {"car_closure_violations": 1.0, "car_controlling_hit": 0.0, "car_theorem4": 0.0}
    reason = (
        metrics["car_closure_violations"].score(retrieved_context_ids=[DISCLOSURE], reference_context_ids=[DISCLOSURE]).reason
    )
    assert f"{DISCLOSURE} returned without {RELEASE}" in reason


def test_the_closure_complete_set_is_safe(metrics) -> None:
    assert scores(metrics, [DISCLOSURE, RELEASE]) == {
        "car_closure_violations": 0.0,
        "car_controlling_hit": 1.0,
        "car_theorem4": 1.0,
    }
    assert scores(metrics, [RELEASE]) == {"car_closure_violations": 0.0, "car_controlling_hit": 1.0, "car_theorem4": 1.0}


def test_only_the_first_k_are_audited(demo_records, demo_policy, metrics) -> None:
    graph = metrics["car_theorem4"].graph
    active = [r.doc_id for r in demo_records if not graph.ancestors(r.doc_id) and r.doc_id != RELEASE][:4]
    late = [DISCLOSURE, *active, RELEASE]  # the release 6th: outside a top 5
    assert scores(metrics, late)["car_closure_violations"] == 1.0
    everything = ragas_metrics.CARClosureViolations.from_records(demo_records, demo_policy)
    assert everything.score(retrieved_context_ids=late, reference_context_ids=[DISCLOSURE]).value == 0.0


def test_batch_scores_equal_the_harness_audit_of_every_record_alone(demo_records, metrics) -> None:
    graph = metrics["car_closure_violations"].graph
    rows = [{"retrieved_context_ids": [r.doc_id], "reference_context_ids": [r.doc_id]} for r in demo_records]
    results = metrics["car_closure_violations"].batch_score(rows)
    assert [r.value for r in results] == [float(len(audit_set([r.doc_id], graph).violations)) for r in demo_records]
    assert sum(r.value for r in results) > 0  # the demo has superseded records


def test_confident_wrong_is_one_exactly_for_a_wrong_status() -> None:
    metric = ragas_metrics.CARConfidentWrong("security")
    wrong = metric.score(response="lodash is still vulnerable; no fix exists.", reference="patched")
    right = metric.score(response="It was fixed in lodash 4.17.12.", reference="patched", fixed_version="4.17.12")
    hedged = metric.score(response="I cannot tell from these documents.", reference="patched")
    assert (wrong.value, right.value, hedged.value) == (1.0, 0.0, 0.0)
    assert wrong.reason.startswith("confident_wrong:")


def test_bad_arguments_are_refused_with_what_to_pass(demo_records, demo_policy) -> None:
    with pytest.raises(ValueError, match="no answer classifier"):
        ragas_metrics.CARConfidentWrong("astrology")
    with pytest.raises(ValueError, match="needs reference"):
        ragas_metrics.CARConfidentWrong("security").score(response="patched", reference="")
    with pytest.raises(ValueError, match="k must be 1 or more"):
        ragas_metrics.CARTheorem4.from_records(demo_records, demo_policy, k=0)
