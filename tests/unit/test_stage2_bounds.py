"""Stage 2 at its bounds: the scope cap keeps the newest records a query names, and the
confidence threshold τ decides both what voids and what hides (an edge exactly at τ counts;
one below it neither voids a record nor hides it behind a superseder the caller cannot read)."""

from __future__ import annotations

import pytest

from car_rag import Policy
from car_rag.eligibility import CallerContext
from car_rag.graph import AuthorityGraph
from car_rag.records import Record
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, Anchor, resolve_authority
from helpers_records import rec, retrieved

TOPIC = {"topic": "t1"}
UNRULED = Policy(name="notes", scope_keys=("topic",))
"""No rule links records: what Stage 2 admits is what the scope lookup and the anchors give."""
TAU = DEFAULT_MIN_CONFIDENCE


def _graph(records: list[Record], policy: Policy = UNRULED) -> AuthorityGraph:
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    return graph


# --------------------------------------------------------------------------- the scope cap
def test_the_scope_cap_keeps_the_newest_records_of_the_named_scope() -> None:
    records = [rec(f"n{day:02d}", at=day, scope=TOPIC) for day in range(25)]
    graph = _graph(records[::-1])  # stored in no particular order: the lookup orders them
    result = resolve_authority(graph, UNRULED, "q", [], scope_ids={"topic": ["t1"]}, scope_lookup_limit=20)
    assert sorted(r.doc_id for r in result) == [f"n{day:02d}" for day in range(5, 25)]


def test_the_scope_cap_counts_only_records_the_caller_may_read() -> None:
    readable = [rec(f"n{day:02d}", at=day, scope=TOPIC) for day in range(10)]
    private = [rec(f"p{day:02d}", at=day, scope=TOPIC, tenant="acme") for day in range(10, 20)]  # newer, not globex's
    result = resolve_authority(
        _graph(readable + private), UNRULED, "q", [], CallerContext("globex"), scope_ids={"topic": ["t1"]}, scope_lookup_limit=5
    )
    assert sorted(r.doc_id for r in result) == [f"n{day:02d}" for day in range(5, 10)]


# --------------------------------------------------------------------------- τ: an edge exactly at it counts
def test_an_edge_exactly_at_the_threshold_is_followed_and_voids() -> None:
    records = [rec("old", at=1, scope=TOPIC), rec("new", at=2, scope=TOPIC, supersedes=[{"id": "old", "confidence": TAU}])]
    graph = _graph(records)
    assert graph.ancestors("old", TAU) == {"new"}
    assert graph.ancestors("old", TAU + 0.01) == set()
    old = retrieved(resolve_authority(graph, UNRULED, "q", [Anchor("old", 1)], min_confidence=TAU), "old")
    assert (old.status, old.superseded_by) == ("superseded", ["new"])


# --------------------------------------------------------------------------- τ and what a caller cannot read
@pytest.mark.parametrize(
    ("confidence", "status", "hidden"),
    [
        (1.0, "superseded", True),  # a certain voider the caller cannot read: superseded, by someone hidden
        (TAU, "superseded", True),  # exactly at τ: as certain as needed
        (TAU - 0.2, "active", False),  # below τ it voids nothing, so it hides nothing either
    ],
)
def test_a_hidden_superseder_voids_only_at_the_threshold(confidence: float, status: str, hidden: bool) -> None:
    records = [
        rec("public", at=1, scope=TOPIC),
        rec(
            "admin-only", at=2, scope=TOPIC, allowed_principals=["admin"], supersedes=[{"id": "public", "confidence": confidence}]
        ),
    ]
    result = resolve_authority(_graph(records), UNRULED, "q", [Anchor("public", 1)], CallerContext("globex"), min_confidence=TAU)
    assert [r.doc_id for r in result] == ["public"]  # the caller never sees the other
    public = retrieved(result, "public")
    assert (public.status, public.hidden_superseder, public.superseded_by) == (status, hidden, [])
