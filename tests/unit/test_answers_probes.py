"""The answer classifier on the hand-written probes (evals/labels/probes/, written before the
rules were changed to read them): every probe is a test, and ``mixed`` is never counted as
right or as confidently wrong, wherever labels are counted."""

from __future__ import annotations

import pytest

import classifier_agreement as agreement  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag.eval.answers import LABELS, NOT_CONFIDENT, STATUS_LABELS, classify, labels_for

SUITES = agreement.PROBE_SUITES
CASES = [(domain, number, probe) for domain in SUITES for number, probe in enumerate(agreement.probes(domain), 1)]


def test_every_domain_has_at_least_40_probes() -> None:
    counts = {d: sum(1 for domain, _, _ in CASES if domain == d) for d in SUITES}
    assert all(n >= 40 for n in counts.values()), counts


@pytest.mark.parametrize(("domain", "number", "probe"), CASES, ids=[f"{d}-{n}" for d, n, _ in CASES])
def test_probe(domain: str, number: int, probe: dict) -> None:
    suite = SUITES[domain]
    assert probe["expected"] in labels_for(suite), f"{domain}.jsonl:{number}: {probe['expected']!r} is no label of {suite}"
    got = classify(probe["text"], suite, probe["gold"])
    assert got.label == probe["expected"], f"{domain}.jsonl:{number} {probe['text']!r} ({probe['why']}): {got}"


def test_mixed_is_a_label_of_every_suite_and_not_a_confident_one() -> None:
    assert "mixed" in LABELS and "mixed" in STATUS_LABELS
    assert set(NOT_CONFIDENT) == {"mixed", "uncertain"}
    for suite in SUITES.values():
        assert set(NOT_CONFIDENT) <= set(labels_for(suite))


def test_the_reader_report_counts_mixed_apart_from_correct_and_confident_wrong() -> None:
    from car_rag_evals.llm import paired, report

    rows = [
        {"query_id": "q1", "condition": "dense", "label": "mixed"},
        {"query_id": "q2", "condition": "dense", "label": "confident_wrong"},
        {"query_id": "q1", "condition": "car-xml", "label": "correct"},
        {"query_id": "q2", "condition": "car-xml", "label": "mixed"},
    ]
    rep = report(rows, "legalprecedentqa")
    assert rep["labels"] == list(STATUS_LABELS)
    dense = {lab: r["successes"] for lab, r in rep["conditions"]["dense"]["rates"].items()}
    assert dense == {"correct": 0, "confident_wrong": 1, "mixed": 1, "uncertain": 0}
    wrong = next(p for p in paired(rows) if (p["a"], p["b"]) == ("dense", "car-xml"))
    right = next(p for p in paired(rows, "correct") if (p["a"], p["b"]) == ("dense", "car-xml"))
    assert (wrong["a_count"], wrong["b_count"]) == (1, 0)
    assert (right["a_count"], right["b_count"]) == (0, 1)
