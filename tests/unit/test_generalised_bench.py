"""The generalised-CAR benchmark's generator and scorers (car_rag_evals.generalised), small."""

from __future__ import annotations

from car_rag.policy import load_policy
from car_rag_evals.generalised import multi_authority_corpus, noisy_corpus, score_multi_authority, score_noisy


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
