"""Latent-scope CAR on hand-made ambiguous questions: the posterior, observed scope ids,
anchors that cover the probable scopes, the ambiguity a result reports, and the probability
every record and rendering carries. No model, no Chroma: the candidates are constructed
fused hits."""

from __future__ import annotations

import math

import pytest

from car_rag import CallerContext, Record, load_policy
from car_rag.adapters import AuthorityGraph, resolve_authority
from car_rag.channels.fusion import FusedHit
from car_rag.evidence import render_audit, render_plain, render_reader
from car_rag.latent_scope import detect_ambiguity, estimate_scope_posterior, read_question_scope, select_anchors
from car_rag.policy import Policy, Rule

SEC = load_policy("security-advisory")
ATTACK = "Prototype pollution in the merge function lets a remote attacker change object prototypes."


def disclosure(pkg: str, cve: str, **fields) -> Record:
    return Record.model_validate(
        dict(
            doc_id=f"{pkg}-disclosure",
            text=ATTACK,
            doc_type="vulnerability_disclosure",
            scope={"package": pkg, "cve_id": cve},
            published_at="2024-01-01",
            **fields,
        )
    )


def patch(pkg: str, cve: str, **fields) -> Record:
    return Record.model_validate(
        dict(
            doc_id=f"{pkg}-patch",
            text="Release 2.0.1: maintenance.",
            doc_type="patch_release",
            scope={"package": pkg, "cve_id": cve},
            version="2.0.1",
            published_at="2024-02-01",
            **fields,
        )
    )


def graph_of(*records: Record, policy: Policy = SEC) -> AuthorityGraph:
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    return graph


def hits(*scored: tuple[str, float]) -> list[FusedHit]:
    return [FusedHit(d, s, r) for r, (d, s) in enumerate(scored, 1)]


TWO = graph_of(disclosure("alpha", "CVE-2024-1001"), disclosure("beta", "CVE-2024-1002"), patch("alpha", "CVE-2024-1001"))
QUESTION = "Is the prototype pollution in merge still unpatched?"


def test_two_packages_sharing_an_attack_description_split_the_posterior():
    posterior = estimate_scope_posterior(hits(("alpha-disclosure", 0.4), ("beta-disclosure", 0.4)), TWO, SEC, {})
    assert posterior.probability(TWO.records["alpha-disclosure"]) == pytest.approx(0.5)
    assert posterior.probability(TWO.records["beta-disclosure"]) == pytest.approx(0.5)
    assert math.isclose(sum(posterior.probabilities.values()), 1.0)
    assert [row["probability"] for row in posterior.to_dict()] == [0.5, 0.5]


def named_scope_ids(question, policy, graph, readable=None, candidates=()):
    return read_question_scope(question, list(candidates), graph, policy, readable=readable).named


def test_a_scope_the_question_names_alone_has_probability_one_and_a_described_one_keeps_its_place():
    question = "Is CVE-2024-1002 fixed, and the merge pollution?"
    candidates = hits(("alpha-disclosure", 0.6), ("beta-disclosure", 0.4))
    scope = read_question_scope(question, candidates, TWO, SEC)
    assert scope.named == {"cve_id": ["CVE-2024-1002"]}
    assert scope.posterior.probability(TWO.records["beta-disclosure"]) == pytest.approx(1.0)
    assert scope.posterior.probability(TWO.records["alpha-disclosure"]) == pytest.approx(0.0)
    anchors = select_anchors(candidates, scope.posterior, TWO, SEC, k1=10)
    assert [a.doc_id for a in anchors] == ["beta-disclosure", "alpha-disclosure"]  # the described one still an anchor


def test_a_named_scope_stage1_missed_is_not_left_at_zero():
    named = {"cve_id": ["CVE-2024-1002"]}
    posterior = estimate_scope_posterior(hits(("alpha-disclosure", 1.0)), TWO, SEC, named)
    assert posterior.probability(TWO.records["beta-disclosure"]) == pytest.approx(1.0)


def test_two_named_scopes_share_the_probability_by_stage1_evidence():
    named = {"cve_id": ["CVE-2024-1001", "CVE-2024-1002"]}
    posterior = estimate_scope_posterior(hits(("alpha-disclosure", 0.6), ("beta-disclosure", 0.2)), TWO, SEC, named)
    alpha, beta = (posterior.probability(TWO.records[d]) for d in ("alpha-disclosure", "beta-disclosure"))
    assert alpha is not None and beta is not None
    assert alpha + beta == pytest.approx(1.0)
    assert alpha > beta > 0


