"""Stage-1 fusion: one ranked list from several channels, keeping every channel's evidence.

Two fusions. :func:`calibrated_fusion` (the default) turns each channel's scores for the
query into a probability over its hits and averages them: a channel whose scores are flat
for this query (twenty templates tied on the same words) spreads its mass thinly and
decides little, one with a clear winner (a rare term matched) decides a lot, and exact
ties stay ties. :func:`reciprocal_rank_fusion` (Cormack et al., 2009) reads ranks only, so
a channel's arbitrary order among tied hits counts as much as a real lead; it is kept for
comparison and for callers that have ranks but no scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from car_rag.channels.base import ChannelHit

__all__ = [
    "FusedHit",
    "reciprocal_rank_fusion",
    "calibrated_fusion",
    "RRF_K",
    "DEFAULT_TEMPERATURES",
    "RELATIVE_CHANNELS",
]

RRF_K = 60
"""The constant of Cormack et al. (2009): a hit at rank r contributes 1 / (RRF_K + r)."""

DEFAULT_TEMPERATURES: Mapping[str, float] = {"bm25": 0.3, "dense": 0.1}
"""Softmax temperature per channel, on the channel's normalised score (BM25: score / best
score; dense: cosine). Chosen leave-one-suite-out on the CAR benchmark suites
(``evals/anchors_loso.py``, ``evals/results/anchors/loso.md``)."""

RELATIVE_CHANNELS = frozenset({"bm25"})
"""Channels whose scores have no fixed scale (BM25 grows with query length and corpus
statistics): normalised by the query's best score before the softmax."""


@dataclass
class FusedHit:
    """A Stage-1 hit: fused score plus the per-channel evidence it came from."""

    doc_id: str
    score: float
    rank: int = 0
    channel_scores: dict[str, float] = field(default_factory=dict)
    channel_ranks: dict[str, int] = field(default_factory=dict)
    channel_contributions: dict[str, float] = field(default_factory=dict)
    """How much of ``score`` each channel gave (they sum to it): why this record is an anchor."""


def _ranked(fused: dict[str, FusedHit], k: int | None) -> list[FusedHit]:
    ranked = sorted(fused.values(), key=lambda h: -h.score)  # stable: ties keep first appearance
    for rank, fused_hit in enumerate(ranked, 1):
        fused_hit.rank = rank
    return ranked[:k] if k is not None else ranked


def reciprocal_rank_fusion(runs: Mapping[str, Sequence[ChannelHit]], k: int | None = None, rrf_k: int = RRF_K) -> list[FusedHit]:
    """Fuse ranked lists by RRF; ties keep the order of first appearance across ``runs``."""
    fused: dict[str, FusedHit] = {}
    for channel, hits in runs.items():
        for hit in hits:
            entry = fused.setdefault(hit.doc_id, FusedHit(hit.doc_id, 0.0))
            share = 1.0 / (rrf_k + hit.rank)
            entry.score += share
            entry.channel_scores[channel] = hit.score
            entry.channel_ranks[channel] = hit.rank
            entry.channel_contributions[channel] = share
    return _ranked(fused, k)


def calibrated_fusion(
    runs: Mapping[str, Sequence[ChannelHit]],
    k: int | None = None,
    temperatures: Mapping[str, float] = DEFAULT_TEMPERATURES,
) -> list[FusedHit]:
    """Average of per-channel softmaxes over normalised scores; the fused scores of all
    hits sum to 1 (the channels that returned something weigh equally), so they read as
    the probability that the query is about each record, which the scope posterior sums.

    A channel not in ``temperatures`` is an error, not a silent default: its scale is unknown.
    """
    live = {name: hits for name, hits in runs.items() if hits}
    fused: dict[str, FusedHit] = {}
    for channel, hits in live.items():
        if channel not in temperatures or temperatures[channel] <= 0:
            raise ValueError(f"calibrated_fusion: no positive temperature for channel {channel!r} (have {dict(temperatures)})")
        best = max(hit.score for hit in hits)
        if channel in RELATIVE_CHANNELS:
            scale = best if best > 0 else 1.0
            values = [hit.score / scale for hit in hits]
            top = best / scale
        else:
            values, top = [hit.score for hit in hits], best
        weights = [math.exp((value - top) / temperatures[channel]) for value in values]
        total = sum(weights) * len(live)
        for hit, weight in zip(hits, weights):
            entry = fused.setdefault(hit.doc_id, FusedHit(hit.doc_id, 0.0))
            share = weight / total
            entry.score += share
            entry.channel_scores[channel] = hit.score
            entry.channel_ranks[channel] = hit.rank
            entry.channel_contributions[channel] = share
    return _ranked(fused, k)
