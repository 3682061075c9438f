"""Property tests for AuthorityGraph: random record sets under every built-in policy, with
version labels PEP 440 reads and labels it does not, and random explicit edges that may
close cycles."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from car_rag.graph import AuthorityGraph, SupersessionCycleError
from car_rag.policy import WILDCARD, builtin_policies, load_policy
from car_rag.records import Record
from helpers_records import day, edge_set

POLICY_NAMES = builtin_policies()
POLICIES = {name: load_policy(name) for name in POLICY_NAMES}

# PEP 440 labels, and labels it rejects or reads otherwise ("2024-R3" as a post-release,
# "1.0.0-draft" by its numbers, "rev B" with none: ordered against nothing). Mixed, they must
# still order versions transitively, or rules alone could close a cycle.
VERSIONS = [
    "0.9b1", "1.0", "1.1", "1.9", "1.10", "2.0rc1", "2.0", "2024-R2", "2024-R3",
    "v2", "rev B", "rev C", "1.0.0-draft", "Edition 3", "2.0 (final)",
]  # fmt: skip

# 300 examples per property under `make test`; `make test-fast` asks for fewer (the same
# properties, a smaller sample) to keep the unit tier quick while editing.
SETTINGS = settings(
    max_examples=int(os.environ.get("CAR_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _doc_types(policy_name: str) -> list[str]:
    """The types the policy's rules name, plus types no rule names."""
    rules = POLICIES[policy_name].rules
    return sorted({t for rule in rules for t in (rule.trigger, rule.target)} - {WILDCARD}) + ["note", "memo"]


def _scope_choices(policy_name: str) -> list[dict[str, str]]:
    """Every scope over the policy's keys from two values each, including ones missing a key."""
    keys = POLICIES[policy_name].scope_keys
    pools = [(None, f"{key}-1", f"{key}-2") for key in keys]
    return [{k: v for k, v in zip(keys, values) if v is not None} for values in itertools.product(*pools)]


def record_sets(policy_name: str, explicit: bool = True, max_size: int = 9):
    """Lists of 1..max_size records r0, r1, ... drawn from small pools (one flat draw per record)."""
    spec = st.tuples(
        st.sampled_from(_doc_types(policy_name)),
        st.sampled_from(_scope_choices(policy_name)),
        st.sampled_from([None, 0, 1, 2, 3, 4]),
        st.sampled_from([None, *VERSIONS]),
        st.sampled_from(["feed-a", "feed-b"]),
        st.lists(st.integers(0, max_size), max_size=2, unique=True) if explicit else st.just([]),
    )

    def make(specs) -> list[Record]:
        ids = [f"r{i}" for i in range(len(specs))]
        out = []
        for doc_id, (doc_type, scope, at, version, source, targets) in zip(ids, specs):
            # an index past the end names a record never ingested ('ghost'): a dangling edge
            supersedes = [f"r{t}" if t < len(ids) else "ghost" for t in targets]
            out.append(
                Record(
                    doc_id=doc_id,
                    text=f"text {doc_id}",
                    doc_type=doc_type,
                    scope=scope,
                    published_at=None if at is None else day(at),
                    version=version,
                    source=source,
                    supersedes=[t for t in dict.fromkeys(supersedes) if t != doc_id],
                )
            )
        return out

    return st.lists(spec, min_size=1, max_size=max_size).map(make)


def acyclic(graph: AuthorityGraph) -> bool:
    return not any(d in graph.ancestors(d) for d in graph.records)


def build(policy_name: str, records: list[Record]) -> tuple[AuthorityGraph, list[str], list[str]]:
    """Add records one by one, checking the invariants after every add."""
    graph = AuthorityGraph(POLICIES[policy_name])
    accepted, rejected = [], []
    for record in records:
        before = edge_set(graph)
        before_ids = set(graph.records)
        try:
            graph.add(record)
        except SupersessionCycleError as exc:
            assert exc.doc_id == record.doc_id
            assert exc.cycle[0] == exc.cycle[-1] == record.doc_id
            assert record.doc_id not in graph
            assert set(graph.records) == before_ids
            assert edge_set(graph) == before  # a rejected add leaves the graph as it was
            rejected.append(record.doc_id)
        else:
            accepted.append(record.doc_id)
        assert acyclic(graph), "graph has a cycle after a successful add"
    return graph, accepted, rejected


def reference_edges(policy_name: str, records: list[Record]) -> set[tuple[str, str, str]]:
    """Every pairwise edge, computed by brute force from the policy."""
    policy = POLICIES[policy_name]
    out = set()
    for trig in records:
        for targ in records:
            if trig.doc_id != targ.doc_id:
                names = policy.edges_between(trig, targ)
                if names:
                    out.add((trig.doc_id, targ.doc_id, names[0]))
    return out


def subsets(graph: AuthorityGraph):
    return st.sets(st.sampled_from(sorted(graph.records) + ["outsider"]))


policies = pytest.mark.parametrize("policy_name", POLICY_NAMES)