FIN = Policy(
    name="fin",
    scope_keys=("employee", "ticker"),
    rules=(Rule(name="R1", trigger="blackout_announced", target="pre_clearance_approved", within=("employee", "ticker")),),
)
FIN_GRAPH = graph_of(
    Record(
        doc_id="ok",
        text="Compliance approved EMP030-Harris's request to trade C.",
        doc_type="pre_clearance_approved",
        scope={"employee": "EMP030-Harris", "ticker": "C"},
    ),
    Record(
        doc_id="other",
        text="Compliance approved EMP030-Harris's request to trade GE.",
        doc_type="pre_clearance_approved",
        scope={"employee": "EMP030-Harris", "ticker": "GE"},
    ),
    policy=FIN,
)


@pytest.mark.parametrize(
    ("question", "named"),
    [
        ("Does EMP030-Harris's C transaction pass compliance review?", {"employee": ["EMP030-Harris"], "ticker": ["C"]}),
        ("Is the C trade of EMP030-Harris still cleared?", {"employee": ["EMP030-Harris"], "ticker": ["C"]}),
        ("Is the C trade still cleared?", {}),  # one key of two: not a scope, and would pull in every C record
        ("Does EMP999-Nobody's C transaction pass?", {}),  # not a value the store holds
        ("Does EMP030-Harris's GE transaction pass?", {"employee": ["EMP030-Harris"], "ticker": ["GE"]}),
        ("Does EMP030-Harris's UNH transaction pass?", {}),  # values held, but by no record together
        ("Does EMP030-Harris's c transaction pass?", {}),  # identifiers are matched verbatim
    ],
)
def test_identifier_like_values_the_store_holds_name_a_scope_when_they_name_all_of_it(question, named):
    assert named_scope_ids(question, FIN, FIN_GRAPH) == named


def tied_scopes(n_vulnerable: int) -> AuthorityGraph:
    records = [disclosure(f"p{i}", f"CVE-2024-{2000 + i}") for i in range(n_vulnerable)]
    records += [disclosure("fixed", "CVE-2024-3000"), patch("fixed", "CVE-2024-3000")]
    return graph_of(*records)


def test_scopes_the_question_cannot_tell_apart_each_get_an_anchor_in_an_order_blind_to_their_state():
    graph = tied_scopes(6)
    # Seven near-identical disclosures, BM25-style noise in the third decimal; one is patched.
    candidates = hits(*[(f"p{i}-disclosure", 0.1 - 0.001 * i) for i in range(6)], ("fixed-disclosure", 0.094))
    posterior = estimate_scope_posterior(candidates, graph, SEC, {})
    anchors = select_anchors(candidates, posterior, graph, SEC, k1=10)
    # Stage-1 score decides: the patched scope keeps its seventh place; its state does not pull it up.
    assert [a.doc_id for a in anchors] == [c.doc_id for c in candidates]
    assert [a.rank for a in anchors] == list(range(1, 8))
    assert "fixed-patch" not in resolve_authority(graph, SEC, QUESTION, anchors, posterior=posterior).doc_ids(5)
    # The order of issue 22 is still there to be measured, only when asked for.
    by_state = select_anchors(candidates, posterior, graph, SEC, k1=10, tie_order="state")
    assert [a.doc_id for a in by_state][:2] == ["p0-disclosure", "fixed-disclosure"]


def test_exact_ties_are_ordered_by_newest_then_a_hash_never_by_how_stage1_listed_them():
    records = [disclosure(f"p{i}", f"CVE-2024-{2000 + i}") for i in range(5)]
    records.append(
        Record.model_validate(
            dict(
                doc_id="newer-disclosure",
                text=ATTACK,
                doc_type="vulnerability_disclosure",
                scope={"package": "newer", "cve_id": "CVE-2024-2999"},
                published_at="2024-06-01",
            )
        )
    )
    graph = graph_of(*records)
    scored = [(r.doc_id, 0.1) for r in records]
    forward, backward = hits(*scored), hits(*reversed(scored))
    orders = []
    for candidates in (forward, backward):
        posterior = estimate_scope_posterior(candidates, graph, SEC, {})
        orders.append([a.doc_id for a in select_anchors(candidates, posterior, graph, SEC, k1=10)])
    assert orders[0] == orders[1]
    assert orders[0][0] == "newer-disclosure"
    assert sorted(orders[0]) == sorted(r.doc_id for r in records)


