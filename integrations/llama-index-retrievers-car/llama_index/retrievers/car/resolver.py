"""Authority resolution over LlamaIndex nodes, computed by car-rag's core.

Given Stage-1 nodes (anchors), Stage 2 asks the store, by metadata filter only, for the
records that can supersede each anchor: those sharing its scope on each rule's ``within``
keys, of the rule's trigger types, plus the anchor's whole scope bucket (explicit
``supersedes`` edges), and records in the scope of ids the query names. It repeats from
every superseder found until nothing new comes back (the authority closure). The records
are read from node metadata (:func:`~llama_index.retrievers.car.layout.node_to_record`) into
a per-query :class:`car_rag.AuthorityGraph`, and car-rag's own
:func:`car_rag.resolution.resolve_authority` builds the RSSG, picks the active
frontier and ranks: active records first, each in its anchor's Stage-1 order, superseded
ones after them as provenance (one superseded only by records the caller may not read keeps
its place). Nodes without car-rag metadata keep their Stage-1 place among the records that
are not displaced. Nothing about supersession is re-implemented here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from car_rag import AuthorityGraph, CallerContext, Edge, Policy, Record, SupersessionCycleError
from car_rag.resolution import resolve_authority
from car_rag.channels import FusedHit
from car_rag.policy import WILDCARD
from car_rag.retriever import RetrievalResult, RetrievedRecord
from llama_index.core.schema import BaseNode, NodeWithScore

from llama_index.retrievers.car.layout import MetadataLayout, node_to_record
from llama_index.retrievers.car.lookup import AuthorityLookup, NodeAuthorityLookup, ScopeQuery, minimal_queries

__all__ = [
    "AuthorityResolver",
    "CAR_ANCHOR_ID",
    "CAR_HIDDEN_SUPERSEDER",
    "CAR_KEYS",
    "CAR_RANK",
    "CAR_ROLE",
    "CAR_RULE",
    "CAR_STAGE1_RANK",
    "CAR_STAGE1_SCORE",
    "CAR_STATUS",
    "CAR_SUPERSEDED_BY",
    "CAR_SUPERSEDES",
    "CAR_VOIDED_BY",
    "Resolution",
    "UNRESOLVED",
    "nodes_to_result",
]

logger = logging.getLogger(__name__)

CAR_STATUS = "car_status"
"""'active', 'superseded', or 'unresolved' (a node without car-rag metadata, passed through)."""
CAR_ROLE = "car_role"
"""'anchor' (a Stage-1 hit), 'superseder' (brought in by Stage 2) or 'scope_match' (in the scope of an id the query names)."""
CAR_RANK = "car_rank"
"""1-based rank of the record in the resolved result (chunks of one record share it)."""
CAR_ANCHOR_ID = "car_anchor_id"
"""doc_id of the anchor whose authority chain brought the record in."""
CAR_SUPERSEDED_BY = "car_superseded_by"
"""doc_ids of the active records that void this one (the ones that control)."""
CAR_RULE = "car_rule"
"""For a superseded record: the policy rule (or 'explicit') of the edge that set its status."""
CAR_VOIDED_BY = "car_voided_by"
"""Every record in the result that voids this one: ``[{"doc_id": ..., "rule": ...}]``."""
CAR_SUPERSEDES = "car_supersedes"
"""Records in the result this one voids: ``[{"doc_id": ..., "rule": ...}]``."""
CAR_HIDDEN_SUPERSEDER = "car_hidden_superseder"
"""True when the record is voided by one the caller may not read (never named)."""
CAR_STAGE1_SCORE = "car_stage1_score"
"""The wrapped retriever's score for this node, None when Stage 1 did not return it."""
CAR_STAGE1_RANK = "car_stage1_rank"
"""1-based position of this node in the wrapped retriever's results, None when not returned."""

CAR_KEYS = (
    CAR_STATUS,
    CAR_ROLE,
    CAR_RANK,
    CAR_ANCHOR_ID,
    CAR_SUPERSEDED_BY,
    CAR_RULE,
    CAR_VOIDED_BY,
    CAR_SUPERSEDES,
    CAR_HIDDEN_SUPERSEDER,
    CAR_STAGE1_SCORE,
    CAR_STAGE1_RANK,
)
_SHOWN_TO_LLM = (CAR_STATUS, CAR_SUPERSEDED_BY, CAR_RULE)
UNRESOLVED = "unresolved"


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


def _edges(items: Iterable[dict[str, Any]] | None, doc_id: str, *, incoming: bool) -> list[Edge]:
    out = []
    for item in items or ():
        if isinstance(item, dict) and "doc_id" in item and "rule" in item:
            other, rule = str(item["doc_id"]), str(item["rule"])
            out.append(Edge(other, doc_id, rule) if incoming else Edge(doc_id, other, rule))
    return out


