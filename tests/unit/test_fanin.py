"""Fan-in diagnostics on hand-made chains: recall and precision against the chain, grouped by
fan-in, and the recall-correctness correlation with its bootstrap interval."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from car_rag.queries import Query
from car_rag_evals.fanin import evidence_scores, fanin_table, reader_diagnostics, recall_correctness


def _query(qid: str, chain: list[str]) -> Query:
    return Query(query_id=qid, query="q", gold_doc_ids=[chain[-1]], anchor_doc_ids=[chain[0]], chain_doc_ids=chain)


T0, T1, T2 = _query("t0", ["a"]), _query("t1", ["b", "b2"]), _query("t2", ["c", "c2", "c3"])


def test_recall_and_precision_count_the_whole_chain():
    assert evidence_scores(T2, ["c3", "x", "c", "y", "z"]) == (3, 2 / 3, 2 / 5)
    assert evidence_scores(T0, ["x"]) == (1, 0.0, 0.0)
    assert evidence_scores(T1, []) == (2, 0.0, 0.0)


def test_table_groups_by_fan_in_per_system():
    shown: dict[str, dict[str, Sequence[str]]] = {
        "sys": {"t0": ["a", "x"], "t1": ["b2"], "t2": ["c", "c2", "c3"]},
        "other": {"t1": ["b", "b2"]},
    }
    table = fanin_table(shown, [T0, T1, T2])
    assert table["sys"]["1"]["recall"] == 1.0 and table["sys"]["1"]["precision"] == 0.5
    assert table["sys"]["2"]["recall"] == 0.5 and table["sys"]["2"]["complete"]["successes"] == 0
    assert table["sys"]["3"]["complete"]["successes"] == 1
    assert set(table["other"]) == {"2"} and table["other"]["2"]["complete"]["value"] == 1.0


def test_correlation_matches_pearson_and_its_interval_holds_it():
    pairs = [(1.0, True)] * 6 + [(0.5, True)] * 2 + [(0.5, False)] * 5 + [(0.0, False)] * 4 + [(1.0, False)]
    result = recall_correctness(pairs)
    expected = statistics.correlation([x for x, _ in pairs], [float(y) for _, y in pairs])
    assert result["n"] == 18 and result["r"] == round(expected, 3)
    lo, hi = result["ci95"]
    assert lo < result["r"] < hi and -1 <= lo and hi <= 1
    assert recall_correctness([(0.5, True), (1.0, True), (0.0, True)])["r"] is None  # correctness constant


def test_reader_diagnostics_pool_conditions_and_skip_unlabelled():
    answers: list[dict[str, Any]] = [
        {"query_id": "t1", "condition": "a", "context_doc_ids": ["b", "b2"], "label": "correct"},
        {"query_id": "t1", "condition": "b", "context_doc_ids": ["x"], "label": "confident_wrong"},
        {"query_id": "t2", "condition": "a", "context_doc_ids": ["c3"], "label": "uncertain"},
        {"query_id": "t0", "condition": "a", "context_doc_ids": ["a"], "label": None},
    ]
    out = reader_diagnostics(answers, [T0, T1, T2])
    assert out["a"]["n"] == 2 and out["b"]["n"] == 1 and out["all conditions"]["n"] == 3