# --------------------------------------------------------------------------- building


@policies
@SETTINGS
@given(data=st.data())
def test_incremental_graph_equals_pairwise_reference(policy_name, data):
    records = data.draw(record_sets(policy_name))
    graph, accepted, _ = build(policy_name, records)
    kept = [r for r in records if r.doc_id in accepted]
    assert edge_set(graph) == reference_edges(policy_name, kept)
    # only explicit edges can be contradicted: the rules alone never reject a record
    for edge in graph.edges():
        assert edge.rule == "explicit" or POLICIES[policy_name].rule(edge.rule) is not None


@policies
@SETTINGS
@given(data=st.data())
def test_rules_alone_never_close_a_cycle(policy_name, data):
    records = data.draw(record_sets(policy_name, explicit=False))
    graph, accepted, rejected = build(policy_name, records)
    assert rejected == []
    assert len(graph) == len(records)


@policies
@SETTINGS
@given(data=st.data())
def test_shuffled_insertion_order_gives_same_edges(policy_name, data):
    records = data.draw(record_sets(policy_name))
    graph, _, rejected = build(policy_name, records)
    shuffled = data.draw(st.permutations(records))
    other, _, other_rejected = build(policy_name, list(shuffled))
    if not rejected:
        # an acyclic full set has acyclic subsets, so no order can be rejected either
        assert other_rejected == []
        assert edge_set(other) == edge_set(graph)
    else:
        assert other_rejected, "one order closed a cycle, the other must too"


@policies
@SETTINGS
@given(data=st.data())
def test_remove_and_readd_restores_edges(policy_name, data):
    records = data.draw(record_sets(policy_name))
    graph, accepted, _ = build(policy_name, records)
    original = edge_set(graph)
    gone = data.draw(st.lists(st.sampled_from(accepted), unique=True)) if accepted else []
    for doc_id in gone:
        graph.remove(doc_id)
        assert doc_id not in graph
    remaining = [r for r in records if r.doc_id in accepted and r.doc_id not in gone]
    assert edge_set(graph) == reference_edges(policy_name, remaining)
    assert all(d not in e[:2] for e in edge_set(graph) for d in gone)
    by_id = {r.doc_id: r for r in records}
    for doc_id in reversed(gone):
        graph.add(by_id[doc_id])  # the full accepted set was acyclic: must not raise
    assert edge_set(graph) == original


@policies
@SETTINGS
@given(data=st.data())
def test_replacing_a_record_equals_building_with_the_new_version(policy_name, data):
    records = data.draw(record_sets(policy_name))
    graph, accepted, _ = build(policy_name, records)
    if not accepted:
        return
    target = data.draw(st.sampled_from(accepted))
    old = graph.records[target]
    fresh = data.draw(record_sets(policy_name))[0]
    new = fresh.model_copy(update={"doc_id": target, "supersedes": [s for s in fresh.supersedes if s != target]})
    before = edge_set(graph)
    try:
        graph.add(new)
    except SupersessionCycleError:
        assert graph.records[target] is old
        assert edge_set(graph) == before
    else:
        kept = [graph.records[d] for d in accepted]
        assert graph.records[target] is new
        assert edge_set(graph) == reference_edges(policy_name, kept)
    assert acyclic(graph)


# --------------------------------------------------------------------------- closure / frontier


@policies
@SETTINGS
@given(data=st.data())
def test_frontier_is_an_antichain_of_unvoided_members(policy_name, data):
    records = data.draw(record_sets(policy_name))
    graph, _, _ = build(policy_name, records)
    s = data.draw(subsets(graph))
    front = graph.frontier(s)
    assert front <= s
    for a in front:
        for b in front:
            assert a not in graph.ancestors(b), f"{a} voids {b} yet both are in the frontier"
    for d in s - front:
        assert graph.ancestors(d) & s, f"{d} dropped from the frontier without a voider in the set"
    for d in s:
        if graph.ancestors(d) & s:
            assert d not in front
    if s:
        assert front, "a non-empty set of an acyclic graph has a non-empty frontier"
    rssg = graph.rssg(s)
    assert rssg.frontier == front
    assert set(rssg.voided_by) == s - front
    for d, voiders in rssg.voided_by.items():
        assert set(voiders) == graph.ancestors(d) & s
        assert set(rssg.controlling(d)) == set(voiders) & front


@policies
@SETTINGS
@given(data=st.data())
def test_closure_is_idempotent_and_upward_closed(policy_name, data):
    records = data.draw(record_sets(policy_name))
    graph, _, _ = build(policy_name, records)
    s = data.draw(subsets(graph))
    closed = graph.closure(s)
    assert s <= closed
    assert graph.closure(closed) == closed
    for d in closed:
        assert graph.ancestors(d) <= closed
    expected = set(s).union(*(graph.ancestors(d) for d in s)) if s else set()
    assert closed == expected
    # the frontier of a closure is never voided by anything in the graph
    for d in graph.frontier(closed):
        assert not graph.ancestors(d)
