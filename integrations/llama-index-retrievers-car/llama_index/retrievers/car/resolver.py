"""Authority resolution over LlamaIndex nodes: car-rag's Stage 2 and 3, with node glue.

Given Stage-1 nodes (anchors), car-rag's :class:`car_rag.adapters.AuthorityClosure` plans the
metadata lookups, a :mod:`~llama_index.retrievers.car.lookup` adapter answers them from the
store, and car-rag ranks: active records first, each in its anchor's Stage-1 order,
superseded ones after them as provenance. What stays here is what nodes need: chunks of one
record share its status, nodes without car-rag metadata keep their Stage-1 place among the
records that are not displaced, and every node carries the ``car_*`` annotations.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from car_rag import CallerContext, Policy, RetrievalResult
from car_rag.adapters import Anchor, AuthorityClosure, AuthorityStore, LayoutError
from car_rag.annotations import annotations_for, result_from_annotations, unresolved_annotations
from car_rag.layout import (
    CAR_AMBIGUITY,
    CAR_ANCHOR_ID,
    CAR_ANNOTATION_KEYS,
    CAR_HIDDEN_SUPERSEDER,
    CAR_RANK,
    CAR_ROLE,
    CAR_RULE,
    CAR_SCOPE_PROBABILITY,
    CAR_STAGE1_RANK,
    CAR_STAGE1_SCORE,
    CAR_STATUS,
    CAR_SUPERSEDED_BY,
    CAR_VOIDED_BY,
    CAR_VOIDS,
)
from car_rag.lookup import aresolve_closure, resolve_closure
from car_rag.resolution import RetrievedRecord
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.schema import NodeWithScore

from llama_index.retrievers.car.layout import LLAMA_INDEX_KEYS, MetadataLayout, node_doc_id, node_to_record
from llama_index.retrievers.car.lookup import NodeAuthorityLookup

__all__ = [
    "AuthorityResolver",
    "CARResolutionEvent",
    "CAR_AMBIGUITY",
    "CAR_ANCHOR_ID",
    "CAR_HIDDEN_SUPERSEDER",
    "CAR_KEYS",
    "CAR_RANK",
    "CAR_ROLE",
    "CAR_RULE",
    "CAR_SCOPE_PROBABILITY",
    "CAR_STAGE1_RANK",
    "CAR_STAGE1_SCORE",
    "CAR_STATUS",
    "CAR_SUPERSEDED_BY",
    "CAR_VOIDED_BY",
    "CAR_VOIDS",
    "Resolution",
    "nodes_to_result",
]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)


class CARResolutionEvent(BaseEvent):
    """Instrumentation event for one resolution (inside the ``AuthorityResolver.resolve`` span):
    the anchors, how many lookups and rounds Stage 2 took, what is active and what superseded."""

    query: str
    anchors: list[str]
    unresolved: list[str]
    lookups: int
    rounds: int
    active: list[str]
    superseded: dict[str, list[str]]
    hidden_superseder: list[str]
    timings_ms: dict[str, float]

    @classmethod
    def class_name(cls) -> str:
        return "CARResolutionEvent"


CAR_KEYS = CAR_ANNOTATION_KEYS
_SHOWN_TO_LLM = (CAR_STATUS, CAR_SUPERSEDED_BY, CAR_RULE)


@dataclass
class Resolution:
    """One query's resolved result: car-rag's :class:`~car_rag.RetrievalResult` and the ranked nodes."""

    result: RetrievalResult
    nodes: list[NodeWithScore]
    lookups: int = 0
    """How many scope queries Stage 2 sent to the store."""
    rounds: int = 0
    """How many lookup rounds the closure took."""
    timings_ms: dict[str, float] = field(default_factory=dict)


def annotate(nws: NodeWithScore, car: dict[str, Any], score: float | None, stage1_rank: int | None) -> NodeWithScore:
    """A copy of the node carrying car-rag's annotations; Stage-1 rank and score are the node's own."""
    car = {**car, CAR_STAGE1_RANK: stage1_rank, CAR_STAGE1_SCORE: nws.score if stage1_rank is not None else None}
    node = nws.node
    hidden = [k for k in CAR_KEYS if k not in _SHOWN_TO_LLM]
    copy = node.model_copy(
        update={
            "metadata": {**node.metadata, **car},
            "excluded_llm_metadata_keys": [k for k in node.excluded_llm_metadata_keys if k not in CAR_KEYS] + hidden,
            "excluded_embed_metadata_keys": [k for k in node.excluded_embed_metadata_keys if k not in CAR_KEYS] + list(CAR_KEYS),
        }
    )
    return NodeWithScore(node=copy, score=score)


class _Nodes:
    """The node side of one query: Stage-1 nodes by record, and the ones passed through."""

    def __init__(self, resolver: AuthorityResolver, closure: AuthorityClosure):
        self.resolver, self.closure = resolver, closure
        self.chunks: dict[str, list[tuple[NodeWithScore, int]]] = {}  # doc -> [(node, stage-1 position)]
        self.scores: dict[str, float | None] = {}
        self.unmanaged: list[tuple[int, NodeWithScore, int]] = []  # (document position, node, stage-1 position)

    def add_stage1(self, nodes: Sequence[NodeWithScore], k1: int | None) -> None:
        layout = self.resolver.layout
        positions: dict[str, int] = {}  # doc -> its place among the Stage-1 documents
        for stage1_rank, nws in enumerate(nodes, 1):
            doc_id = node_doc_id(nws.node, layout)
            if doc_id in positions:  # another chunk of a document already seen
                if doc_id in self.chunks:
                    self.chunks[doc_id].append((nws, stage1_rank))
                else:
                    self.unmanaged.append((positions[doc_id], nws, stage1_rank))
                continue
            if k1 is not None and len(positions) >= k1:
                continue
            positions[doc_id] = len(positions) + 1
            record = None
            if layout.doc_type(nws.node.metadata) is not None:
                try:
                    record = node_to_record(nws.node, self.resolver.policy, layout)
                except LayoutError as exc:
                    logger.warning("car-rag: %s; the node is passed through unresolved", exc)
            score = float(nws.score) if nws.score is not None else None
            anchor = Anchor(doc_id, positions[doc_id], score, self.resolver.channel)
            if record is None or not self.closure.add_anchor(record, anchor, nws.node):
                self.unmanaged.append((positions[doc_id], nws, stage1_rank))
                continue
            self.chunks[doc_id] = [(nws, stage1_rank)]
            self.scores[doc_id] = nws.score

    def ranked(self, result: RetrievalResult) -> list[NodeWithScore]:
        """The result as nodes; unmanaged ones keep their Stage-1 place among the records
        not displaced, and a superseder scores like the anchor that brought it in."""
        anchor_rank = {h.doc_id: h.rank for h in result.anchors}
        top_score = max((s for s in self.scores.values() if s is not None), default=None)
        unresolved = unresolved_annotations(result.query, self.resolver.policy)

        def group(item: RetrievedRecord) -> int:
            return item.stage1.rank if item.stage1 is not None else anchor_rank.get(item.anchor_id or "", 0)

        out: list[NodeWithScore] = []
        pending = sorted(self.unmanaged, key=lambda u: (u[0], u[2]))
        for item in result.ranked:
            while pending and (item.displaced or group(item) > pending[0][0]):
                _, nws, rank = pending.pop(0)
                out.append(annotate(nws, unresolved, nws.score, rank))
            chain = self.scores.get(item.anchor_id or "", top_score) if item.role != "scope_match" else top_score
            score = self.scores.get(item.doc_id, chain)
            car = annotations_for(item, result)
            chunks: Sequence[tuple[NodeWithScore, int | None]] = self.chunks.get(item.doc_id) or [
                (NodeWithScore(node=self.closure.sources[item.doc_id]), None)
            ]
            for nws, stage1_rank in chunks:
                out.append(annotate(nws, car, nws.score if stage1_rank is not None else score, stage1_rank))
        out += [annotate(nws, unresolved, nws.score, rank) for _, nws, rank in pending]
        return out


class AuthorityResolver:
    """Stage 2 + 3 for nodes: entity lookups through ``lookup``, car-rag's rules and frontier.

    ``policy`` is a :class:`car_rag.Policy`; ``layout`` says where node metadata keeps the
    record fields; ``scope_lookup_limit`` caps the records one scope id named in the query
    may pull in (as in car-rag); ``max_rounds`` bounds the closure's lookup rounds (a chain
    of n superseders takes about n rounds); ``channel`` names the Stage-1 retriever in
    the per-channel scores.
    """

    def __init__(
        self,
        lookup: AuthorityStore,
        policy: Policy,
        layout: MetadataLayout | None = None,
        *,
        scope_lookup_limit: int = 20,
        max_rounds: int = 32,
        channel: str = "stage1",
    ):
        if max_rounds < 1:
            raise ValueError("max_rounds must be >= 1")
        self.lookup, self.policy, self.layout = lookup, policy, layout or MetadataLayout()
        self.scope_lookup_limit, self.max_rounds, self.channel = scope_lookup_limit, max_rounds, channel

    def _start(self, query: str, nodes: Sequence[NodeWithScore], k1: int | None) -> _Nodes:
        closure = AuthorityClosure(
            self.policy, query, layout=self.layout, scope_lookup_limit=self.scope_lookup_limit, max_rounds=self.max_rounds
        )
        state = _Nodes(self, closure)
        state.add_stage1(nodes, k1)
        return state

    @staticmethod
    def _finish(state: _Nodes, result: RetrievalResult, started: float, looked_up: float) -> Resolution:
        ranked = state.ranked(result)
        done = time.perf_counter()
        timings = {"stage2_lookup": (looked_up - started) * 1000, "stage3": (done - looked_up) * 1000}
        timings["stage23"] = timings["stage2_lookup"] + timings["stage3"]
        result.timings_ms = timings
        layout = state.resolver.layout
        dispatcher.event(
            CARResolutionEvent(
                query=result.query,
                anchors=[h.doc_id for h in result.anchors],
                unresolved=list(dict.fromkeys(node_doc_id(nws.node, layout) for _, nws, _ in state.unmanaged)),
                lookups=state.closure.lookups,
                rounds=state.closure.rounds,
                active=[r.doc_id for r in result.ranked if r.status == "active"],
                superseded={r.doc_id: list(r.superseded_by) for r in result.ranked if r.status == "superseded"},
                hidden_superseder=[r.doc_id for r in result.ranked if r.hidden_superseder],
                timings_ms=timings,
            )
        )
        return Resolution(result, ranked, state.closure.lookups, state.closure.rounds, timings)

    @dispatcher.span
    def resolve(
        self, query: str, nodes: Sequence[NodeWithScore], *, caller: CallerContext | None = None, k1: int | None = None
    ) -> Resolution:
        """Resolve authority for Stage-1 ``nodes`` (in their order); ``k1`` keeps the first k1 documents."""
        started = time.perf_counter()
        state = self._start(query, nodes, k1)
        result = resolve_closure(state.closure, self.lookup, caller)
        return self._finish(state, result, started, time.perf_counter())

    @dispatcher.span
    async def aresolve(
        self, query: str, nodes: Sequence[NodeWithScore], *, caller: CallerContext | None = None, k1: int | None = None
    ) -> Resolution:
        """:meth:`resolve` with the store lookups awaited (``afetch``)."""
        started = time.perf_counter()
        state = self._start(query, nodes, k1)
        result = await aresolve_closure(state.closure, self.lookup, caller)
        return self._finish(state, result, started, time.perf_counter())


def nodes_to_result(
    query: str, nodes: Sequence[NodeWithScore], policy: Policy, layout: MetadataLayout | None = None
) -> RetrievalResult:
    """A car-rag :class:`~car_rag.RetrievalResult` for nodes, for evidence rendering.

    Nodes that carry car-rag's status metadata (from :class:`CARRetriever` or the
    postprocessors) keep it, in their order; when none does, supersession is resolved among
    the given nodes alone. Chunks of one record become one record, their texts joined in
    order. A node without car-rag metadata becomes an active record of type ``document``.
    """
    layout = layout or MetadataLayout()
    if not any(CAR_STATUS in n.node.metadata for n in nodes):
        managed = [n for n in nodes if layout.doc_type(n.node.metadata) is not None]
        if managed:
            resolver = AuthorityResolver(NodeAuthorityLookup([n.node for n in managed], layout), policy, layout)
            nodes = resolver.resolve(query, nodes).nodes
    groups: dict[str, list[NodeWithScore]] = {}
    for nws in nodes:
        groups.setdefault(node_doc_id(nws.node, layout), []).append(nws)
    items = []
    for doc_id, chunks in groups.items():
        texts: list[str] = []
        for chunk in chunks:
            if chunk.node.get_content() not in texts:
                texts.append(chunk.node.get_content())
        first = chunks[0].node
        record = layout.evidence_record(
            first.metadata, "\n\n".join(texts), policy, default_id=doc_id, foreign_keys=LLAMA_INDEX_KEYS
        )
        items.append((record, first.metadata))
    return result_from_annotations(items, query=query, policy=policy)