def _status_rule(item: RetrievedRecord) -> str | None:
    if item.status != "superseded":
        return None
    controlling = [e.rule for e in item.voided_by if e.superseder in item.superseded_by]
    return (controlling or [e.rule for e in item.voided_by] or [None])[0]


def annotate(nws: NodeWithScore, item: RetrievedRecord | None, score: float | None, stage1_rank: int | None) -> NodeWithScore:
    """A copy of the node carrying car-rag's status metadata (``item`` None: unresolved)."""
    node = nws.node
    stage1_score = nws.score if stage1_rank is not None else None
    if item is None:
        car: dict[str, Any] = {
            CAR_STATUS: UNRESOLVED,
            CAR_ROLE: "anchor",
            CAR_RANK: None,
            CAR_ANCHOR_ID: None,
            CAR_SUPERSEDED_BY: [],
            CAR_RULE: None,
            CAR_VOIDED_BY: [],
            CAR_SUPERSEDES: [],
            CAR_HIDDEN_SUPERSEDER: False,
        }
    else:
        car = {
            CAR_STATUS: item.status,
            CAR_ROLE: item.role,
            CAR_RANK: item.rank,
            CAR_ANCHOR_ID: item.anchor_id,
            CAR_SUPERSEDED_BY: list(item.superseded_by),
            CAR_RULE: _status_rule(item),
            CAR_VOIDED_BY: [{"doc_id": e.superseder, "rule": e.rule} for e in item.voided_by],
            CAR_SUPERSEDES: [{"doc_id": e.target, "rule": e.rule} for e in item.voids],
            CAR_HIDDEN_SUPERSEDER: item.hidden_superseder,
        }
    car[CAR_STAGE1_SCORE] = stage1_score
    car[CAR_STAGE1_RANK] = stage1_rank
    hidden = [k for k in CAR_KEYS if k not in _SHOWN_TO_LLM]
    copy = node.model_copy(
        update={
            "metadata": {**node.metadata, **car},
            "excluded_llm_metadata_keys": [k for k in node.excluded_llm_metadata_keys if k not in CAR_KEYS] + hidden,
            "excluded_embed_metadata_keys": [k for k in node.excluded_embed_metadata_keys if k not in CAR_KEYS]
            + list(CAR_KEYS),
        }
    )
    return NodeWithScore(node=copy, score=score)


