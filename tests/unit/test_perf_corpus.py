"""The scale benchmark's generated corpora hold what the benchmark claims of them."""

from __future__ import annotations

from collections import Counter

from car_rag import Record, load_policy
from car_rag.adapters import AuthorityGraph
from car_rag_evals.perf.corpus import ATTACKS, generalised_policy, generate
from helpers_records import policy_rule


def test_generation_is_seeded_and_sized() -> None:
    a, b = generate(3000, seed=3, queries=50), generate(3000, seed=3, queries=50)
    assert a.records == b.records and a.queries == b.queries
    assert len(a) == 3000 == len(a.gists) and len({r["doc_id"] for r in a.records}) == 3000
    assert generate(3000, seed=4).records != a.records


def test_gold_is_the_active_frontier_of_its_chain_and_never_names_the_flaw() -> None:
    corpus = generate(4000, seed=11, queries=120)
    graph = AuthorityGraph(load_policy("security-advisory"))
    for record in corpus.records:
        graph.add(Record(**record))
    phrases = {p.lower() for attack, components, impact, short in ATTACKS for p in (attack, short, impact, *components)}
    depths: Counter[int] = Counter()
    for q in corpus.queries:
        (anchor,), (gold,) = q.anchor_doc_ids, q.gold_doc_ids
        chain = graph.ancestors(anchor)
        assert gold in chain and graph.frontier(chain | {anchor}) == {gold}, q.query_id
        assert graph.records[gold].doc_type == "patch_release"
        text = graph.records[gold].text.lower()
        # A superseder never names the flaw, the component, the impact or the CVE it fixes.
        assert not [p for p in phrases if p in text] and graph.records[gold].scope["cve_id"].lower() not in text
        depths[q.depth] += 1
    assert set(depths) == {1, 2, 3, 4}
    types = Counter(r["doc_type"] for r in corpus.records)
    assert types["maintenance_release"] and types["vulnerability_disclosure"] > types["patch_release"] / 2
    assert any(r.get("supersedes") for r in corpus.records)  # releases that fix a second advisory


def test_the_generalised_perf_policy_exercises_levels_disputes_and_confidences() -> None:
    policy = generalised_policy()
    assert policy_rule(policy, "patch_fixes_disclosure").confidence == 0.8 and "higher_source" in policy.hierarchical_rules
    scope = {"package": "p", "cve_id": "CVE-1"}
    graph = AuthorityGraph(policy)
    for doc_id, doc_type, day, level in (
        ("d", "vulnerability_disclosure", 1, None),
        ("vendor", "patch_release", 2, "vendor"),
        ("community", "patch_release", 3, "community"),
    ):
        graph.add(
            Record.model_validate(
                dict(
                    doc_id=doc_id,
                    text=doc_id,
                    doc_type=doc_type,
                    scope=scope,
                    published_at=f"2024-01-0{day}",
                    metadata={"source_level": level} if level else {},
                )
            )
        )
    assert {(e.superseder, e.target) for e in graph.disputed_edges()} == {("vendor", "community"), ("community", "vendor")}
    assert {e.confidence for e in graph.superseders("d")} == {0.8}
