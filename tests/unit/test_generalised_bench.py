"""The generalised-CAR benchmark's generator and scorers (car_rag_evals.generalised), small."""

from __future__ import annotations

from car_rag.policy import Policy, load_policy
from car_rag_evals.generalised import (
    exception_corpus,
    multi_authority_corpus,
    noisy_corpus,
    score_exceptions,
    score_multi_authority,
    score_noisy,
)


def test_the_generator_is_seeded_and_knows_its_false_edges():
    a, b = noisy_corpus(7, 0.2, entities=40), noisy_corpus(7, 0.2, entities=40)
    assert a.records == b.records and a.falsely_voided == b.falsely_voided
    assert len(a.falsely_voided) == 8 and all(d in {q[1] for q in a.queries} for d in a.falsely_voided)


def test_the_safe_frontier_keeps_wrongly_voided_records_the_baseline_hides():
    scores = score_noisy(noisy_corpus(7, 0.2, entities=40), taus=(0.0, 0.5))
    assert scores[0.0]["hidden"] == 1.0  # every edge certain: each false edge hides what controls
    assert scores[0.5]["hidden"] == 0.0 and scores[0.5]["tca"] >= scores[0.0]["tca"]


def test_every_generated_conflict_surfaces_and_nothing_kept_active_is_superseded():
    scores = score_multi_authority(multi_authority_corpus(7, questions=30), load_policy("legal-precedent"))
    assert scores["conflicts"] > 0 and scores["conflicts_surfaced"] == 1.0
    assert scores["kept_active_reported_superseded"] == 0.0


def test_every_exception_pair_resolves_as_the_generator_says():
    corpus = exception_corpus(7, pairs=30)
    assert exception_corpus(7, pairs=30).records == corpus.records
    scores = score_exceptions(corpus, load_policy("sec-204a1"))
    assert {p for p, _ in corpus.cases} == {"active", "revoked", "revocation_before_grant"}
    assert scores["resolved_correctly"] == 1.0
    # Under the policy before the exception rule, the grant voids nothing: the blackout stays active.
    policy = load_policy("sec-204a1")
    before = Policy.model_validate({**policy.model_dump(), "rules": [r.model_dump() for r in policy.rules[:-1]]})
    assert score_exceptions(corpus, before)["by_pattern"]["active"]["resolved_correctly"] == 0.0