def test_the_caller_cannot_learn_a_hidden_state_from_the_order():
    graph = tied_scopes(6)
    restricted = patch("fixed", "CVE-2024-3000", tenant="acme")
    graph.add(restricted)
    caller = CallerContext("other")
    candidates = hits(*[(f"p{i}-disclosure", 0.1) for i in range(6)], ("fixed-disclosure", 0.1))
    posterior = estimate_scope_posterior(candidates, graph, SEC, {})
    for order in ("score", "state"):
        seen = select_anchors(candidates, posterior, graph, SEC, k1=10, tie_order=order, readable=caller.can_read)
        public = select_anchors(
            candidates, posterior, graph_of(*[r for r in graph.records.values() if r.tenant is None]), SEC, k1=10, tie_order=order
        )
        assert [a.doc_id for a in seen] == [a.doc_id for a in public]
    ambiguity = detect_ambiguity(candidates, posterior, graph, SEC, margin=0.5, readable=caller.can_read)
    assert ambiguity is not None and ambiguity.states == {"vulnerable": 7}


def test_an_ambiguous_question_reports_its_scopes_states_and_probabilities():
    graph = tied_scopes(6)
    candidates = hits(*[(f"p{i}-disclosure", 0.1 - 0.001 * i) for i in range(6)], ("fixed-disclosure", 0.094))
    posterior = estimate_scope_posterior(candidates, graph, SEC, {})
    ambiguity = detect_ambiguity(candidates, posterior, graph, SEC, margin=0.5)
    assert ambiguity is not None
    assert ambiguity.scopes == 7
    assert ambiguity.states == {"vulnerable": 6, "patched": 1}
    fixed = next(m for m in ambiguity.members if m.scope["package"] == "fixed")
    assert fixed.state == "patched" and fixed.controlling == ("fixed-patch",)
    assert fixed.probability == pytest.approx(0.094 / sum(c.score for c in candidates))
    assert [m.probability for m in ambiguity.members] == sorted((m.probability for m in ambiguity.members), reverse=True)


def test_a_clear_question_a_named_scope_and_a_single_scope_store_report_no_ambiguity():
    clear = hits(("alpha-disclosure", 0.8), ("beta-disclosure", 0.2))
    assert detect_ambiguity(clear, estimate_scope_posterior(clear, TWO, SEC, {}), TWO, SEC, margin=0.5) is None
    tied = hits(("alpha-disclosure", 0.4), ("beta-disclosure", 0.4))
    named = estimate_scope_posterior(tied, TWO, SEC, {"cve_id": ["CVE-2024-1001"]})
    assert detect_ambiguity(tied, named, TWO, SEC, margin=0.5) is None
    one = graph_of(disclosure("alpha", "CVE-2024-1001"), patch("alpha", "CVE-2024-1001"))
    both = hits(("alpha-disclosure", 0.5), ("alpha-patch", 0.5))
    assert detect_ambiguity(both, estimate_scope_posterior(both, one, SEC, {}), one, SEC, margin=0.5) is None
    assert detect_ambiguity([], estimate_scope_posterior([], one, SEC, {}), one, SEC, margin=0.5) is None


def test_a_dominant_scope_keeps_several_anchors_before_a_faint_one():
    graph = graph_of(
        disclosure("alpha", "CVE-2024-1001"),
        Record(
            doc_id="alpha-advisory",
            text="x",
            doc_type="vulnerability_disclosure",
            scope={"package": "alpha", "cve_id": "CVE-2024-1001"},
        ),
        disclosure("beta", "CVE-2024-1002"),
    )
    candidates = hits(("alpha-disclosure", 0.5), ("alpha-advisory", 0.35), ("beta-disclosure", 0.15))
    posterior = estimate_scope_posterior(candidates, graph, SEC, {})
    assert [a.doc_id for a in select_anchors(candidates, posterior, graph, SEC, k1=3)] == [
        "alpha-disclosure",
        "alpha-advisory",
        "beta-disclosure",
    ]
    # A scope's second anchor is worth half its first: a closer second scope comes before it.
    close = hits(("alpha-disclosure", 0.4), ("alpha-advisory", 0.2), ("beta-disclosure", 0.4))
    posterior = estimate_scope_posterior(close, graph, SEC, {})
    got = [a.doc_id for a in select_anchors(close, posterior, graph, SEC, k1=3, ties=0.0)]
    assert got == ["alpha-disclosure", "beta-disclosure", "alpha-advisory"]


