"""AuthorityGraph: hop types T0-T3 under every built-in policy, explicit edges, scope,
replacement, removal, cycles, RSSG disambiguation and entity-index lookup."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from car_rag.graph import RSSG, AuthorityGraph, Edge, SupersessionCycleError
from car_rag.policy import load_policy
from helpers_records import edge_set, rec

# --------------------------------------------------------------------------- chains per policy


@dataclass
class Chain:
    """A ⊳-chain A (day 1) <- B (day 2) <- C (day 3) in one scope, and the edges it must produce."""

    policy: str
    scope: dict[str, str]  # shared scope of the chain
    other_scope: dict[str, str]  # a scope the rules must not reach from `scope`
    steps: list[tuple[str, dict[str, Any]]]  # (doc_type, extra fields) for A, B, C
    edges: set[tuple[str, str, str]]  # expected (superseder, target, rule) among A, B, C
    texts: tuple[str, str, str] = (
        "pre-trade request granted for the position described herein",
        "zebra quartz muffin lantern",  # vocabulary-disjoint from A: the graph must not care
        "orchid velvet tundra piston",
    )
    per_step_scope: list[dict[str, str]] = field(default_factory=lambda: [{}, {}, {}])

    def records(self, *, sources=("feed-a", "feed-a", "feed-a"), scope=None, prefix=""):
        scope = self.scope if scope is None else scope
        out = []
        for i, (name, (doc_type, extra)) in enumerate(zip("ABC", self.steps)):
            out.append(
                rec(
                    prefix + name,
                    doc_type,
                    at=i + 1,
                    text=self.texts[i],
                    scope={**scope, **self.per_step_scope[i]},
                    source=sources[i],
                    **extra,
                )
            )
        return out


CHAINS = {
    "drug-regulation": Chain(
        "drug-regulation",
        {"ndc": "0409-4888-02"},
        {"ndc": "0409-4888-03"},
        [("drug_label", {}), ("drug_label", {}), ("recall_enforcement", {})],
        {("B", "A", "label_revision"), ("C", "A", "recall_voids_label"), ("C", "B", "recall_voids_label")},
    ),
    "legal-precedent": Chain(
        "legal-precedent",
        {"case": "roe-v-wade", "question_id": "Q1"},
        {"case": "roe-v-wade", "question_id": "Q2"},
        [("ruling", {}), ("overruling", {}), ("overruling", {})],
        {("B", "A", "overruling_voids_ruling"), ("C", "A", "overruling_voids_ruling"), ("C", "B", "later_overruling")},
    ),
    "sec-204a1": Chain(
        "sec-204a1",
        {"ticker": "ACME"},
        {"ticker": "INIT"},
        [("pre_clearance_approved", {}), ("blackout_announced", {}), ("blackout_lifted", {})],
        # R1 / R2 are 'same ticker': different employees on each step are fine
        {("B", "A", "R1"), ("C", "B", "R2")},
        per_step_scope=[{"employee": "e1"}, {"employee": "e2"}, {"employee": "e3"}],
    ),
    "security-advisory": Chain(
        "security-advisory",
        {"package": "lodash", "cve_id": "CVE-2019-10744"},
        {"package": "lodash", "cve_id": "CVE-2020-8203"},
        [("vulnerability_disclosure", {}), ("patch_release", {"version": "4.17.12"}), ("patch_release", {"version": "4.17.13"})],
        {("B", "A", "patch_fixes_disclosure"), ("C", "A", "patch_fixes_disclosure"), ("C", "B", "later_patch")},
    ),
    "versioned-document": Chain(
        "versioned-document",
        {"document": "travel-policy"},
        {"document": "expense-policy"},
        # any type: the rule is '*' ⊳ '*' by version
        [("policy_doc", {"version": "1.0"}), ("policy_doc", {"version": "1.10"}), ("memo", {"version": "2.0"})],
        {("B", "A", "higher_version"), ("C", "A", "higher_version"), ("C", "B", "higher_version")},
    ),
}

ALL = sorted(CHAINS)


def test_every_builtin_policy_has_a_chain():
    from car_rag.policy import builtin_policies

    assert ALL == builtin_policies()


def _graph(name: str, records=()) -> AuthorityGraph:
    graph = AuthorityGraph(load_policy(name))
    for r in records:
        graph.add(r)
    return graph


# --------------------------------------------------------------------------- T0..T3


@pytest.mark.parametrize("name", ALL)
def test_t0_single_record_is_active(name):
    a = CHAINS[name].records()[0]
    graph = _graph(name)
    assert graph.add(a) == []
    assert len(graph) == 1 and "A" in graph
    assert graph.edges() == []
    assert not graph.is_superseded("A")
    assert graph.closure({"A"}) == {"A"}
    assert graph.frontier({"A"}) == {"A"}
    assert graph.rssg({"A"}).frontier == {"A"}
    assert graph.rssg({"A"}).controlling("A") == []


@pytest.mark.parametrize("name", ALL)
def test_t1_anchor_and_superseder(name):
    chain = CHAINS[name]
    a, b, _ = chain.records()
    graph = _graph(name, [a])
    added = graph.add(b)
    want = {e for e in chain.edges if e[0] in "AB" and e[1] in "AB"}
    assert {(e.superseder, e.target, e.rule) for e in added} == want
    assert edge_set(graph) == want
    assert graph.is_superseded("A") and not graph.is_superseded("B")
    assert [e.superseder for e in graph.superseders("A")] == ["B"]
    assert [e.target for e in graph.superseded_by("B")] == ["A"]
    assert graph.closure({"A"}) == {"A", "B"}
    assert graph.frontier({"A", "B"}) == {"B"}
    assert graph.frontier(graph.closure({"A"})) == {"B"}
    assert graph.rssg({"A", "B"}).controlling("A") == ["B"]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    "sources",
    [("feed-a", "feed-a", "feed-a"), ("court-1", "court-1", "court-9"), ("nvd", "vendor", "mailing-list")],
    ids=["T2-same-source", "T3-cross-provenance", "T3-all-different"],
)
def test_t2_t3_three_hop_chain(name, sources):
    chain = CHAINS[name]
    graph = _graph(name, chain.records(sources=sources))
    assert edge_set(graph) == chain.edges
    assert graph.ancestors("A") == {"B", "C"}
    assert graph.ancestors("B") == {"C"}
    assert graph.ancestors("C") == set()
    assert graph.closure({"A"}) == {"A", "B", "C"}
    assert graph.closure({"B"}) == {"B", "C"}
    assert graph.frontier(graph.closure({"A"})) == {"C"}
    assert graph.frontier({"A", "B", "C"}) == {"C"}
    assert graph.frontier({"A", "B"}) == {"B"}
    assert graph.frontier({"A", "C"}) == {"C"}  # voided through B even though B is not in the set
    rssg = graph.rssg({"A", "B", "C"})
    assert rssg.frontier == {"C"}
    assert rssg.controlling("A") == ["C"]
    assert rssg.controlling("B") == ["C"]
    assert rssg.controlling("C") == []
    assert set(rssg.voided_by) == {"A", "B"}


@pytest.mark.parametrize("name", ALL)
def test_chain_is_independent_of_insertion_order(name):
    chain = CHAINS[name]
    a, b, c = chain.records()
    for order in ([a, b, c], [c, b, a], [b, c, a], [c, a, b]):
        assert edge_set(_graph(name, order)) == chain.edges


@pytest.mark.parametrize("name", ALL)
def test_rssg_through_a_record_outside_the_set(name):
    chain = CHAINS[name]
    graph = _graph(name, chain.records())
    rssg = graph.rssg({"A", "C"})
    assert rssg.frontier == {"C"}
    assert list(rssg.voided_by["A"]) == ["C"]
    assert rssg.controlling("A") == ["C"]
    # the rule reported is the first hop's rule on the path from A
    first_hop_rules = {r for s, t, r in chain.edges if t == "A"}
    assert rssg.voided_by["A"]["C"] in first_hop_rules


@pytest.mark.parametrize("name", ALL)
def test_entity_scope_axiom_different_scopes_never_connect(name):
    chain = CHAINS[name]
    here = chain.records()
    there = chain.records(scope=chain.other_scope, prefix="x")
    graph = _graph(name, [here[0], there[1], there[2], here[1], here[2], there[0]])
    got = edge_set(graph)
    assert {e for e in got if e[0].startswith("x") != e[1].startswith("x")} == set()
    assert {e for e in got if not e[0].startswith("x")} == chain.edges
    assert {(s[1:], t[1:], r) for s, t, r in got if s.startswith("x")} == chain.edges
    assert graph.closure({"A"}) == {"A", "B", "C"}
    assert graph.closure({"xA"}) == {"xA", "xB", "xC"}


@pytest.mark.parametrize("name", ALL)
def test_missing_scope_key_does_not_connect(name):
    chain = CHAINS[name]
    a, b, c = chain.records()
    # the superseders lose every scope key: no rule can reach A
    graph = _graph(name, [a, b.model_copy(update={"scope": {}}), c.model_copy(update={"scope": {}})])
    assert graph.superseders("A") == []
    assert graph.frontier({"A", "B", "C"}) >= {"A"}


# --------------------------------------------------------------------------- sec-204a1 details


def test_sec_r3_needs_same_employee_and_ticker():
    graph = _graph("sec-204a1")
    graph.add(rec("blk", "blackout_announced", at=1, scope={"employee": "alice", "ticker": "ACME"}))
    assert graph.add(rec("exc-bob", "emergency_exception", at=2, scope={"employee": "bob", "ticker": "ACME"})) == []
    assert graph.add(rec("exc-alice-other", "emergency_exception", at=3, scope={"employee": "alice", "ticker": "INIT"})) == []
    assert graph.add(rec("exc-early", "emergency_exception", at=0, scope={"employee": "alice", "ticker": "ACME"})) == []
    added = graph.add(rec("exc-alice", "emergency_exception", at=4, scope={"employee": "alice", "ticker": "ACME"}))
    assert added == [Edge("exc-alice", "blk", "R3")]
    assert edge_set(graph) == {("exc-alice", "blk", "R3")}
    assert graph.frontier(graph.closure({"blk"})) == {"exc-alice"}


def test_sec_r4_r7_r8_r9():
    graph = _graph("sec-204a1")
    s = {"employee": "alice", "ticker": "ACME"}
    graph.add(rec("exc", "emergency_exception", at=1, scope=s))
    graph.add(rec("rev", "exception_revoked", at=2, scope=s))
    graph.add(rec("disc", "conflict_disclosed", at=3, scope={"employee": "alice", "ticker": "X"}))
    graph.add(rec("amend", "conflict_amended", at=4, scope={"employee": "alice", "ticker": "Y"}))
    graph.add(rec("clear", "conflict_cleared", at=5, scope={"employee": "alice"}))
    graph.add(rec("disc-bob", "conflict_disclosed", at=1, scope={"employee": "bob"}))
    assert edge_set(graph) == {
        ("rev", "exc", "R4"),
        ("amend", "disc", "R7"),
        ("clear", "amend", "R8"),
        ("clear", "disc", "R9"),
    }
    assert graph.frontier(graph.closure({"disc"})) == {"clear"}
    assert not graph.is_superseded("disc-bob")


def test_sec_r10_policy_update_voids_every_earlier_acknowledgement():
    graph = _graph("sec-204a1")
    graph.add(rec("ack-alice", "policy_acknowledged", at=1, scope={"employee": "alice", "ticker": "ACME"}))
    graph.add(rec("ack-bob", "policy_acknowledged", at=2, scope={"employee": "bob"}))
    graph.add(rec("ack-noscope", "policy_acknowledged", at=3))
    graph.add(rec("ack-late", "policy_acknowledged", at=9, scope={"employee": "carol"}))
    graph.add(rec("ack-undated", "policy_acknowledged", scope={"employee": "dave"}))
    added = graph.add(rec("upd", "policy_update", at=5))  # no scope at all: R10 is global
    assert {(e.superseder, e.target, e.rule) for e in added} == {
        ("upd", "ack-alice", "R10"),
        ("upd", "ack-bob", "R10"),
        ("upd", "ack-noscope", "R10"),
    }
    # an acknowledgement added afterwards but dated earlier is voided too
    graph.add(rec("ack-backdated", "policy_acknowledged", at=4, scope={"employee": "erin"}))
    assert graph.is_superseded("ack-backdated")
    assert not graph.is_superseded("ack-late") and not graph.is_superseded("ack-undated")
    # a later update voids the acknowledgements that came after the first one, not the update itself
    graph.add(rec("upd2", "policy_update", at=10))
    assert {e.target for e in graph.superseded_by("upd2")} == {"ack-alice", "ack-bob", "ack-noscope", "ack-backdated", "ack-late"}
    assert not graph.is_superseded("upd")
    ids = {"ack-alice", "ack-late", "upd", "upd2"}
    assert graph.frontier(ids) == {"upd", "upd2"}


# --------------------------------------------------------------------------- explicit edges


@pytest.mark.parametrize("name", ALL)
def test_explicit_edges_count_under_any_policy(name):
    graph = _graph(name)
    graph.add(rec("old", "memo", at=5))
    added = graph.add(rec("new", "memo", at=1, supersedes=["old"]))  # earlier date, no scope: still counts
    assert added == [Edge("new", "old", "explicit")]
    assert graph.superseders("old") == [Edge("new", "old", "explicit")]
    assert graph.frontier({"old", "new"}) == {"new"}
    assert graph.rssg({"old", "new"}).voided_by == {"old": {"new": "explicit"}}


@pytest.mark.parametrize("name", ALL)
def test_explicit_edge_to_a_target_ingested_later(name):
    graph = _graph(name)
    assert graph.add(rec("new", "memo", supersedes=["old", "never-seen"])) == []
    assert graph.edges() == []
    added = graph.add(rec("old", "memo"))
    assert added == [Edge("new", "old", "explicit")]
    assert edge_set(graph) == {("new", "old", "explicit")}
    assert graph.closure({"old"}) == {"old", "new"}


def test_explicit_edge_wins_the_label_over_a_rule():
    chain = CHAINS["security-advisory"]
    a, b, _ = chain.records()
    graph = _graph("security-advisory", [a, b.model_copy(update={"supersedes": ["A"]})])
    assert edge_set(graph) == {("B", "A", "explicit")}


def test_pending_explicit_edge_survives_removal_and_readd_of_target():
    graph = _graph("versioned-document")
    graph.add(rec("new", "memo", supersedes=["old"]))
    graph.add(rec("old", "memo"))
    graph.remove("old")
    assert graph.edges() == [] and "old" not in graph
    assert graph.add(rec("old", "memo", text="re-ingested")) == [Edge("new", "old", "explicit")]
    # removing the superseder drops its pending claim too
    graph.remove("new")
    graph.remove("old")
    assert graph.add(rec("old", "memo")) == []


# --------------------------------------------------------------------------- replace / remove


@pytest.mark.parametrize("name", ALL)
def test_replacing_a_record_with_a_new_scope_removes_its_old_edges(name):
    chain = CHAINS[name]
    graph = _graph(name, chain.records())
    assert edge_set(graph) == chain.edges
    a = graph.records["A"]
    moved = a.model_copy(update={"scope": {**a.scope, **chain.other_scope}})
    assert graph.add(moved) == []
    assert len(graph) == 3
    assert graph.records["A"].scope == moved.scope
    assert edge_set(graph) == {e for e in chain.edges if "A" not in e[:2]}
    assert graph.closure({"A"}) == {"A"}
    assert [r.doc_id for r in graph.lookup(chain.scope)] == ["B", "C"]
    assert "A" in {r.doc_id for r in graph.lookup(chain.other_scope)}
    # and back again: the edges return
    graph.add(a)
    assert edge_set(graph) == chain.edges


@pytest.mark.parametrize("name", ALL)
def test_remove(name):
    chain = CHAINS[name]
    graph = _graph(name, chain.records())
    graph.remove("B")
    assert "B" not in graph and len(graph) == 2
    assert edge_set(graph) == {e for e in chain.edges if "B" not in e[:2]}
    assert all(r.doc_id != "B" for r in graph.lookup(chain.scope))
    graph.remove("C")
    graph.remove("A")
    assert len(graph) == 0 and graph.edges() == []
    assert graph.lookup(chain.scope) == []
    with pytest.raises(KeyError):
        graph.remove("A")


def test_replace_keeps_incoming_explicit_edges():
    graph = _graph("legal-precedent")
    graph.add(rec("r1", "ruling", scope={"case": "x", "question_id": "Q1"}))
    graph.add(rec("memo", "note", supersedes=["r1"]))
    graph.add(rec("r1", "ruling", text="corrected text", scope={"case": "x", "question_id": "Q2"}))
    assert edge_set(graph) == {("memo", "r1", "explicit")}


# --------------------------------------------------------------------------- cycles


def test_explicit_two_cycle_is_rejected_and_graph_unchanged():
    graph = _graph("versioned-document")
    graph.add(rec("other", "memo"))
    graph.add(rec("x", "memo", supersedes=["other"]))
    graph.add(rec("A", "memo", supersedes=["B"]))
    before = edge_set(graph)
    with pytest.raises(SupersessionCycleError) as exc:
        graph.add(rec("B", "memo", supersedes=["A"]))
    err = exc.value
    assert err.doc_id == "B"
    assert set(err.cycle) == {"A", "B"} and err.cycle[0] == err.cycle[-1] == "B"
    assert "'B'" in str(err) and "A" in str(err) and "explicit" in str(err)
    assert {(e.superseder, e.target) for e in err.edges} == {("A", "B"), ("B", "A")}
    assert "B" not in graph and len(graph) == 3
    assert edge_set(graph) == before
    # the pending edge A ⊳ B is still waiting for a (non-cyclic) B
    assert graph.add(rec("B", "memo")) == [Edge("A", "B", "explicit")]


def test_explicit_three_cycle_is_rejected():
    graph = _graph("security-advisory")
    graph.add(rec("A", "memo", supersedes=["B"]))
    graph.add(rec("B", "memo", supersedes=["C"]))
    before = edge_set(graph)
    assert before == {("A", "B", "explicit")}
    with pytest.raises(SupersessionCycleError) as exc:
        graph.add(rec("C", "memo", supersedes=["A"]))
    assert set(exc.value.cycle) == {"A", "B", "C"}
    assert len(exc.value.cycle) == 4
    assert len(exc.value.edges) == 3
    for doc_id in "ABC":
        assert doc_id in str(exc.value)
    assert "C" not in graph
    assert edge_set(graph) == before
    assert not any(d in graph.ancestors(d) for d in graph.records)


def test_rule_contradicted_by_explicit_edge_is_rejected():
    scope = {"package": "lodash", "cve_id": "CVE-2019-10744"}
    graph = _graph("security-advisory")
    graph.add(rec("disc", "vulnerability_disclosure", at=1, scope=scope, supersedes=["patch"]))
    with pytest.raises(SupersessionCycleError) as exc:
        graph.add(rec("patch", "patch_release", at=2, scope=scope))
    assert set(exc.value.cycle) == {"disc", "patch"}
    rules = {e.rule for e in exc.value.edges}
    assert rules == {"explicit", "patch_fixes_disclosure"}
    assert "patch" not in graph and graph.edges() == []


def test_rule_contradicted_by_explicit_edge_other_order():
    scope = {"case": "x", "question_id": "Q1"}
    graph = _graph("legal-precedent")
    graph.add(rec("over", "overruling", at=2, scope=scope))
    with pytest.raises(SupersessionCycleError) as exc:
        graph.add(rec("ruling", "ruling", at=1, scope=scope, supersedes=["over"]))
    assert set(exc.value.cycle) == {"over", "ruling"}
    assert list(graph.records) == ["over"] and graph.edges() == []


def test_cyclic_replacement_restores_the_previous_record():
    chain = CHAINS["drug-regulation"]
    graph = _graph("drug-regulation", chain.records())
    before = edge_set(graph)
    old_a = graph.records["A"]
    with pytest.raises(SupersessionCycleError):
        graph.add(old_a.model_copy(update={"supersedes": ["C"]}))
    assert graph.records["A"] is old_a
    assert edge_set(graph) == before
    assert graph.closure({"A"}) == {"A", "B", "C"}
    assert [r.doc_id for r in graph.lookup(chain.scope)] == ["A", "B", "C"]


# --------------------------------------------------------------------------- RSSG


def test_rssg_separates_two_chains_sharing_a_scope_key():
    graph = _graph("legal-precedent")
    graph.add(rec("ruling1", "ruling", at=1, scope={"case": "x", "question_id": "Q1"}))
    graph.add(rec("ruling2", "ruling", at=2, scope={"case": "x", "question_id": "Q2"}))
    graph.add(rec("overruling1", "overruling", at=3, scope={"case": "x", "question_id": "Q1"}))
    graph.add(rec("ruling2b", "ruling", at=4, scope={"case": "x", "question_id": "Q2"}))
    members = {"ruling1", "ruling2", "overruling1", "ruling2b"}
    rssg = graph.rssg(members)
    assert isinstance(rssg, RSSG)
    assert rssg.voided_by == {"ruling1": {"overruling1": "overruling_voids_ruling"}}
    assert rssg.frontier == {"ruling2", "overruling1", "ruling2b"}
    assert rssg.controlling("ruling1") == ["overruling1"]
    assert rssg.controlling("ruling2") == []
    # all four share case 'x': a timestamp-only view would call ruling2b the single frontier
    bucket = graph.lookup({"case": "x"})
    assert [r.doc_id for r in bucket] == ["ruling1", "ruling2", "overruling1", "ruling2b"]
    assert graph.frontier(members) == rssg.frontier


def test_rssg_multiple_controlling_superseders():
    scope = {"ndc": "1234-5678"}
    graph = _graph("drug-regulation")
    graph.add(rec("label", "drug_label", at=1, scope=scope))
    graph.add(rec("recall-a", "recall_enforcement", at=2, scope=scope))
    graph.add(rec("recall-b", "recall_enforcement", at=3, scope=scope))
    rssg = graph.rssg({"label", "recall-a", "recall-b"})
    assert rssg.controlling("label") == ["recall-a", "recall-b"]
    assert rssg.frontier == {"recall-a", "recall-b"}


def test_rssg_members_unknown_to_the_graph_are_active():
    graph = _graph("security-advisory")
    rssg = graph.rssg({"ghost"})
    assert rssg.frontier == {"ghost"} and rssg.voided_by == {}


# --------------------------------------------------------------------------- lookup


def test_lookup_returns_records_oldest_first():
    graph = _graph("security-advisory")
    s = {"package": "lodash", "cve_id": "CVE-2019-10744"}
    graph.add(rec("p3", "patch_release", at=30, scope=s))
    graph.add(rec("undated", "note", scope=s))
    graph.add(rec("d", "vulnerability_disclosure", at=1, scope=s))
    graph.add(rec("p2b", "patch_release", at=20, scope=s))
    graph.add(rec("p2a", "patch_release", at=20, scope=s))
    graph.add(rec("eff", "note", at=40, effective_at=rec("t", at=10).published_at, scope=s))
    graph.add(rec("elsewhere", "patch_release", at=5, scope={"package": "lodash", "cve_id": "CVE-2020-8203"}))
    assert [r.doc_id for r in graph.lookup(s)] == ["undated", "d", "eff", "p2a", "p2b", "p3"]
    assert [r.doc_id for r in graph.lookup({"package": "lodash"})] == ["undated", "d", "elsewhere", "eff", "p2a", "p2b", "p3"]
    assert graph.lookup({"package": "react"}) == []
    assert graph.lookup({}) == []
    assert [r.doc_id for r in graph.scope_bucket(graph.records["d"])] == ["undated", "d", "eff", "p2a", "p2b", "p3"]


# --------------------------------------------------------------------------- version labels


def test_versioned_document_rules_alone_never_form_a_cycle():
    """A label PEP 440 rejects is ordered by its numbers, on the same scale as valid ones:
    "1.0.0-draft" ties with "1.0" (both stay active) and both void "1.0rc1"; no cycle."""
    graph = _graph("versioned-document")
    for i, version in enumerate(["1.0", "1.0rc1", "1.0.0-draft"]):
        graph.add(rec(f"v{i}", "sop", version=version, scope={"document": "D"}))
    assert edge_set(graph) == {("v0", "v1", "higher_version"), ("v2", "v1", "higher_version")}
    assert graph.frontier(graph.records) == {"v0", "v2"}
