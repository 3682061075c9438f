"""Probabilistic authority (Definition 9): edges with a confidence, the safe frontier at τ,
contested records and what the evidence says about them."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from car_rag import Policy
from car_rag.adapters import DictStore
from car_rag.evidence import build_packets, render_audit, render_plain, render_reader
from car_rag.evidence.digest import authority_digest
from car_rag.graph import AuthorityGraph, Edge
from car_rag.layout import RecordLayout
from car_rag.policy import PolicyError, _parse
from car_rag.records import Record, parse_records
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, Anchor, resolve_authority
from helpers_records import rec, retrieved

SETTINGS = settings(
    max_examples=int(os.environ.get("CAR_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TOPIC = {"topic": "t1"}


def _policy(confidence: float = 1.0) -> Policy:
    return Policy.model_validate(
        dict(
            name="notes",
            scope_keys=("topic",),
            rules=(
                {
                    "name": "later_note",
                    "trigger": "note",
                    "target": "note",
                    "within": ("topic",),
                    "order": "later",
                    "confidence": confidence,
                    "verb": "replaces",
                },
            ),
        )
    )


def _resolve(records: list[Record], policy: Policy, anchors: list[str], tau: float = DEFAULT_MIN_CONFIDENCE):
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    return resolve_authority(graph, policy, "q", [Anchor(d, i) for i, d in enumerate(anchors, 1)], min_confidence=tau)


# --------------------------------------------------------------------------- the format
def test_a_supersedes_entry_carries_a_confidence_and_round_trips():
    record = rec("b", supersedes=["x", {"id": "a", "confidence": 0.6}, {"id": "y", "confidence": 1}])
    assert record.supersedes == ["x", "a", "y"]
    assert record.supersedes_confidence == {"a": 0.6}  # a confidence of 1 is a plain, certain edge
    assert record.model_dump()["supersedes"] == ["x", {"id": "a", "confidence": 0.6}, "y"]
    assert Record.model_validate_json(record.model_dump_json()) == record
    layout = RecordLayout()
    assert layout.record(layout.metadata(record), record.text, None) == record


def test_certain_edges_keep_the_fingerprint_records_had_before_confidence():
    plain = rec("b", supersedes=["a"])
    assert plain.fingerprint() == rec("b", supersedes=[{"id": "a", "confidence": 1.0}]).fingerprint()
    assert "confidence" not in plain.model_dump_json()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"id": "a", "confidence": 1.5}, "confidence of the edge to 'a' must be a number in [0, 1], got 1.5"),
        ({"id": "a", "confidence": -0.1}, "must be a number in [0, 1]"),
        ({"id": "a", "confidence": True}, "must be a number in [0, 1]"),
        ({"id": "a"}, "must be a number in [0, 1], got None"),
        ({"doc_id": "a", "confidence": 0.5}, "needs exactly 'id' (a doc_id) and 'confidence'"),
    ],
)
def test_a_bad_supersedes_entry_is_reported_with_record_and_field(entry, message):
    report = parse_records([{"doc_id": "b", "text": "t", "doc_type": "note", "supersedes": ["x", entry]}], source="in")
    assert not report.records
    (error,) = report.errors
    assert (error.doc_id, error.field) == ("b", "supersedes")
    assert "entry 1" in error.message and message in error.message


def test_the_derived_confidence_map_is_not_an_input():
    report = parse_records([{"doc_id": "b", "text": "t", "doc_type": "note", "supersedes_confidence": {"a": 0.5}}])
    assert "give an edge's confidence in its supersedes entry" in report.errors[0].message


@pytest.mark.parametrize("value", ["1.5", "-0.2", '"high"'])
def test_a_rule_confidence_outside_the_unit_interval_names_the_policy_field(value):
    text = f'name = "p"\nscope_keys = ["k"]\n[[rules]]\nname = "R"\ntrigger = "a"\ntarget = "b"\nconfidence = {value}\n'
    with pytest.raises(PolicyError, match=r"rules\.0\.confidence"):
        _parse(text, ".toml", "p.toml")


# --------------------------------------------------------------------------- the graph
def test_the_surest_reason_for_a_pair_is_kept():
    policy = _policy(confidence=0.4)
    graph = AuthorityGraph(policy)
    graph.add(rec("old", at=1, scope=TOPIC))
    (edge,) = graph.add(rec("new", at=2, scope=TOPIC, supersedes=[{"id": "old", "confidence": 0.7}]))
    assert edge == Edge("new", "old", "explicit", 0.7)
    graph.remove("new")
    assert graph.add(rec("new", at=2, scope=TOPIC)) == [Edge("new", "old", "later_note", 0.4)]
    graph.remove("new")
    assert graph.edges() == [] and graph._weak == {}


def test_ancestors_at_a_threshold_follow_only_edges_that_sure():
    graph = AuthorityGraph(_policy())
    graph.add(rec("a"))
    graph.add(rec("b", supersedes=[{"id": "a", "confidence": 0.3}]))
    graph.add(rec("c", supersedes=["b"]))
    assert graph.ancestors("a") == {"b", "c"}
    assert graph.ancestors("a", 0.5) == set()
    assert graph.ancestors("b", 0.5) == {"c"}


# --------------------------------------------------------------------------- resolution
def test_a_record_voided_only_by_a_weak_edge_is_active_and_contested():
    records = [rec("a", at=1), rec("b", at=2, supersedes=[{"id": "a", "confidence": 0.3}])]
    result = _resolve(records, _policy(), ["a"])
    a, b = result.get("a"), result.get("b")
    assert (a.status, a.contested, a.voided_by, a.superseded_by) == ("active", True, [], [])
    assert a.contested_by == [Edge("b", "a", "explicit", 0.3)]
    assert b.status == "active" and b.voids == []
    assert result.to_dict()["records"][[r["doc_id"] for r in result.to_dict()["records"]].index("a")]["contested_by"] == [
        {"doc_id": "b", "rule": "explicit", "confidence": 0.3}
    ]
    # At a lower τ the same edge voids.
    low = _resolve(records, _policy(), ["a"], tau=0.2).get("a")
    assert (low.status, low.contested_by, low.voided_by) == ("superseded", [], [Edge("b", "a", "explicit", 0.3)])


def test_a_path_is_as_sure_as_its_weakest_edge():
    records = [
        rec("a", at=1),
        rec("b", at=2, supersedes=[{"id": "a", "confidence": 0.9}]),
        rec("c", at=3, supersedes=[{"id": "b", "confidence": 0.4}]),
    ]
    result = _resolve(records, _policy(), ["a"])
    assert result.get("a").status == "superseded"
    assert result.get("a").voided_by == [Edge("b", "a", "explicit", 0.9)]
    assert result.get("a").contested_by == [Edge("c", "a", "explicit", 0.4)]
    assert result.get("b").contested and result.get("b").contested_by == [Edge("c", "b", "explicit", 0.4)]


def test_a_weak_rule_leaves_its_targets_contested():
    records = [rec("n1", at=1, scope=TOPIC), rec("n2", at=2, scope=TOPIC)]
    result = _resolve(records, _policy(confidence=0.45), ["n1"])
    assert [r.status for r in result] == ["active", "active"]
    assert result.get("n1").contested_by == [Edge("n2", "n1", "later_note", 0.45)]
    assert _resolve(records, _policy(confidence=0.55), ["n1"]).get("n1").status == "superseded"


def test_min_confidence_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"min_confidence must be in \[0, 1\]"):
        _resolve([rec("a")], _policy(), ["a"], tau=1.5)


def test_dict_store_takes_min_confidence_and_rebuilds_contested_records_from_annotations():
    from car_rag.annotations import annotations_for, result_from_annotations

    records = [rec("a", at=1), rec("b", at=2, supersedes=[{"id": "a", "confidence": 0.6}])]
    store = DictStore.of(records)
    assert retrieved(store.resolve(_policy(), "q", ["a"]), "a").status == "superseded"
    result = store.resolve(_policy(), "q", ["a"], min_confidence=0.7)
    assert retrieved(result, "a").contested_by == [Edge("b", "a", "explicit", 0.6)]
    rebuilt = result_from_annotations([(r.record, annotations_for(r, result)) for r in result], query="q", policy=_policy())
    assert retrieved(rebuilt, "a").contested_by == retrieved(result, "a").contested_by


# --------------------------------------------------------------------------- evidence
def _contested_result():
    records = [
        rec("ruling-2001", "ruling", at=1, text="The 2001 ruling holds X."),
        rec(
            "ruling-2010",
            "ruling",
            at=2,
            text="The 2010 ruling questions X.",
            supersedes=[{"id": "ruling-2001", "confidence": 0.6}],
        ),
    ]
    return _resolve(records, _policy(), ["ruling-2001"], tau=0.7)


def test_every_evidence_form_says_possibly_superseded_with_the_confidence():
    result = _contested_result()
    packets = build_packets(result)
    old = next(p for p in packets if p.doc_id == "ruling-2001")
    assert old.is_active and old.contested
    (link,) = old.epistemic_metadata.possibly_superseded_by
    assert (link.doc_id, link.confidence) == ("ruling-2010", 0.6)
    assert old.epistemic_metadata.conflict_indicators.has_contradiction
    assert "possibly superseded by ruling ruling-2010" in old.retrieval_rationale.relevance_rationale
    assert "(confidence 0.60)" in old.retrieval_rationale.relevance_rationale

    (line,) = authority_digest(packets)
    assert "is possibly superseded by the ruling (confidence 0.60)" in line.text
    ref = next(p.evidence_packet_id for p in packets if p.doc_id == "ruling-2010")
    assert f'possibly-replaced-by="{ref} (confidence 0.60)"' in render_reader(result)
    xml = render_audit(result)
    assert "<possibly-superseded-by" in xml and 'confidence="0.6"' in xml
    assert "(ruling; possibly superseded by ruling ruling-2010 (confidence 0.60))" in render_plain(result)


def test_a_weak_edge_that_still_voids_is_shown_with_its_confidence():
    records = [rec("a", at=1), rec("b", at=2, supersedes=[{"id": "a", "confidence": 0.8}])]
    result = _resolve(records, _policy(), ["a"])
    xml = render_audit(result)
    assert 'rule="explicit" confidence="0.8"' in xml
    assert "by an explicit supersedes edge (confidence 0.80)" in xml


# --------------------------------------------------------------------------- properties
CONFIDENCES = [0.1, 0.3, 0.5, 0.6, 0.9, 1.0]


@st.composite
def weighted_corpora(draw, certain: bool = False):
    """Records n0..n(k-1) in one topic or two, each explicitly voiding some earlier ones with a
    drawn confidence; the 'later_note' rule with its own drawn confidence; random anchors."""
    size = draw(st.integers(1, 8))
    pick = st.just(1.0) if certain else st.sampled_from(CONFIDENCES)
    records = []
    for i in range(size):
        targets = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=2, unique=True)) if i else []
        entries = [{"id": f"n{t}", "confidence": draw(pick)} for t in targets]
        # dates rise with the index, as explicit edges do: rules and edges never disagree into a cycle
        records.append(
            rec(
                f"n{i}",
                at=draw(st.sampled_from([None, i])),
                scope={"topic": draw(st.sampled_from(["t1", "t2"]))},
                supersedes=entries,
            )
        )
    anchors = draw(st.lists(st.sampled_from([r.doc_id for r in records]), min_size=1, max_size=3, unique=True))
    return records, draw(pick), anchors


def _statuses(result):
    return {r.doc_id: (r.status, r.voided_by, r.superseded_by, r.voids, r.rank) for r in result}


@SETTINGS
@given(weighted_corpora(certain=True), st.sampled_from([0.0, 0.3, DEFAULT_MIN_CONFIDENCE, 0.9, 1.0]))
def test_with_certain_edges_every_threshold_resolves_as_before(corpus, tau):
    """Reduction to today's closure: confidences of 1 written out change nothing, at any τ."""
    records, rule_confidence, anchors = corpus
    plain = [r.model_copy(update={"supersedes_confidence": {}}) for r in records]
    today = _resolve(plain, _policy(), anchors, tau=0.0)
    now = _resolve(records, _policy(rule_confidence), anchors, tau=tau)
    assert _statuses(now) == _statuses(today)
    assert all(not r.contested_by for r in now)


