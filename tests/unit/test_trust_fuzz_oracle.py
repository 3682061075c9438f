"""The trust fuzz's answer oracle (``evals/serve_trust_fuzz.py``) where the reader's tenant and the
public each hold a record of one id: an answer names both by that id, so the oracle tries each
record the id may stand for, and still finds an answer no record reproduces."""

from __future__ import annotations

import functools
from typing import Any

import pytest

import serve_trust_fuzz as trust_fuzz  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag import CallerContext
from car_rag.channels.fusion import FusedHit
from car_rag.graph import AuthorityGraph
from car_rag.namespacing import as_shown
from car_rag.policy import Policy
from car_rag.records import Record, tenant_key
from car_rag.resolution import resolve_authority
from car_rag.store.ingest import key_records

ACME = CallerContext("acme")
SCOPE = {"package": "pubpkg0", "cve_id": "CVE-2099-4000"}
SCOPE_IDS = {k: [v] for k, v in SCOPE.items()}
QUERY = "is pubpkg0 still vulnerable to CVE-2099-4000?"
SQUATTED = tenant_key("acme", "pub-r1")


@pytest.fixture
def graph(security_policy: Policy) -> AuthorityGraph:
    """A public disclosure and its public patch ``pub-r1``, and acme's record ``pub-r1`` of the same
    type, scope and date (the fuzz's squat): acme's reader is shown both as ``pub-r1``."""

    def record(doc_id: str, doc_type: str, day: str, tenant: str | None = None) -> Record:
        fields = {"doc_id": doc_id, "doc_type": doc_type, "text": f"{doc_id} {doc_type}", "scope": SCOPE, "published_at": day}
        return Record.model_validate({**fields, "tenant": tenant})

    records = [
        record("pub-r0", "vulnerability_disclosure", "2020-01-01"),
        record("pub-r1", "patch_release", "2021-01-01"),
        record("pub-r1", "patch_release", "2021-01-01", tenant="acme"),
    ]
    built = AuthorityGraph(security_policy)
    for r in key_records(records, {}):
        built.add(r)
    assert set(built.records) == {"pub-r0", "pub-r1", SQUATTED}
    return built


def _candidate(rank: int, score: float) -> dict[str, Any]:
    return {
        "doc_id": "pub-r1",
        "rank": rank,
        "score": score,
        "anchor": True,
        "channels": {"bm25": {"score": 1.0, "contribution": score}},
    }


def _answer(graph: AuthorityGraph, anchor: str) -> dict[str, Any]:
    """What /retrieve answers acme's reader when Stage 1 anchored on the record held as ``anchor``,
    both records of ``pub-r1`` among its candidates."""
    hit = FusedHit(anchor, 0.5, 1, {"bm25": 1.0}, {"bm25": 1}, {"bm25": 0.5})
    result = as_shown(resolve_authority(graph, graph.policy, QUERY, [hit], ACME, scope_ids=SCOPE_IDS))
    return {
        "query": QUERY,
        "reranked": [trust_fuzz._answered(r) for r in result.top(trust_fuzz.ANSWER_K)],
        "candidates": [_candidate(1, 0.5), _candidate(2, 0.25)],
        "diagnostics": {"scope_ids": SCOPE_IDS},
    }


def _reproduced_by(graph: AuthorityGraph, answer: dict[str, Any]) -> list[int]:
    """The choices of anchors (by index) whose reference is the answer."""
    choices = trust_fuzz.anchor_choices(answer, functools.partial(trust_fuzz.anchor_keys, ACME, graph.records))
    return [n for n, _, shown, want in trust_fuzz.references(answer, graph, ACME, choices) if shown == want]


def test_an_answer_anchored_on_the_public_record_of_a_squatted_id_is_reproduced_by_an_alternative(graph) -> None:
    public, squatted = _answer(graph, "pub-r1"), _answer(graph, SQUATTED)
    assert public["reranked"] != squatted["reranked"]  # the two records give different answers
    assert 0 not in _reproduced_by(graph, public) and _reproduced_by(graph, public)  # the first choice is acme's own
    assert _reproduced_by(graph, squatted)[0] == 0


def test_an_answer_no_record_of_the_id_reproduces_is_still_a_change(graph) -> None:
    answer = _answer(graph, "pub-r1")
    voided = next(r for r in answer["reranked"] if r["doc_id"] == "pub-r0")
    voided["status"] = "active" if voided["status"] != "active" else "superseded"
    assert _reproduced_by(graph, answer) == []


def test_unshown_candidates_of_one_id_may_each_be_an_anchor_or_not(graph) -> None:
    answer = {"reranked": [], "candidates": [_candidate(1, 0.5), _candidate(2, 0.25)]}
    choices = trust_fuzz.anchor_choices(answer, functools.partial(trust_fuzz.anchor_keys, ACME, graph.records))
    assert {frozenset(h.doc_id for h in unshown) for ranked, unshown in choices} == {
        frozenset({SQUATTED}),
        frozenset({"pub-r1"}),
        frozenset({SQUATTED, "pub-r1"}),
    }
    assert all(ranked == [] for ranked, _ in choices)


def test_a_ranked_anchor_whose_type_and_date_fit_one_record_names_that_one(graph) -> None:
    answer = _answer(graph, "pub-r1")
    graph.records[SQUATTED] = graph.records[SQUATTED].model_copy(update={"doc_type": "note"})
    choices = trust_fuzz.anchor_choices(answer, functools.partial(trust_fuzz.anchor_keys, ACME, graph.records))
    assert {h.doc_id for ranked, _ in choices for h in ranked} == {"pub-r1"}


def test_two_records_shown_under_one_id_are_each_checked_against_their_own_when_not_in_order(graph) -> None:
    answer = _answer(graph, "pub-r1")
    anchor = [FusedHit("pub-r1", 0.5, 1, {"bm25": 1.0}, {}, {"bm25": 0.5})]
    shown, want = trust_fuzz.unordered(answer, graph, ACME, anchor)
    assert [r["doc_id"] for r in shown["records"]].count("pub-r1") == 2 and shown == want
    twin = next(r for r in answer["reranked"] if r["doc_id"] == "pub-r1" and r["stage1"] is None)
    twin["voids"] = [{"doc_id": "pub-r0", "rule": "patch_fixes_disclosure"}]  # acme's record voiding the public disclosure
    shown, want = trust_fuzz.unordered(answer, graph, ACME, anchor)
    assert shown != want
