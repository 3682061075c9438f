"""What the authority graph reports beyond its statuses, each found untested by a mutation
(evals/mutation): the confidence every edge listing carries, a lookup naming two scope keys,
a rule over every record type, an explicit edge waiting in a restored graph, and the edges a
cycle error names."""

from __future__ import annotations

import pytest

from car_rag import Policy
from car_rag.graph import AuthorityGraph, Edge, SupersessionCycleError
from car_rag.policy import _parse
from helpers_records import rec

UNRULED = Policy(name="notes", scope_keys=("topic", "part"))


def _graph(*records, policy: Policy = UNRULED) -> AuthorityGraph:
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    return graph


def test_every_edge_listing_carries_the_edge_confidence() -> None:
    graph = _graph(rec("a"), rec("b", supersedes=[{"id": "a", "confidence": 0.3}]), rec("c", supersedes=["b"]))
    weak, sure = Edge("b", "a", "explicit", 0.3), Edge("c", "b", "explicit", 1.0)
    assert sorted(graph.edges(), key=lambda e: e.superseder) == [weak, sure]
    assert graph.superseders("a") == [weak] and graph.superseded_by("b") == [weak]
    assert graph.superseders("b") == [sure] and graph.superseded_by("c") == [sure]
    assert graph.superseded_by("a") == [] and graph.superseders("c") == []  # voids nothing / voided by nothing


def test_a_lookup_naming_two_keys_returns_only_records_with_both() -> None:
    graph = _graph(
        rec("p1-a", scope={"topic": "p1", "part": "a"}),
        rec("p1-b", scope={"topic": "p1", "part": "b"}),
        *(rec(f"p{n}-a", scope={"topic": f"p{n}", "part": "a"}) for n in range(2, 5)),
    )
    assert [r.doc_id for r in graph.lookup({"topic": "p1", "part": "a"})] == ["p1-a"]
    assert [r.doc_id for r in graph.lookup({"part": "a", "topic": "p1"})] == ["p1-a"]


def test_a_rule_over_every_record_type_and_no_shared_scope_links_all_of_them() -> None:
    policy = Policy.model_validate(
        dict(
            name="p",
            scope_keys=("topic",),
            rules=({"name": "newest_notice", "trigger": "notice", "target": "*", "order": "later"},),
        )
    )
    graph = _graph(
        rec("memo", "memo", at=1),
        rec("other-note", "note", at=2, scope={"topic": "x"}),
        rec("notice", "notice", at=3),
        policy=policy,
    )
    assert sorted((e.superseder, e.target) for e in graph.edges()) == [("notice", "memo"), ("notice", "other-note")]


def test_a_restored_graph_links_an_explicit_edge_once_its_target_arrives() -> None:
    built = _graph(rec("b", supersedes=["a"]))
    restored = AuthorityGraph(UNRULED)
    restored.load_edges(built.records.values(), built.edges())
    assert restored.edges() == []
    restored.add(rec("a"))
    assert restored.edges() == [Edge("b", "a", "explicit")]


def test_a_cycle_error_names_every_edge_of_the_cycle_with_its_confidence() -> None:
    graph = _graph(rec("a"), rec("b", supersedes=["a"]), rec("c", supersedes=[{"id": "b", "confidence": 0.6}]))
    with pytest.raises(SupersessionCycleError) as raised:
        graph.add(rec("a", supersedes=["c"]))
    assert raised.value.cycle == ["a", "c", "b", "a"]  # a ⊳ c, b ⊳ a: the new record's edges; c ⊳ b: the graph's
    assert raised.value.edges == [Edge("a", "c", "explicit"), Edge("c", "b", "explicit", 0.6), Edge("b", "a", "explicit")]
    assert graph.edges() != [] and "c" not in {e.target for e in graph.superseders("a")}  # the graph is as it was


def _rssg(*records, tau: float = 0.5, policy: Policy = UNRULED):
    graph = _graph(*records, policy=policy)
    return graph.rssg(graph.records, tau)


def test_every_member_voiding_a_record_is_listed_however_the_paths_meet() -> None:
    # x ⊳-ed by s1 and s2; t voids both, v only s1: reached from s1 after t was already seen through s2
    rssg = _rssg(
        rec("x"),
        rec("s1", supersedes=["x"]),
        rec("s2", supersedes=["x"]),
        rec("t", supersedes=["s1", "s2"]),
        rec("v", supersedes=["s1"]),
    )
    assert set(rssg.voided_by["x"]) == {"s1", "s2", "t", "v"}


def test_every_member_too_unsure_to_void_is_listed_with_its_surest_path() -> None:
    # x ⊳-ed by b (0.8), n (0.3) and m (0.2); n also voids b for certain, so n's surest path to x is 0.8 (through b)
    rssg = _rssg(
        rec("x"),
        rec("b", supersedes=[{"id": "x", "confidence": 0.8}]),
        rec("n", supersedes=[{"id": "x", "confidence": 0.3}, "b"]),
        rec("m", supersedes=[{"id": "x", "confidence": 0.2}]),
        rec("w", supersedes=[{"id": "m", "confidence": 0.9}]),
    )
    assert set(rssg.voided_by["x"]) == {"b", "n"}
    assert rssg.contested_by["x"] == {"m": ("explicit", 0.2), "w": ("explicit", 0.2)}
    assert (rssg.path_confidence[("n", "x")], rssg.path_confidence[("m", "x")]) == (0.8, 0.2)


def test_a_path_no_wider_than_one_found_does_not_stop_the_search_at_that_node() -> None:
    # b's voiders: n (already 0.9 from x directly, so not widened through b), then k, reached only through b
    rssg = _rssg(
        rec("x"),
        rec("b", supersedes=[{"id": "x", "confidence": 0.8}]),
        rec("n", supersedes=[{"id": "x", "confidence": 0.9}, "b"]),
        rec("k", supersedes=["b"]),
    )
    assert set(rssg.voided_by["x"]) == {"b", "n", "k"}
    assert {pair: c for pair, c in rssg.path_confidence.items() if pair[1] == "x"} == {
        ("b", "x"): 0.8,
        ("n", "x"): 0.9,
        ("k", "x"): 0.8,
    }


EXCEPTION = _parse(
    'name = "p"\nscope_keys = ["question"]\n[[rules]]\nname = "emergency_exception"\nkind = "exception"\n'
    'trigger = "exception_grant"\ntarget = "blackout"\nwithin = ["question"]\nrevoked_by = "exception_revocation"\n',
    ".toml",
    "p.toml",
)
Q1 = {"question": "Q1"}


@pytest.mark.parametrize("confidence", [1.0, 0.3])
def test_an_exception_does_not_hide_the_other_records_voiding_its_target(confidence: float) -> None:
    # the blackout's voiders: the grant's exception (suspends it), then a notice, sure or too unsure to void
    rssg = _rssg(
        rec("blackout", "blackout", at=1, scope=Q1),
        rec("grant", "exception_grant", at=2, scope=Q1),
        rec("notice", "notice", at=3, scope=Q1, supersedes=[{"id": "blackout", "confidence": confidence}]),
        policy=EXCEPTION,
    )
    if confidence == 1.0:
        assert rssg.voided_by["blackout"] == {"grant": "emergency_exception", "notice": "explicit"}
    else:
        assert rssg.voided_by["blackout"] == {"grant": "emergency_exception"}
        assert rssg.contested_by["blackout"] == {"notice": ("explicit", 0.3)}