def ambiguous_result():
    candidates = hits(("alpha-disclosure", 0.4), ("beta-disclosure", 0.4))
    posterior = estimate_scope_posterior(candidates, TWO, SEC, {})
    anchors = select_anchors(candidates, posterior, TWO, SEC, k1=10)
    result = resolve_authority(TWO, SEC, QUESTION, anchors, posterior=posterior)
    result.ambiguity = detect_ambiguity(candidates, posterior, TWO, SEC, margin=0.5)
    return result


def test_every_evidence_form_and_the_json_say_the_question_does_not_pick_a_subject():
    result = ambiguous_result()
    sentence = (
        "The question matches 2 subjects it does not tell apart: 1 patched (alpha, CVE-2024-1001); "
        "1 vulnerable (beta, CVE-2024-1002). The documents below do not say which one is meant."
    )
    plain = render_plain(result)
    assert plain.startswith(f"Note: {sentence}\n\n[Document 1]")
    assert f'<ambiguity subjects="2">{sentence}</ambiguity>' in render_reader(result, policy=SEC)
    xml = render_audit(result, policy=SEC)
    assert f'<ambiguity subjects="2">{sentence}' in xml
    assert (
        '<subject scope="package=alpha; cve_id=CVE-2024-1001" probability="0.50" state="patched" '
        'controlling="alpha-patch"/>' in xml
    )
    data = result.to_dict()["ambiguity"]
    assert data["scopes"] == 2 and data["states"] == {"patched": 1, "vulnerable": 1}
    assert {m["state"] for m in data["members"]} == {"patched", "vulnerable"}


def test_every_record_carries_its_scope_probability_and_the_result_its_posterior():
    result = ambiguous_result()
    assert {r.doc_id: r.scope_probability for r in result} == pytest.approx(
        {"alpha-patch": 0.5, "alpha-disclosure": 0.5, "beta-disclosure": 0.5}
    )
    data = result.to_dict()
    assert {r["doc_id"]: r["scope_probability"] for r in data["records"]}["alpha-patch"] == 0.5
    assert data["scope_posterior"][0]["probability"] == 0.5


def test_the_uncertain_scope_is_visible_in_every_rendering():
    result = ambiguous_result()
    reader = render_reader(result, policy=SEC)
    assert 'subject-probability="0.50"' in reader
    assert "alpha, CVE-2024-1001 (probability 0.50 that this is the question's subject): patched." in reader
    assert 'scope-probability="0.50"' in render_audit(result, policy=SEC)
    assert "probability 0.50 that the question is about alpha, CVE-2024-1001" in render_plain(result)


def test_a_certain_scope_adds_no_words():
    named = {"cve_id": ["CVE-2024-1001"]}
    candidates = hits(("alpha-disclosure", 0.4))
    posterior = estimate_scope_posterior(candidates, TWO, SEC, named)
    result = resolve_authority(TWO, SEC, "Is CVE-2024-1001 fixed?", candidates, scope_ids=named, posterior=posterior)
    assert {r.scope_probability for r in result} == {1.0}
    for text in (render_reader(result, policy=SEC), render_audit(result, policy=SEC), render_plain(result)):
        assert "probability" not in text


def test_a_scope_held_only_by_records_the_caller_may_not_read_is_not_named():
    graph = graph_of(
        Record(
            doc_id="ok",
            text="Compliance approved EMP030-Harris's request to trade C.",
            doc_type="pre_clearance_approved",
            scope={"employee": "EMP030-Harris", "ticker": "C"},
            tenant="acme",
        ),
        policy=FIN,
    )
    question = "Does EMP030-Harris's C transaction pass compliance review?"
    assert named_scope_ids(question, FIN, graph, CallerContext("other").can_read) == {}
    assert named_scope_ids(question, FIN, graph, CallerContext("acme").can_read) == {
        "employee": ["EMP030-Harris"],
        "ticker": ["C"],
    }
