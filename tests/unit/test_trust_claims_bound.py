"""The bound on untrusted claims (issue 32): one write keeps at most ``trust.claims_per_write``
claims per pair of tenants, so one writer cannot grow the graph, or what readers are shown as
``disputed_by``, without bound; trusted edges and disputes are never dropped."""

from __future__ import annotations

from typing import Any

from car_rag import CallerContext, load_policy
from car_rag.graph import AuthorityGraph
from car_rag.records import Record
from car_rag.resolution import Anchor, resolve_authority
from car_rag.trust import Trust
from helpers_records import rec

SCOPE = {"package": "lodash", "cve_id": "CVE-2019-10744"}


def _policy(cap: int):
    policy = load_policy("security-advisory")
    return policy.model_copy(update={"trust": Trust(claims_per_write=cap)})


def _disclosure(doc_id: str, at: int, **governance: Any) -> Record:
    return rec(doc_id, "vulnerability_disclosure", at=at, scope=SCOPE, **governance)


def _patch(doc_id: str, at: int, **governance: Any) -> Record:
    return rec(doc_id, "patch_release", at=at, scope=SCOPE, **governance)


def _graph(cap: int, *records: Record) -> AuthorityGraph:
    graph = AuthorityGraph(_policy(cap))
    for record in records:
        graph.add(record)
    return graph


def _untrusted(graph: AuthorityGraph) -> list[tuple[str, str]]:
    return sorted((e.superseder, e.target) for e in graph.disputed_edges() if e.untrusted)


def test_one_write_keeps_at_most_the_cap_of_its_claims_the_newest_first() -> None:
    victims = [_disclosure(f"globex-d{n}", at=n, tenant="globex") for n in range(6)]
    graph = _graph(2, *victims, _patch("acme-p", at=100, tenant="acme"))
    assert _untrusted(graph) == [("acme-p", "globex-d4"), ("acme-p", "globex-d5")]
    assert len(graph.claims_by(_patch("acme-q", at=101, tenant="acme"))) == 6


def test_claims_over_a_new_record_are_bounded_alike() -> None:
    attackers = [_patch(f"acme-p{n}", at=100 + n, tenant="acme") for n in range(5)]
    graph = _graph(3, *attackers, _disclosure("globex-d", at=0, tenant="globex"))
    assert _untrusted(graph) == [("acme-p2", "globex-d"), ("acme-p3", "globex-d"), ("acme-p4", "globex-d")]


def test_another_tenants_claims_never_crowd_out_the_ones_a_reader_is_shown() -> None:
    # globex's patches claim over a public disclosure, and so do acme's: each tenant's count apart.
    public = _disclosure("pub-d", at=0)
    mine = [_patch(f"globex-p{n}", at=10 + n, tenant="globex") for n in range(2)]
    theirs = [_patch(f"acme-p{n}", at=50 + n, tenant="acme") for n in range(5)]
    with_theirs = _graph(2, *mine, *theirs, public)
    without = _graph(2, *mine, public)
    reader = CallerContext("globex")
    shown = [resolve_authority(g, g.policy, "q", [Anchor("pub-d", 1)], reader).get("pub-d") for g in (with_theirs, without)]
    assert [[e.superseder for e in item.disputed_by] if item else None for item in shown] == [["globex-p0", "globex-p1"]] * 2


def test_trusted_edges_are_never_bounded() -> None:
    patches = [_patch(f"acme-p{n}", at=10 + n, tenant="acme") for n in range(4)]
    graph = _graph(0, _disclosure("acme-d", at=0, tenant="acme"), *patches)
    assert len(graph.superseders("acme-d")) == 4 and _untrusted(graph) == []


def test_a_cap_of_zero_records_no_claim_and_voids_nothing() -> None:
    graph = _graph(0, _disclosure("globex-d", at=0, tenant="globex"), _patch("acme-p", at=5, tenant="acme"))
    assert _untrusted(graph) == [] and graph.edges() == []


def test_a_record_holds_at_most_the_cap_of_one_tenants_claims_however_many_writes() -> None:
    attackers = [_patch(f"acme-p{n}", at=100 + n, tenant="acme") for n in range(5)]
    graph = _graph(2, _disclosure("globex-d", at=0, tenant="globex"), *attackers)
    assert _untrusted(graph) == [("acme-p0", "globex-d"), ("acme-p1", "globex-d")]  # the first that came
    graph.add(_patch("pub-p", at=200))  # public, from no publisher: counted apart from acme's
    assert ("pub-p", "globex-d") in _untrusted(graph)
