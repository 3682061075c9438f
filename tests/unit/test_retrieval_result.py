"""What a retrieval result says beyond statuses, each found untested by a mutation of
car_rag/resolution.py (evals/mutation): an anchor's fused rationale, the JSON form of a
record's edges, the result's accessors, the timestamp baseline, and how Stage 2 orders and
names the chains it admits."""

from __future__ import annotations

import time

import pytest

from car_rag import Policy
from car_rag.channels.fusion import RRF_K
from car_rag.eligibility import CallerContext
from car_rag.graph import AuthorityGraph, Edge
from car_rag.latent_scope import ScopePosterior
from car_rag.policy import _parse
from car_rag.records import Record
from car_rag.resolution import Anchor, ResolutionMode, RetrievedRecord, resolve_authority
from helpers_records import rec, retrieved

TOPIC = {"topic": "t1"}
UNRULED = Policy(name="notes", scope_keys=("topic",))


def _resolve(records: list[Record], anchors: list[str], caller: CallerContext | None = None, **options):
    graph = AuthorityGraph(UNRULED)
    for record in records:
        graph.add(record)
    return resolve_authority(graph, UNRULED, "q", [Anchor(d, i) for i, d in enumerate(anchors, 1)], caller, **options)


def test_an_anchor_is_fused_as_one_ranked_list() -> None:
    first, third = Anchor("a", 1, 0.9, "vector").hit(), Anchor("b", 3).hit()
    assert (first.score, third.score) == (1.0 / (RRF_K + 1), 1.0 / (RRF_K + 3))
    assert (first.channel_scores, first.channel_ranks) == ({"vector": 0.9}, {"vector": 1})
    assert (third.channel_scores, third.channel_ranks) == ({}, {"stage1": 3})


def test_a_record_built_without_saying_otherwise_has_no_hidden_superseder() -> None:
    linked = RetrievedRecord(record=rec("p"), status="superseded", role="superseder", rank=1)
    assert linked.hidden_superseder is False and linked.displaced


def test_edges_as_json_name_the_other_record_and_an_uncertain_confidence_only() -> None:
    sure, weak = Edge("new", "old", "explicit"), Edge("newer", "old", "later_note", 0.4)
    item = RetrievedRecord(
        record=rec("old"),
        status="superseded",
        role="anchor",
        rank=1,
        voided_by=[sure],
        voids=[Edge("old", "older", "explicit")],
        contested_by=[weak],
        disputed_by=[Edge("rival", "old", "r")],
        scope_probability=1 / 3,
    )
    out = item.to_dict()
    assert out["voided_by"] == [{"doc_id": "new", "rule": "explicit"}]
    assert out["voids"] == [{"doc_id": "older", "rule": "explicit"}]
    assert out["contested_by"] == [{"doc_id": "newer", "rule": "later_note", "confidence": 0.4}]
    assert out["disputed_by"] == [{"doc_id": "rival", "rule": "r"}]
    assert out["scope_probability"] == 0.3333


def test_the_results_accessors() -> None:
    result = _resolve([rec("old", at=1, scope=TOPIC), rec("new", at=2, scope=TOPIC, supersedes=["old"])], ["old"])
    assert result.top(0) == [] and result.doc_ids(1) == ["new"] and result.doc_ids() == ["new", "old"]
    with pytest.raises(ValueError, match="k must be >= 0"):
        result.top(-1)
    assert [r.doc_id for r in result.superseded] == ["old"] and [r.doc_id for r in result.active] == ["new"]
    assert result.get("missing") is None


def test_the_timestamp_baseline_voids_every_earlier_record_of_a_scope_and_no_tie() -> None:
    records = [
        rec("first", at=1, scope=TOPIC),
        rec("tie-a", at=2, scope=TOPIC),
        rec("tie-b", at=2, scope=TOPIC),
        rec("elsewhere", at=0, scope={"topic": "t2"}),
    ]
    result = _resolve(records, ["first", "tie-a", "tie-b", "elsewhere"], resolution="timestamp")
    statuses = {r.doc_id: r.status for r in result}
    assert statuses == {"first": "superseded", "tie-a": "active", "tie-b": "active", "elsewhere": "active"}
    assert {e.superseder for e in result.get("first").voided_by} == {"tie-a", "tie-b"}
    assert {e.rule for e in result.get("first").voided_by} == {"later_in_scope"}
    assert _resolve(records, ["tie-a"], resolution="timestamp").doc_ids() == ["tie-a"]  # a tie is not later: not admitted


def test_an_anchor_reached_by_a_better_chain_keeps_its_role_and_joins_that_chain() -> None:
    result = _resolve([rec("old", at=1, scope=TOPIC), rec("new", at=2, scope=TOPIC, supersedes=["old"])], ["old", "new"])
    new = result.get("new")
    assert (new.role, new.anchor_id) == ("anchor", "old")


