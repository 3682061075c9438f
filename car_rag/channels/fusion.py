"""Reciprocal rank fusion that keeps every channel's score and rank on the fused hit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from car_rag.channels.base import ChannelHit

__all__ = ["FusedHit", "reciprocal_rank_fusion", "RRF_K"]

RRF_K = 60
"""The constant of Cormack et al. (2009): a hit at rank r contributes 1 / (RRF_K + r)."""


@dataclass
class FusedHit:
    """A Stage-1 hit: fused score plus the per-channel evidence it came from."""

    doc_id: str
    score: float
    rank: int = 0
    channel_scores: dict[str, float] = field(default_factory=dict)
    channel_ranks: dict[str, int] = field(default_factory=dict)


def reciprocal_rank_fusion(runs: Mapping[str, Sequence[ChannelHit]], k: int | None = None, rrf_k: int = RRF_K) -> list[FusedHit]:
    """Fuse ranked lists by RRF; ties keep the order of first appearance across ``runs``."""
    fused: dict[str, FusedHit] = {}
    for channel, hits in runs.items():
        for hit in hits:
            entry = fused.setdefault(hit.doc_id, FusedHit(hit.doc_id, 0.0))
            entry.score += 1.0 / (rrf_k + hit.rank)
            entry.channel_scores[channel] = hit.score
            entry.channel_ranks[channel] = hit.rank
    ranked = sorted(fused.values(), key=lambda h: -h.score)
    for rank, fused_hit in enumerate(ranked, 1):
        fused_hit.rank = rank
    return ranked[:k] if k is not None else ranked
