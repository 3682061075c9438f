"""Multi-authority (Definition 10): hierarchies, level orders, disputes between relations and
exceptions that lapse when revoked; the policy format's errors for them."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from car_rag.evidence import build_packets, render_audit, render_plain, render_reader
from car_rag.evidence.digest import authority_digest
from car_rag.graph import AuthorityGraph, Edge
from car_rag.policy import Policy, PolicyError, _parse
from car_rag.resolution import Anchor, resolve_authority
from helpers_records import policy_rule, rec

SETTINGS = settings(
    max_examples=int(os.environ.get("CAR_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LEVELS = ["supreme", "appellate", "district"]

COURTS = """
name = "courts"
scope_keys = ["question"]

[hierarchies.court]
levels = ["supreme", "appellate", "district"]
field = "court_level"

[[rules]]
name = "later_ruling"
trigger = "ruling"
target = "ruling"
within = ["question"]
order = "later"
description = "A later ruling on the question replaces an earlier one."

[[rules]]
name = "higher_court"
trigger = "ruling"
target = "ruling"
within = ["question"]
order = "higher_level"
hierarchy = "court"
description = "A higher court binds a lower one."

[[rules]]
name = "emergency_exception"
kind = "exception"
trigger = "exception_grant"
target = "blackout"
within = ["question"]
revoked_by = "exception_revocation"
verb = "suspends"
"""


def _courts():
    return _parse(COURTS, ".toml", "courts.toml")


def ruling(doc_id: str, level: str | None, at: int, question: str = "Q1"):
    meta = {"court_level": level} if level else {}
    return rec(doc_id, "ruling", at=at, scope={"question": question}, metadata=meta)


def _resolve(records, anchors, policy=None):
    policy = policy or _courts()
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    return graph, resolve_authority(graph, policy, "q", [Anchor(d, i) for i, d in enumerate(anchors, 1)])


# --------------------------------------------------------------------------- the format
BASE = 'name = "p"\nscope_keys = ["k"]\n'


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            'rules = []\n[hierarchies.c]\nlevels = ["a", "b", "a"]\nfield = "lvl"\n',
            r"hierarchies\.c\.levels: .*repeated: \['a'\]",
        ),
        (
            'rules = []\n[hierarchies.c]\nlevels = ["a", "b"]\nfield = "lvl"\ndefault = "z"\n',
            r"hierarchies\.c: .*default: unknown level 'z'",
        ),
        (
            '[[rules]]\nname = "R"\ntrigger = "a"\ntarget = "a"\norder = "higher_level"\nhierarchy = "c"\n',
            r"rules\.0\.hierarchy: rule 'R' names unknown hierarchy 'c'",
        ),
        ('[[rules]]\nname = "R"\ntrigger = "a"\ntarget = "a"\norder = "higher_level"\n', r"rules\.0: .*hierarchy: a level order"),
        (
            '[[rules]]\nname = "R"\ntrigger = "g"\ntarget = "b"\nkind = "exception"\n',
            r"rules\.0: .*revoked_by: an exception rule",
        ),
        ('[[rules]]\nname = "R"\ntrigger = "g"\ntarget = "b"\nconfidence = 2\n', r"rules\.0\.confidence"),
        (
            '[[rules]]\nname = "R_revoked"\ntrigger = "x"\ntarget = "y"\n[[rules]]\nname = "R"\ntrigger = "g"\n'
            'target = "b"\nkind = "exception"\nrevoked_by = "x"\n',
            r"repeated: \['R_revoked'\]",
        ),
    ],
)
def test_bad_multi_authority_input_is_a_policy_error_naming_the_field(text, where):
    with pytest.raises(PolicyError, match=where):
        _parse(BASE + text, ".toml", "p.toml")


def test_an_exception_rule_brings_its_revocation_rule():
    policy = _courts()
    revocation = policy.rule("emergency_exception_revoked")
    assert (revocation.trigger, revocation.target, revocation.order) == ("exception_revocation", "exception_grant", "later")
    assert policy.exception_rules == {"emergency_exception"}
    assert [r.name for r in policy.rules] == ["later_ruling", "higher_court", "emergency_exception"]


# --------------------------------------------------------------------------- level orders
def test_a_higher_court_binds_a_lower_one_and_a_later_one_of_the_same_level_replaces():
    policy = _parse(COURTS.replace('order = "higher_level"', 'order = "level_then_later"'), ".toml", "c.toml")
    rule = policy_rule(policy, "higher_court")
    supreme, district, district_later = ruling("s", "supreme", 1), ruling("d", "district", 2), ruling("d2", "district", 3)
    assert policy.fires(rule, supreme, district) and not policy.fires(rule, district, supreme)
    assert policy.fires(rule, district_later, district) and not policy.fires(rule, district, district_later)
    assert not policy.fires(rule, ruling("x", None, 5), district)  # no level: unordered
    strict = policy_rule(_courts(), "higher_court")
    assert not _courts().fires(strict, district_later, district)


def test_a_default_level_orders_records_without_one():
    policy = _parse(COURTS.replace('field = "court_level"', 'field = "court_level"\ndefault = "district"'), ".toml", "c")
    assert policy.fires(policy_rule(policy, "higher_court"), ruling("s", "supreme", 1), ruling("x", None, 2))


# --------------------------------------------------------------------------- disputes
def test_relations_that_disagree_dispute_the_pair_and_both_records_stay_current():
    # A later district ruling against an earlier supreme one: chronology says district,
    # the hierarchy says supreme.
    graph, result = _resolve([ruling("supreme-2001", "supreme", 1), ruling("district-2010", "district", 2)], ["district-2010"])
    assert graph.edges() == []
    assert sorted(graph.disputed_edges(), key=lambda e: e.rule) == [
        Edge("supreme-2001", "district-2010", "higher_court"),
        Edge("district-2010", "supreme-2001", "later_ruling"),
    ]
    assert [r.status for r in result] == ["active", "active"]  # Stage 2 brought the supreme ruling in
    assert result.get("district-2010").disputed_by == [Edge("supreme-2001", "district-2010", "higher_court")]
    assert result.get("supreme-2001").disputed_by == [Edge("district-2010", "supreme-2001", "later_ruling")]

    xml = render_audit(result)
    assert '<conflict-group kind="disputed-authority" scope="question=Q1">' in xml
    assert '<relation rule="higher_court"' in xml and '<relation rule="later_ruling"' in xml
    assert "by rule higher_court (A higher court binds a lower one) ruling supreme-2001 supersedes ruling district-2010" in xml
    (line,) = authority_digest(build_packets(result), result.policy)
    assert line.state == "disputed" and "Q1: authority disputed: by rule" in line.text
    assert 'disputed-with="EP-' in render_reader(result)
    assert "authority disputed by ruling supreme-2001 (rule higher_court)" in render_plain(result)


def test_where_the_relations_agree_the_higher_later_ruling_voids():
    _, result = _resolve([ruling("district-2001", "district", 1), ruling("supreme-2010", "supreme", 2)], ["district-2001"])
    district = result.get("district-2001")
    assert district.status == "superseded" and district.disputed_by == []
    assert {e.rule for e in district.voided_by} == {"later_ruling"}  # the first reason found for the pair


RULINGS = st.lists(st.tuples(st.sampled_from([*LEVELS, None]), st.integers(0, 4)), min_size=1, max_size=7)


@SETTINGS
@given(RULINGS, st.data())
def test_every_disagreement_between_relations_is_reported_and_never_a_cycle(specs, data):
    records = [ruling(f"r{i}", level, at) for i, (level, at) in enumerate(specs)]
    anchors = data.draw(st.lists(st.sampled_from([r.doc_id for r in records]), min_size=1, unique=True))
    graph, result = _resolve(records, anchors)  # no SupersessionCycleError: disagreements are disputes
    rank = {lvl: i for i, lvl in enumerate(LEVELS)}
    disputed = {(e.superseder, e.target) for e in graph.disputed_edges()}
    for a, b in itertools.permutations(records, 2):
        later = a.time > b.time
        higher = (
            a.metadata.get("court_level")
            and b.metadata.get("court_level")
            and rank[a.metadata["court_level"]] > rank[b.metadata["court_level"]]
        )
        if later and higher:  # a is later, b is higher: the relations disagree
            assert (a.doc_id, b.doc_id) in disputed and (b.doc_id, a.doc_id) in disputed
            if a.doc_id in {r.doc_id for r in result} and b.doc_id in {r.doc_id for r in result}:
                assert Edge(b.doc_id, a.doc_id, "higher_court") in result.get(a.doc_id).disputed_by
    # An edge is linked only where no relation orders the pair the other way.
    for e in graph.edges():
        assert (e.target, e.superseder) not in disputed
        assert Edge(e.target, e.superseder, "higher_court") not in graph.superseders(e.superseder)


# --------------------------------------------------------------------------- exceptions
def test_an_exception_suspends_its_target_until_it_is_revoked():
    blackout = rec("blackout", "blackout", at=1, scope={"question": "Q1"})
    grant = rec("grant", "exception_grant", at=2, scope={"question": "Q1"})
    _, result = _resolve([blackout, grant], ["blackout"])
    assert result.get("blackout").status == "superseded"
    assert result.get("blackout").voided_by == [Edge("grant", "blackout", "emergency_exception")]

    revocation = rec("revocation", "exception_revocation", at=3, scope={"question": "Q1"})
    _, result = _resolve([blackout, grant, revocation], ["blackout"])
    assert result.get("grant").status == "superseded"
    assert result.get("grant").voided_by == [Edge("revocation", "grant", "emergency_exception_revoked")]
    assert result.get("blackout").status == "active"  # the exception lapsed: the blackout controls again
    assert result.get("blackout").voided_by == []  # the revocation voids the exception, not the blackout


def test_a_revocation_dated_before_the_grant_revokes_nothing():
    records = [
        rec("blackout", "blackout", at=1, scope={"question": "Q1"}),
        rec("revocation", "exception_revocation", at=2, scope={"question": "Q1"}),
        rec("grant", "exception_grant", at=3, scope={"question": "Q1"}),
    ]
    _, result = _resolve(records, ["blackout"])
    assert result.get("blackout").status == "superseded" and result.get("grant").status == "active"


# --------------------------------------------------------------------------- built-in upgrades
def _upgraded(name: str, rule: str):
    """A built-in policy and the same policy as it was before ``rule`` (and its hierarchy) was added."""
    from car_rag.policy import load_policy

    policy = load_policy(name)
    added = policy_rule(policy, rule)
    before = Policy.model_validate(
        {  # validated afresh: a model_copy would keep the cached edge rules
            **policy.model_dump(),
            "rules": [r.model_dump() for r in policy.rules if r.name != rule],
            "hierarchies": {k: h.model_dump() for k, h in policy.hierarchies.items() if k != added.hierarchy},
        }
    )
    return policy, before


def _statuses(records, policy):
    _, result = _resolve(records, [r.doc_id for r in records], policy)
    return {r.doc_id: (result.get(r.doc_id).status, result.get(r.doc_id).voided_by) for r in records}


def test_drug_regulation_a_more_serious_recall_class_controls_whatever_the_dates():
    policy, before = _upgraded("drug-regulation", "higher_recall_class")

    def recall(doc_id, klass, at):
        return rec(
            doc_id, "recall_enforcement", at=at, scope={"ndc": "0054-0100-25"}, metadata={"recall_class": klass} if klass else {}
        )

    label = rec("label", "drug_label", at=0, scope={"ndc": "0054-0100-25"})
    upgraded = _statuses([label, recall("class-i", "I", 1), recall("class-iii", "III", 2)], policy)
    assert upgraded["class-iii"] == ("superseded", [Edge("class-i", "class-iii", "higher_recall_class")])
    assert upgraded["class-i"] == ("active", [])
    # Records without a class resolve exactly as under the policy before recall classes.
    plain = [
        label,
        recall("r1", None, 1),
        recall("r2", None, 2),
        rec("label2", "drug_label", at=3, scope={"ndc": "0054-0100-25"}),
    ]
    assert _statuses(plain, policy) == _statuses(plain, before)


def test_sec_204a1_a_trading_exception_suspends_a_blackout_until_revoked():
    policy, before = _upgraded("sec-204a1", "blackout_exception")
    scope = {"employee": "E1", "ticker": "ACME"}
    blackout = rec("blackout", "blackout_announced", at=1, scope=scope)  # addressed to the employee
    grant = rec("grant", "trading_exception_granted", at=2, scope=scope)
    assert _statuses([blackout, grant], policy)["blackout"] == ("superseded", [Edge("grant", "blackout", "blackout_exception")])
    revoked = _statuses([blackout, grant, rec("revoke", "trading_exception_revoked", at=3, scope=scope)], policy)
    assert revoked["blackout"] == ("active", []) and revoked["grant"][0] == "superseded"
    # The paper's R3/R4 records resolve exactly as before the exception rule.
    paper = [
        blackout,
        rec("emergency", "emergency_exception", at=2, scope=scope),
        rec("revoked", "exception_revoked", at=3, scope=scope),
    ]
    assert _statuses(paper, policy) == _statuses(paper, before)
