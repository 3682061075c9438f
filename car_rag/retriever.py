"""The two-stage controlling-authority retriever.

Stage 1 finds the records the query is about (anchors) by BM25, dense search or their
fusion. Stage 2 follows supersession from every anchor, and from every scope id the query
names, through the entity-indexed authority graph. Stage 3 builds the supersession graph
over that retrieved set (RSSG) and keeps its active frontier in front: active records
first, each in its anchor's Stage-1 order, superseded records after them as provenance.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

import numpy as np

from car_rag.channels import ChannelHit, FusedHit, LexicalIndex, reciprocal_rank_fusion
from car_rag.eligibility import CallerContext
from car_rag.graph import RSSG, Edge
from car_rag.records import Record
from car_rag.store import CARStore

__all__ = ["ControllingAuthorityRetriever", "RetrievalResult", "RetrievedRecord", "AnchorMode", "Resolution"]

AnchorMode = Literal["bm25", "dense", "hybrid"]
Resolution = Literal["rules", "timestamp"]
Status = Literal["active", "superseded"]
Role = Literal["anchor", "superseder", "scope_match"]

_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


@dataclass
class RetrievedRecord:
    """A record in a retrieval result, with why it is there and what it is worth."""

    record: Record
    status: Status
    role: Role
    rank: int
    anchor_id: str | None = None
    """The Stage-1 hit (or query-named record) heading the best-ranked chain it belongs to:
    itself when it heads its own chain, another anchor when a better-ranked chain contains it."""
    stage1: FusedHit | None = None
    """Fused score and per-channel scores/ranks if Stage 1 found it."""
    superseded_by: list[str] = field(default_factory=list)
    """Active records in this result that void it (the ones that control)."""
    voided_by: list[Edge] = field(default_factory=list)
    """Every record in this result that voids it, each with the rule of the first hop."""
    voids: list[Edge] = field(default_factory=list)
    """Records in this result it voids."""
    hidden_superseder: bool = False
    """Voided by a record the caller may not read (never named): stale, though nothing shown says why."""

    @property
    def doc_id(self) -> str:
        return self.record.doc_id

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "doc_id": self.doc_id,
            "doc_type": self.record.doc_type,
            "status": self.status,
            "role": self.role,
            "anchor_id": self.anchor_id,
            "superseded_by": self.superseded_by,
            "voided_by": [{"doc_id": e.superseder, "rule": e.rule} for e in self.voided_by],
            "voids": [{"doc_id": e.target, "rule": e.rule} for e in self.voids],
            "hidden_superseder": self.hidden_superseder,
            "scope": self.record.scope,
            "published_at": self.record.published_at.isoformat() if self.record.published_at else None,
            "stage1": None
            if self.stage1 is None
            else {"rank": self.stage1.rank, "score": self.stage1.score, "channels": self.stage1.channel_scores},
        }


@dataclass
class RetrievalResult:
    """Ranked records for one query: active frontier first, superseded provenance after."""

    query: str
    ranked: list[RetrievedRecord]
    anchors: list[FusedHit]
    scope_ids: dict[str, list[str]]
    timings_ms: dict[str, float]

    def __iter__(self) -> Iterator[RetrievedRecord]:
        return iter(self.ranked)

    def __len__(self) -> int:
        return len(self.ranked)

    def top(self, k: int) -> list[RetrievedRecord]:
        return self.ranked[:k]

    def doc_ids(self, k: int | None = None) -> list[str]:
        return [r.doc_id for r in self.ranked[:k]]

    @property
    def active(self) -> list[RetrievedRecord]:
        return [r for r in self.ranked if r.status == "active"]

    @property
    def superseded(self) -> list[RetrievedRecord]:
        return [r for r in self.ranked if r.status == "superseded"]

    def get(self, doc_id: str) -> RetrievedRecord | None:
        return next((r for r in self.ranked if r.doc_id == doc_id), None)

    def to_dict(self, k: int | None = None) -> dict:
        return {
            "query": self.query,
            "scope_ids": self.scope_ids,
            "records": [r.to_dict() for r in self.ranked[:k]],
            "timings_ms": self.timings_ms,
        }


class _TimestampRSSG(RSSG):
    """The paper's anchor-only baseline: a later record in the same scope bucket voids an
    earlier one, whatever the types. Wrong when several chains share a scope; kept to
    measure what the rule-based RSSG buys."""

    def __init__(self, records: dict[str, Record], members: set[str], scope_keys: tuple[str, ...]):
        self.members = members
        self.voided_by = {}
        buckets: dict[tuple, list[Record]] = {}
        for doc_id in members:
            rec = records[doc_id]
            buckets.setdefault(tuple(rec.scope.get(k) for k in scope_keys), []).append(rec)
        for group in buckets.values():
            for rec in group:
                later = {o.doc_id: "later_in_scope" for o in group if (o.time or _EPOCH) > (rec.time or _EPOCH)}
                if later:
                    self.voided_by[rec.doc_id] = later


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
        resolution: Resolution = "rules",
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
        self._mask_index: object = None
        self._masks: dict[CallerContext, np.ndarray] = {}
        if anchors != "bm25":
            store.embedder.model  # load now, so no query's timing includes loading the model

    # ------------------------------------------------------------------ Stage 1
    def stage1(self, query: str, caller: CallerContext | None = None) -> list[FusedHit]:
        """Fused Stage-1 anchors for ``query`` (top ``k1``), among records ``caller`` may read."""
        runs: dict[str, list[ChannelHit]] = {}
        if self.anchor_mode in ("bm25", "hybrid"):
            runs["bm25"] = (self.lexical or self.store.lexical).search(query, self.depth, mask=self._mask(caller))
        if self.anchor_mode in ("dense", "hybrid"):
            vector = self.store.embedder.encode([query])[0]
            where = caller.chroma_where() if caller is not None else None
            runs["dense"] = self.store.dense.search(vector, self.depth, where=where)
        return reciprocal_rank_fusion(runs, k=self.k1)

    def _mask(self, caller: CallerContext | None) -> np.ndarray | None:
        if caller is None:
            return None
        lexical = self.lexical or self.store.lexical
        if self._mask_index is not lexical:  # the index was rebuilt by an ingest
            self._mask_index, self._masks = lexical, {}
        if caller not in self._masks:
            if len(self._masks) >= 64:
                self._masks.pop(next(iter(self._masks)))
            self._masks[caller] = caller.mask(lexical.doc_ids, self.store.records)
        return self._masks[caller]

    # ------------------------------------------------------------------ Stage 2 + 3
    def resolve(self, query: str, anchors: list[FusedHit], caller: CallerContext | None = None) -> RetrievalResult:
        """Authority resolution and active frontier for given Stage-1 anchors.

        With a ``caller``, records they may not read are never admitted; a record voided
        only by such records is still reported superseded, with ``hidden_superseder`` set.
        """
        started = time.perf_counter()
        graph = self.store.graph
        readable = (lambda _d: True) if caller is None else (lambda d: caller.can_read(graph.records[d]))
        # member -> (group, role, anchor id): group orders chains (0 = named in the query).
        members: dict[str, tuple[int, Role, str | None]] = {}

        def admit(doc_id: str, group: int, role: Role, anchor_id: str | None) -> None:
            if doc_id in graph and readable(doc_id) and (doc_id not in members or group < members[doc_id][0]):
                members[doc_id] = (group, role if doc_id not in members else members[doc_id][1], anchor_id)

        scope_ids = self.store.policy.scope_ids_in(query)
        keys = list(scope_ids)
        # Keys named together narrow one lookup (CVE id and package: that CVE of that package).
        for values in itertools.product(*(scope_ids[k] for k in keys)) if keys else ():
            # Filter before capping: restricted records must not crowd readable ones out.
            matches = [r for r in graph.lookup(dict(zip(keys, values))) if readable(r.doc_id)]
            for record in matches[-self.scope_lookup_limit :]:
                admit(record.doc_id, 0, "scope_match", record.doc_id)
        for hit in anchors:
            admit(hit.doc_id, hit.rank, "anchor", hit.doc_id)
        for doc_id, (group, _, _) in list(members.items()):
            for sup in self._chain_above(doc_id):
                admit(sup, group, "superseder", doc_id)

        if self.resolution == "rules":
            rssg = graph.rssg(members)
        else:
            rssg = _TimestampRSSG(graph.records, set(members), self.store.policy.scope_keys)
        hidden = {d for d in members if caller is not None and not all(map(readable, graph.ancestors(d)))}
        stage1 = {h.doc_id: h for h in anchors}
        voids: dict[str, list[Edge]] = {}
        for target, sups in rssg.voided_by.items():
            for sup, rule in sups.items():
                voids.setdefault(sup, []).append(Edge(sup, target, rule))

        def order(doc_id: str) -> tuple:
            # Active before superseded; then by chain (query-named, else anchor rank);
            # within a chain newest first, then Stage-1 rank.
            hit = stage1.get(doc_id)
            when = graph.records[doc_id].time or _EPOCH
            superseded = doc_id in rssg.voided_by or doc_id in hidden
            return (superseded, members[doc_id][0], -when.timestamp(), hit.rank if hit else 0, doc_id)

        ranked = []
        for rank, doc_id in enumerate(sorted(members, key=order), 1):
            group, role, anchor_id = members[doc_id]
            voided = rssg.voided_by.get(doc_id, {})
            # A record voided by something the caller cannot see does not control anything.
            controlling = [c for c in rssg.controlling(doc_id) if c not in hidden]
            ranked.append(
                RetrievedRecord(
                    record=graph.records[doc_id],
                    status="superseded" if voided or doc_id in hidden else "active",
                    role=role,
                    rank=rank,
                    anchor_id=anchor_id,
                    stage1=stage1.get(doc_id),
                    superseded_by=controlling,
                    voided_by=[Edge(s, doc_id, r) for s, r in sorted(voided.items())],
                    voids=sorted(voids.get(doc_id, []), key=lambda e: e.target),
                    hidden_superseder=doc_id in hidden and not controlling,
                )
            )
        elapsed = (time.perf_counter() - started) * 1000
        return RetrievalResult(query, ranked, anchors, scope_ids, {"stage23": elapsed})

    def _chain_above(self, doc_id: str) -> set[str]:
        if self.resolution == "rules":
            return self.store.graph.ancestors(doc_id)
        record = self.store.graph.records[doc_id]
        later = (r for r in self.store.graph.scope_bucket(record) if (r.time or _EPOCH) > (record.time or _EPOCH))
        return {r.doc_id for r in later}

    # ------------------------------------------------------------------ both
    def retrieve(self, query: str, caller: CallerContext | None = None) -> RetrievalResult:
        """Run all three stages for one query; ``caller`` restricts every stage to what they may read
        (no caller: unrestricted, as for a trusted service)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        started = time.perf_counter()
        anchors = self.stage1(query, caller)
        stage1_ms = (time.perf_counter() - started) * 1000
        result = self.resolve(query, anchors, caller)
        result.timings_ms = {"stage1": stage1_ms, **result.timings_ms, "total": (time.perf_counter() - started) * 1000}
        return result