def test_the_scope_the_question_names_comes_before_the_first_anchor() -> None:
    named, anchored = rec("named", at=1, scope={"topic": "t2"}), rec("anchored", at=5, scope=TOPIC)
    result = _resolve([named, anchored], ["anchored"], scope_ids={"topic": ["t2"]})
    assert result.doc_ids() == ["named", "anchored"]
    assert result.get("named").role == "scope_match"


def test_both_ends_of_an_uncertain_edge_carry_its_confidence() -> None:
    weak = Edge("new", "old", "explicit", 0.7)  # above τ (0.5): it voids
    records = [rec("old", at=1, scope=TOPIC), rec("new", at=2, scope=TOPIC, supersedes=[{"id": "old", "confidence": 0.7}])]
    result = _resolve(records, ["old"])
    assert result.get("new").voids == [weak] and result.get("old").voided_by == [weak]


def test_the_scope_cap_is_twenty_records_by_default() -> None:
    result = _resolve([rec(f"n{day:02d}", at=day, scope=TOPIC) for day in range(25)], [], scope_ids={"topic": ["t1"]})
    assert sorted(result.doc_ids()) == [f"n{day:02d}" for day in range(5, 25)]


@pytest.mark.parametrize(
    ("anchors", "expected"),
    [
        (["hidden"], ["hidden", "named-2", "named-1"]),  # Stage-1 rank 1, after two records of the named scope
        (["first", "hidden"], ["named-1", "hidden", "first"]),  # rank 2, at place 3 behind the named scope's record
    ],
)
def test_an_anchor_voided_only_by_hidden_records_keeps_its_stage1_place(anchors: list[str], expected: list[str]) -> None:
    records = [
        rec("named-1", at=1, scope={"topic": "t2"}),
        rec("first", at=9, scope={"topic": "t3"}),
        rec("hidden", at=1, scope=TOPIC),
        rec("admin-only", at=2, scope=TOPIC, allowed_principals=["admin"], supersedes=["hidden"]),
    ]
    if len(anchors) == 1:
        records.append(rec("named-2", at=2, scope={"topic": "t2"}))
    result = _resolve(records, anchors, CallerContext("globex"), scope_ids={"topic": ["t2"]})
    assert result.doc_ids() == expected
    assert result.get("hidden").hidden_superseder


def test_each_record_carries_its_own_scopes_probability_else_its_anchors() -> None:
    records = [
        rec("anchor", at=1, scope=TOPIC),
        rec("sure", at=2, scope={"topic": "t2"}, supersedes=["anchor"]),
        rec("unseen", at=3, scope={"topic": "t3"}, supersedes=["anchor"]),
    ]
    posterior = ScopePosterior(("topic",), {("t1",): 0.7, ("t2",): 0.2})
    result = _resolve(records, ["anchor"], posterior=posterior)
    assert {r.doc_id: r.scope_probability for r in result} == {"anchor": 0.7, "sure": 0.2, "unseen": 0.7}


def test_the_resolution_time_is_part_of_the_calls_time() -> None:
    started = time.perf_counter()
    result = _resolve([rec("old", at=1, scope=TOPIC), rec("new", at=2, scope=TOPIC, supersedes=["old"])], ["old"])
    took_ms = (time.perf_counter() - started) * 1000
    assert 0 <= result.timings_ms["stage23"] <= took_ms


COURTS = _parse(
    """
name = "courts"
scope_keys = ["question"]
[hierarchies.court]
levels = ["supreme", "district"]
field = "court_level"
[[rules]]
name = "later_ruling"
trigger = "ruling"
target = "ruling"
within = ["question"]
order = "later"
[[rules]]
name = "higher_court"
trigger = "ruling"
target = "ruling"
within = ["question"]
order = "higher_level"
hierarchy = "court"
""",
    ".toml",
    "courts.toml",
)


@pytest.mark.parametrize(("resolution", "expected"), [("rules", ["district", "supreme"]), ("timestamp", ["district"])])
def test_only_rule_resolution_brings_in_the_other_side_of_a_dispute(resolution: ResolutionMode, expected: list[str]) -> None:
    # a later district ruling against an earlier supreme one: chronology and hierarchy disagree (Definition 10)
    graph = AuthorityGraph(COURTS)
    for doc_id, level, day in (("supreme", "supreme", 1), ("district", "district", 2)):
        graph.add(rec(doc_id, "ruling", at=day, scope={"question": "Q1"}, metadata={"court_level": level}))
    result = resolve_authority(graph, COURTS, "q", [Anchor("district", 1)], resolution=resolution)
    assert sorted(result.doc_ids()) == sorted(expected)
    assert bool(retrieved(result, "district").disputed_by) == (resolution == "rules")