@SETTINGS
@given(weighted_corpora(), st.sampled_from(CONFIDENCES), st.sampled_from(CONFIDENCES))
def test_raising_the_threshold_never_supersedes_an_active_record(corpus, tau_a, tau_b):
    records, rule_confidence, anchors = corpus
    low, high = sorted((tau_a, tau_b))
    at_low = _resolve(records, _policy(rule_confidence), anchors, tau=low)
    at_high = _resolve(records, _policy(rule_confidence), anchors, tau=high)
    assert {r.doc_id for r in at_low} == {r.doc_id for r in at_high}
    assert {r.doc_id for r in at_low.active} <= {r.doc_id for r in at_high.active}


@SETTINGS
@given(weighted_corpora(), st.sampled_from(CONFIDENCES))
def test_a_record_is_superseded_exactly_when_an_edge_at_tau_voids_it(corpus, tau):
    """The safe frontier, from the records alone: an edge's confidence is its surest reason."""
    records, rule_confidence, anchors = corpus
    by_id = {r.doc_id: r for r in records}

    def confidence(sup: Record, tgt: Record) -> float:
        reasons = [sup.edge_confidence(tgt.doc_id)] if tgt.doc_id in sup.supersedes else []
        if _policy().rules[0].fires(sup, tgt):
            reasons.append(rule_confidence)
        return max(reasons, default=0.0)

    result = _resolve(records, _policy(rule_confidence), anchors, tau=tau)
    for item in result:
        incoming = [confidence(s, by_id[item.doc_id]) for s in records if s.doc_id != item.doc_id]
        assert (item.status == "superseded") == any(c >= tau and c > 0 for c in incoming)
        assert item.contested == (item.status == "active" and any(0 < c for c in incoming))
        assert all(e.confidence < tau for e in item.contested_by)