class _Run:
    """The state of one query's resolution; the lookups themselves are done by the caller."""

    def __init__(self, resolver: "AuthorityResolver", query: str, caller: CallerContext | None):
        self.resolver = resolver
        self.policy = resolver.policy
        self.query = query
        self.caller = caller
        self.graph = AuthorityGraph(resolver.policy)
        self.nodes_by_doc: dict[str, list[tuple[NodeWithScore, int | None]]] = {}  # doc -> [(node, stage-1 position)]
        self.anchors: list[FusedHit] = []
        self.raw_scores: dict[str, float | None] = {}
        self.unmanaged: list[tuple[int, NodeWithScore, int]] = []  # (document position, node, stage-1 position)
        self.issued: list[ScopeQuery] = []
        self.expanded: set[str] = set()
        self.lookups = 0
        self.rounds = 0

    # ------------------------------------------------------------------ records
    def _record(self, node: BaseNode) -> Record | None:
        if self.resolver.layout.doc_type(node) is None:
            return None
        try:
            return node_to_record(node, self.policy, self.resolver.layout)
        except ValueError as exc:
            logger.warning("car-rag: %s; the node is passed through unresolved", exc)
            return None

    def _add(self, record: Record) -> bool:
        try:
            self.graph.add(record)
        except SupersessionCycleError as exc:
            logger.warning("car-rag: %s; record left out of this query's authority graph", exc)
            return False
        return True

    def add_stage1(self, nodes: Sequence[NodeWithScore], k1: int | None) -> None:
        positions: dict[str, int] = {}
        for stage1_rank, nws in enumerate(nodes, 1):
            record = self._record(nws.node)
            doc_id = record.doc_id if record is not None else self.resolver.layout.doc_id(nws.node)
            if doc_id in positions:  # another chunk of a document already seen
                if doc_id in self.nodes_by_doc:
                    self.nodes_by_doc[doc_id].append((nws, stage1_rank))
                else:
                    self.unmanaged.append((positions[doc_id], nws, stage1_rank))
                continue
            if k1 is not None and len(positions) >= k1:
                continue
            positions[doc_id] = len(positions) + 1
            if record is None or not self._add(record):
                self.unmanaged.append((positions[doc_id], nws, stage1_rank))
                continue
            self.nodes_by_doc[doc_id] = [(nws, stage1_rank)]
            self.raw_scores[doc_id] = nws.score
            score = float(nws.score) if nws.score is not None else 0.0
            channel = self.resolver.channel
            self.anchors.append(
                FusedHit(
                    doc_id,
                    score,
                    rank=positions[doc_id],
                    channel_scores={channel: score} if nws.score is not None else {},
                    channel_ranks={channel: stage1_rank},
                )
            )

    def absorb(self, nodes: Sequence[BaseNode]) -> None:
        for node in nodes:
            record = self._record(node)
            if record is None or record.doc_id in self.graph:
                continue
            if self._add(record):
                self.nodes_by_doc[record.doc_id] = [(NodeWithScore(node=node, score=None), None)]

    # ------------------------------------------------------------------ lookups
    def _superseder_queries(self, record: Record) -> list[ScopeQuery]:
        out = []
        bucket = {k: record.scope[k] for k in self.policy.scope_keys if k in record.scope}
        if bucket:  # the record's whole scope: explicit edges, and whatever a rule below misses
            out.append(ScopeQuery.make(bucket))
        for rule in self.policy.rules:
            if rule.target not in (WILDCARD, record.doc_type) or any(k not in record.scope for k in rule.within):
                continue
            types = None if rule.trigger == WILDCARD else [rule.trigger]
            if not rule.within and types is None:
                logger.warning("car-rag: rule %r is global and untyped; Stage 2 cannot look it up", rule.name)
                continue
            out.append(ScopeQuery.make({k: record.scope[k] for k in rule.within}, types))
        return out

    def _members(self) -> set[str]:
        members = {h.doc_id for h in self.anchors}
        limit = self.resolver.scope_lookup_limit
        for key, values in self.policy.scope_ids_in(self.query).items():
            for value in values:
                members.update(r.doc_id for r in self.graph.lookup({key: value})[-limit:])
        return members

    def first_queries(self) -> list[ScopeQuery]:
        named = [
            ScopeQuery.make({key: value})
            for key, values in self.policy.scope_ids_in(self.query).items()
            for value in values
        ]
        return self._new(named + self._expand())

    def next_queries(self) -> list[ScopeQuery]:
        return self._new(self._expand())

    def _expand(self) -> list[ScopeQuery]:
        todo = self.graph.closure(self._members()) - self.expanded
        self.expanded |= todo
        return [q for doc_id in sorted(todo) for q in self._superseder_queries(self.graph.records[doc_id])]

    def _new(self, queries: list[ScopeQuery]) -> list[ScopeQuery]:
        fresh = [q for q in minimal_queries(queries) if not any(old.covers(q) for old in self.issued)]
        self.issued.extend(fresh)
        if fresh:
            self.lookups += len(fresh)
            self.rounds += 1
        return fresh

    # ------------------------------------------------------------------ result
    def finish(self) -> tuple[RetrievalResult, list[NodeWithScore]]:
        result = resolve_authority(
            self.graph, self.policy, self.query, self.anchors, self.caller,
            scope_lookup_limit=self.resolver.scope_lookup_limit,
        )
        anchor_rank = {h.doc_id: h.rank for h in self.anchors}
        top_score = max((s for s in self.raw_scores.values() if s is not None), default=None)

        def group(item: RetrievedRecord) -> int:
            if item.stage1 is not None:
                return item.stage1.rank
            return anchor_rank.get(item.anchor_id or "", 0)

        out: list[NodeWithScore] = []
        pending = sorted(self.unmanaged, key=lambda u: (u[0], u[2]))
        for item in result.ranked:
            while pending and not item.displaced and group(item) > pending[0][0]:
                _, nws, rank = pending.pop(0)
                out.append(annotate(nws, None, nws.score, rank))
            if item.displaced:
                while pending:
                    _, nws, rank = pending.pop(0)
                    out.append(annotate(nws, None, nws.score, rank))
            chain = self.raw_scores.get(item.anchor_id or "", top_score) if item.role != "scope_match" else top_score
            score = self.raw_scores.get(item.doc_id, chain)
            for nws, rank in self.nodes_by_doc[item.doc_id]:
                out.append(annotate(nws, item, nws.score if rank is not None else score, rank))
        for _, nws, rank in pending:
            out.append(annotate(nws, None, nws.score, rank))
        return result, out


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
        lookup: AuthorityLookup,
        policy: Policy,
        layout: MetadataLayout | None = None,
        *,
        scope_lookup_limit: int = 20,
        max_rounds: int = 32,
        channel: str = "stage1",
    ):
        if max_rounds < 1:
            raise ValueError("max_rounds must be >= 1")
        self.lookup = lookup
        self.policy = policy
        self.layout = layout or MetadataLayout()
        self.scope_lookup_limit = scope_lookup_limit
        self.max_rounds = max_rounds
        self.channel = channel

    def _steps(
        self, query: str, nodes: Sequence[NodeWithScore], caller: CallerContext | None, k1: int | None
    ) -> Generator[list[ScopeQuery], list[BaseNode], Resolution]:
        started = time.perf_counter()
        run = _Run(self, query, caller)
        run.add_stage1(nodes, k1)
        queries = run.first_queries()
        while queries:
            run.absorb((yield queries))
            if run.rounds >= self.max_rounds:
                logger.warning("car-rag: authority closure stopped after %d lookup rounds", run.rounds)
                break
            queries = run.next_queries()
        lookups_done = time.perf_counter()
        result, ranked = run.finish()
        done = time.perf_counter()
        timings = {"stage2_lookup": (lookups_done - started) * 1000, "stage3": (done - lookups_done) * 1000}
        timings["stage23"] = timings["stage2_lookup"] + timings["stage3"]
        result.timings_ms = timings
        return Resolution(result, ranked, run.lookups, run.rounds, timings)

    def resolve(
        self, query: str, nodes: Sequence[NodeWithScore], *, caller: CallerContext | None = None, k1: int | None = None
    ) -> Resolution:
        """Resolve authority for Stage-1 ``nodes`` (in their order); ``k1`` keeps the first k1 documents."""
        steps = self._steps(query, nodes, caller, k1)
        try:
            queries = next(steps)
            while True:
                queries = steps.send(self.lookup.fetch(queries))
        except StopIteration as stop:
            return stop.value

    async def aresolve(
        self, query: str, nodes: Sequence[NodeWithScore], *, caller: CallerContext | None = None, k1: int | None = None
    ) -> Resolution:
        """:meth:`resolve` with the store lookups awaited (``AuthorityLookup.afetch``)."""
        steps = self._steps(query, nodes, caller, k1)
        try:
            queries = next(steps)
            while True:
                queries = steps.send(await self.lookup.afetch(queries))
        except StopIteration as stop:
            return stop.value


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
        managed = [n for n in nodes if layout.doc_type(n.node) is not None]
        if managed:
            resolver = AuthorityResolver(NodeAuthorityLookup([n.node for n in managed], layout), policy, layout)
            nodes = resolver.resolve(query, nodes).nodes
    groups: dict[str, list[NodeWithScore]] = {}
    for nws in nodes:
        groups.setdefault(layout.doc_id(nws.node), []).append(nws)
    ranked: list[RetrievedRecord] = []
    for rank, (doc_id, chunks) in enumerate(groups.items(), 1):
        first = chunks[0].node
        texts: list[str] = []
        for chunk in chunks:
            text = chunk.node.get_content()
            if text not in texts:
                texts.append(text)
        text = "\n\n".join(texts)
        meta = first.metadata
        try:
            record = node_to_record(first, policy, layout, text=text)
        except ValueError:
            record = Record(doc_id=doc_id, doc_type=layout.doc_type(first) or "document", text=text)
        stage1_rank = meta.get(CAR_STAGE1_RANK)
        stage1_score = meta.get(CAR_STAGE1_SCORE)
        stage1 = None
        if isinstance(stage1_rank, int):
            score = float(stage1_score) if isinstance(stage1_score, (int, float)) else 0.0
            stage1 = FusedHit(doc_id, score, stage1_rank, {"stage1": score}, {"stage1": stage1_rank})
        ranked.append(
            RetrievedRecord(
                record=record,
                status="superseded" if meta.get(CAR_STATUS) == "superseded" else "active",
                role=meta.get(CAR_ROLE) if meta.get(CAR_ROLE) in ("anchor", "superseder", "scope_match") else "anchor",
                rank=rank,
                anchor_id=meta.get(CAR_ANCHOR_ID),
                stage1=stage1,
                superseded_by=[str(d) for d in meta.get(CAR_SUPERSEDED_BY) or []],
                voided_by=_edges(meta.get(CAR_VOIDED_BY), doc_id, incoming=True),
                voids=_edges(meta.get(CAR_SUPERSEDES), doc_id, incoming=False),
                hidden_superseder=bool(meta.get(CAR_HIDDEN_SUPERSEDER)),
            )
        )
    anchors = [r.stage1 for r in ranked if r.stage1 is not None]
    return RetrievalResult(query, ranked, anchors, policy.scope_ids_in(query), {})
