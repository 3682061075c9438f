"""Stage-1 fusion: calibrated fusion against reciprocal rank fusion, on constructed runs."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from car_rag.channels import ChannelHit
from car_rag.channels.fusion import calibrated_fusion, reciprocal_rank_fusion

SETTINGS = settings(max_examples=int(os.environ.get("CAR_PROPERTY_EXAMPLES", "300")), deadline=None)


def run(scores: dict[str, float]) -> list[ChannelHit]:
    ordered = sorted(scores.items(), key=lambda kv: -kv[1])
    return [ChannelHit(d, s, r) for r, (d, s) in enumerate(ordered, 1)]


def order(hits) -> list[str]:
    return [h.doc_id for h in hits]


def test_a_flat_channel_leaves_the_order_to_the_informative_one_where_rrf_does_not():
    # BM25 ties twenty templates (its corpus order is arbitrary); dense prefers d7.
    docs = [f"d{i}" for i in range(20)]
    bm25 = run({d: 6.1 for d in docs})
    dense = run({d: 0.80 - 0.002 * abs(i - 7) for i, d in enumerate(docs)})
    assert order(calibrated_fusion({"bm25": bm25, "dense": dense})) == order(dense)
    # RRF reads BM25's arbitrary order among the tied templates as a lead.
    assert order(reciprocal_rank_fusion({"bm25": bm25, "dense": dense})) != order(dense)


def test_a_clear_lexical_winner_beats_a_flat_dense_ranking():
    bm25 = run({"rare": 12.0, "a": 3.0, "b": 2.9, "c": 2.8})
    dense = run({"a": 0.512, "b": 0.511, "c": 0.510, "rare": 0.505})
    assert calibrated_fusion({"bm25": bm25, "dense": dense})[0].doc_id == "rare"


def test_scores_sum_to_one_contributions_explain_them_and_ranks_follow():
    bm25 = run({"a": 5.0, "b": 4.0, "c": 1.0})
    dense = run({"b": 0.9, "d": 0.7})
    fused = calibrated_fusion({"bm25": bm25, "dense": dense, "empty": []})
    assert math.isclose(sum(h.score for h in fused), 1.0)
    for h in fused:
        assert math.isclose(sum(h.channel_contributions.values()), h.score)
    assert [h.rank for h in fused] == list(range(1, len(fused) + 1))
    assert fused[0].doc_id == "b" and fused[0].channel_ranks == {"bm25": 2, "dense": 1}
    assert len(calibrated_fusion({"bm25": bm25, "dense": dense}, k=2)) == 2


def test_a_channel_without_a_temperature_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'sparse'"):
        calibrated_fusion({"sparse": run({"a": 1.0})})


def test_nothing_in_nothing_out():
    assert calibrated_fusion({"bm25": [], "dense": []}) == []


scores = st.dictionaries(st.sampled_from([f"d{i}" for i in range(12)]), st.integers(1, 300).map(lambda x: x / 10), min_size=1)


@SETTINGS
@given(scores, st.floats(0.01, 30.0))
def test_property_a_flat_channel_over_the_same_records_keeps_the_other_channels_order(informative, flat_score):
    flat = run({d: flat_score for d in informative})
    fused = calibrated_fusion({"bm25": flat, "dense": run({d: s / 30 for d, s in informative.items()})})
    # Equal dense scores may come out in either order; strictly better ones never lose.
    got = {h.doc_id: i for i, h in enumerate(fused)}
    for a, sa in informative.items():
        for b, sb in informative.items():
            if sa > sb:
                assert got[a] < got[b]


@SETTINGS
@given(scores)
def test_property_exact_ties_stay_ties(channel):
    fused = calibrated_fusion({"bm25": run(channel)})
    by_id = {h.doc_id: h.score for h in fused}
    for a, sa in channel.items():
        for b, sb in channel.items():
            if sa == sb:
                assert by_id[a] == by_id[b]
