"""car-rag's audit and confident-wrong metrics as DeepEval metrics, run by DeepEval's own
``evaluate`` and ``assert_test`` on ``LLMTestCase``s of the demo corpus (no LLM, no network)."""

from __future__ import annotations

import pytest

deepeval_metrics = pytest.importorskip("car_rag.eval.deepeval_metrics", exc_type=ImportError)

from deepeval import assert_test, evaluate  # noqa: E402
from deepeval.evaluate.configs import DisplayConfig  # noqa: E402
from deepeval.test_case import LLMTestCase, RetrievedContextData  # noqa: E402

from conftest import DISCLOSURE, RELEASE  # noqa: E402

QUIET = DisplayConfig(show_indicator=False, print_results=False)


@pytest.fixture(scope="module")
def texts(demo_records):
    return {r.doc_id: r.text for r in demo_records}


def case(texts, retrieved, *, output=None, gold=None):
    return LLMTestCase(
        input="Is lodash still vulnerable to CVE-2099-10001?",
        actual_output=output,
        expected_output=gold,
        retrieval_context=[RetrievedContextData(context=texts[d], source=d) for d in retrieved],
        metadata={"expected_ids": [DISCLOSURE], "fixed_version": "4.17.12"},
    )


def test_evaluate_scores_and_passes_as_the_audit_says(demo_records, demo_policy, texts) -> None:
    metrics = deepeval_metrics.CARAuditMetric.all_from_records(demo_records, demo_policy, k=5)
    result = evaluate([case(texts, [DISCLOSURE]), case(texts, [DISCLOSURE, RELEASE])], metrics, display_config=QUIET)
    got = [{m.name: (m.score, m.success) for m in test.metrics_data} for test in result.test_results]
    stale, safe = sorted(got, key=lambda row: row["car_closure_violations"][0], reverse=True)
    assert stale == {"car_closure_violations": (1.0, False), "car_controlling_hit": (0.0, False), "car_theorem4": (0.0, False)}
    assert safe == {"car_closure_violations": (0.0, True), "car_controlling_hit": (1.0, True), "car_theorem4": (1.0, True)}


def test_assert_test_fails_a_stale_set_and_names_the_record(demo_records, demo_policy, texts) -> None:
    metric = deepeval_metrics.CARClosureViolations.from_records(demo_records, demo_policy)
    assert_test(case(texts, [DISCLOSURE, RELEASE]), [metric])
    with pytest.raises(AssertionError, match=RELEASE):
        assert_test(case(texts, [DISCLOSURE]), [metric])


def test_confident_wrong_fails_a_wrong_status_only(texts) -> None:
    metric = deepeval_metrics.CARConfidentWrong("security")
    cases = [
        case(texts, [RELEASE], output="lodash is still vulnerable; no fix exists.", gold="patched"),
        case(texts, [RELEASE], output="It was fixed in lodash 4.17.12.", gold="patched"),
        case(texts, [RELEASE], output="I cannot tell from these documents.", gold="patched"),
    ]
    result = evaluate(cases, [metric], display_config=QUIET)
    outcome = sorted((test.metrics_data[0].score, test.metrics_data[0].success) for test in result.test_results)
    assert outcome == [(0.0, True), (0.0, True), (1.0, False)]


def test_what_the_audit_cannot_read_is_refused_saying_what_to_pass(demo_records, demo_policy, texts) -> None:
    metric = deepeval_metrics.CARTheorem4.from_records(demo_records, demo_policy)
    plain = LLMTestCase(input="q", retrieval_context=[texts[DISCLOSURE]], metadata={"expected_ids": [DISCLOSURE]})
    with pytest.raises(ValueError, match=r"entry 1 .* RetrievedContextData\(context=text, source=doc_id\)"):
        metric.measure(plain)
    unlabelled = LLMTestCase(input="q", retrieval_context=[RetrievedContextData(context="t", source=DISCLOSURE)])
    with pytest.raises(ValueError, match="expected_ids"):
        metric.measure(unlabelled)
    with pytest.raises(ValueError, match="expected_output"):
        deepeval_metrics.CARConfidentWrong("legal").measure(LLMTestCase(input="q", actual_output="good law"))
