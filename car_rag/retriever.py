"""The two-stage controlling-authority retriever over a :class:`CARStore`.

Stage 1 finds the records the query is about (anchors) by BM25, dense search or their
fusion, inside the caller's eligibility; Stages 2 and 3 are :mod:`car_rag.resolution`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Literal

import numpy as np

from car_rag.channels import ChannelHit, FusedHit, LexicalIndex, reciprocal_rank_fusion
from car_rag.eligibility import CallerContext
from car_rag.resolution import ResolutionMode, RetrievalResult, RetrievedRecord, resolve_authority
from car_rag.store import CARStore

__all__ = ["ControllingAuthorityRetriever", "RetrievalResult", "RetrievedRecord", "AnchorMode", "ResolutionMode"]

log = logging.getLogger(__name__)

AnchorMode = Literal["bm25", "dense", "hybrid"]


class ControllingAuthorityRetriever:
    """Query → anchors → authority closure → active frontier, over a :class:`CARStore`.

    ``anchors`` picks the Stage-1 channels; ``k1`` is how many fused Stage-1 hits become
    anchors; ``depth`` is how deep each channel is read before fusion; ``resolution`` is
    ``"rules"`` (policy rules and explicit edges, the RSSG) or ``"timestamp"`` (the paper's
    anchor-only baseline, for comparison); ``scope_lookup_limit`` caps how many records one
    scope id named in the query may pull in; ``lexical`` replaces the store's BM25 index for
    Stage 1 (e.g. a ``rank-bm25`` index for parity with the paper).
    """

    def __init__(
        self,
        store: CARStore,
        *,
        anchors: AnchorMode = "hybrid",
        k1: int = 10,
        depth: int = 50,
        resolution: ResolutionMode = "rules",
        scope_lookup_limit: int = 20,
        lexical: LexicalIndex | None = None,
    ):
        if anchors not in ("bm25", "dense", "hybrid"):
            raise ValueError(f"anchors must be 'bm25', 'dense' or 'hybrid', got {anchors!r}")
        if resolution not in ("rules", "timestamp"):
            raise ValueError(f"resolution must be 'rules' or 'timestamp', got {resolution!r}")
        if k1 < 1 or depth < k1:
            raise ValueError(f"need 1 <= k1 <= depth, got k1={k1}, depth={depth}")
        self.store = store
        self.anchor_mode = anchors
        self.k1 = k1
        self.depth = depth
        self.resolution = resolution
        self.scope_lookup_limit = scope_lookup_limit
        self.lexical = lexical
        self._mask_index: tuple[object, int] | None = None
        self._masks: dict[CallerContext, np.ndarray] = {}
        if anchors != "bm25":
            _ = store.embedder.model  # load now, so no query's timing includes loading the model

    # ------------------------------------------------------------------ Stage 1
    def stage1(self, query: str, caller: CallerContext | None = None) -> list[FusedHit]:
        """Fused Stage-1 anchors for ``query`` (top ``k1``), among records ``caller`` may read."""
        vector = self.store.embedder.encode([query])[0] if self.anchor_mode != "bm25" else None
        with self.store.lock.read():
            return self._stage1(query, vector, caller)

    def _stage1(self, query: str, vector: np.ndarray | None, caller: CallerContext | None) -> list[FusedHit]:
        runs: dict[str, list[ChannelHit]] = {}
        if self.anchor_mode in ("bm25", "hybrid"):
            runs["bm25"] = (self.lexical or self.store.lexical).search(query, self.depth, mask=self._mask(caller))
        if vector is not None:
            where = caller.chroma_where() if caller is not None else None
            runs["dense"] = self.store.dense.search(vector, self.depth, where=where)
        return reciprocal_rank_fusion(runs, k=self.k1)

    def _mask(self, caller: CallerContext | None) -> np.ndarray | None:
        if caller is None:
            return None
        lexical = self.lexical or self.store.lexical
        if self._mask_index != (lexical, lexical.generation):  # an ingest changed the index
            self._mask_index, self._masks = (lexical, lexical.generation), {}
        if caller not in self._masks:
            if len(self._masks) >= 64:
                self._masks.pop(next(iter(self._masks)))
            self._masks[caller] = caller.mask(lexical.doc_ids, self.store.records)
        return self._masks[caller]

    # ------------------------------------------------------------------ Stage 2 + 3
    def resolve(self, query: str, anchors: list[FusedHit], caller: CallerContext | None = None) -> RetrievalResult:
        """Stage 2 + 3 over the store's graph for given Stage-1 anchors (see :func:`resolve_authority`)."""
        with self.store.lock.read():
            return resolve_authority(
                self.store.graph, self.store.policy, query, anchors, caller,
                resolution=self.resolution, scope_lookup_limit=self.scope_lookup_limit,
            )

    # ------------------------------------------------------------------ both
    def retrieve(self, query: str, caller: CallerContext | None = None) -> RetrievalResult:
        """Run all three stages for one query; ``caller`` restricts every stage to what they may read
        (no caller: unrestricted, as for a trusted service)."""
        _check_query(query)
        started = time.perf_counter()
        # The query is embedded before the lock is taken; both stages then read one state
        # of the store, so an ingest running meanwhile is seen entirely or not at all.
        vector = self.store.embedder.encode([query])[0] if self.anchor_mode != "bm25" else None
        return self._retrieve(query, vector, caller, started)

    def retrieve_many(self, queries: Sequence[str], caller: CallerContext | None = None) -> list[RetrievalResult]:
        """:meth:`retrieve` for each query, with the queries embedded together in batches: one
        forward pass per batch instead of one per query. Each result's timings include its share
        of the batched embedding."""
        for query in queries:
            _check_query(query)
        if not queries:
            return []
        started = time.perf_counter()
        vectors = self.store.embedder.encode(queries) if self.anchor_mode != "bm25" else None
        share = (time.perf_counter() - started) / len(queries)
        return [
            self._retrieve(query, None if vectors is None else vectors[i], caller, time.perf_counter() - share)
            for i, query in enumerate(queries)
        ]

    def _retrieve(
        self, query: str, vector: np.ndarray | None, caller: CallerContext | None, started: float
    ) -> RetrievalResult:
        with self.store.lock.read():
            anchors = self._stage1(query, vector, caller)
            stage1_ms = (time.perf_counter() - started) * 1000
            result = self.resolve(query, anchors, caller)
        result.timings_ms = {"stage1": stage1_ms, **result.timings_ms, "total": (time.perf_counter() - started) * 1000}
        if log.isEnabledFor(logging.DEBUG):
            log.debug("query %r: %d anchors (%s), %d records, %d active; %s", query[:80], len(anchors), self.anchor_mode,
                      len(result), sum(r.status == "active" for r in result),
                      ", ".join(f"{name} {ms:.1f} ms" for name, ms in result.timings_ms.items()))
        return result


def _check_query(query: object) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
