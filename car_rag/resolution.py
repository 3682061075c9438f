"""Stage 2 + 3 of a query: from Stage-1 anchors to ranked records with their status.

Stage 2 follows supersession from every anchor, and from every scope id the query names,
through the entity-indexed authority graph. Stage 3 builds the supersession graph over
that retrieved set (RSSG) and keeps its active frontier in front: active records first,
each in its anchor's Stage-1 order, superseded records after them as provenance. A record
voided only by records the caller may not read has nothing shown in its place, so it keeps
its own: ranked among the active records, and an anchor never after its Stage-1 rank.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from car_rag.ambiguity import Ambiguity
from car_rag.channels.fusion import RRF_K, FusedHit
from car_rag.eligibility import CallerContext, RecordFilter, as_of_label
from car_rag.graph import RSSG, AuthorityGraph, DatedGraph, Edge
from car_rag.latent_scope import ScopePosterior
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.scope_linking import Link

__all__ = ["DEFAULT_MIN_CONFIDENCE", "Anchor", "RetrievalResult", "RetrievedRecord", "ResolutionMode", "resolve_authority"]

DEFAULT_MIN_CONFIDENCE = 0.5
"""τ of the safe frontier (Definition 9): an edge voids only at this confidence or above.
0.5 is where a calibrated edge becomes more likely true than false; below it, hiding the
record would more likely hide what controls than show what is stale, so the record stays
active and contested, naming its weak voiders. Certain edges (1.0) void at every τ."""

ResolutionMode = Literal["rules", "timestamp"]
"""How Stage 3 decides what voids what: the policy's rules, or the later timestamp (the paper's baseline)."""
Status = Literal["active", "superseded"]
Role = Literal["anchor", "superseder", "scope_match"]


@dataclass(frozen=True)
class Anchor:
    """A Stage-1 hit from any retriever, as Stages 2-3 need it: which record, at which
    rank, with the retriever's own score (None when it gives none) under a channel name.

    Integrations pass these instead of :class:`FusedHit`, so no one fakes a fused score:
    the core fuses the single ranked list itself (:meth:`hit`), as its own RRF would.
    """

    doc_id: str
    rank: int
    score: float | None = None
    channel: str = "stage1"

    def hit(self) -> FusedHit:
        """The Stage-1 rationale a result carries: reciprocal rank fusion of one channel."""
        scores = {self.channel: self.score} if self.score is not None else {}
        return FusedHit(self.doc_id, 1.0 / (RRF_K + self.rank), self.rank, scores, {self.channel: self.rank})


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
    contested_by: list[Edge] = field(default_factory=list)
    """Records in this result that void it only through edges below the query's
    ``min_confidence``, each with the confidence of its surest path: they do not void it."""
    disputed_by: list[Edge] = field(default_factory=list)
    """Records in this result that void it by one relation while it voids them by another
    (a hierarchy against chronology, Definition 10): neither voids the other. Also those that
    claim to void it without the trust to (:mod:`car_rag.trust`), each edge naming the rule it
    breaks in ``untrusted``: they void nothing."""
    hidden_superseder: bool = False
    """Voided by a record of its own tenant that the caller may not read (never named): stale,
    though nothing shown says why. Another tenant's or a publisher's private record never sets it."""
    filtered_superseder: bool = False
    """Voided by a record the query's filter leaves out (one the caller may read): stale, with
    nothing shown in its place. A filter narrows what is shown, not what is true."""
    scope_probability: float | None = None
    """How probable it is that the question is about this record's scope (latent-scope CAR);
    1.0 for a scope the question names alone, None where no posterior was estimated."""

    @property
    def doc_id(self) -> str:
        return self.record.doc_id

    @property
    def contested(self) -> bool:
        """Active, though records in the result void it with too little confidence to count:
        possibly superseded (Definition 9's safe frontier keeps it)."""
        return self.status == "active" and bool(self.contested_by)

    @property
    def displaced(self) -> bool:
        """Superseded, with a record the caller may read in its place: ranked after the active
        records as provenance. One voided only by hidden or filtered-out records is not."""
        return self.status == "superseded" and not self.hidden_superseder and not self.filtered_superseder

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "doc_id": self.doc_id,
            "doc_type": self.record.doc_type,
            "status": self.status,
            "role": self.role,
            "anchor_id": self.anchor_id,
            "superseded_by": self.superseded_by,
            "voided_by": [edge_json(e.superseder, e) for e in self.voided_by],
            "voids": [edge_json(e.target, e) for e in self.voids],
            "contested_by": [edge_json(e.superseder, e) for e in self.contested_by],
            "disputed_by": [edge_json(e.superseder, e) for e in self.disputed_by],
            "hidden_superseder": self.hidden_superseder,
            **({"filtered_superseder": True} if self.filtered_superseder else {}),
            "scope": self.record.scope,
            "scope_probability": None if self.scope_probability is None else round(self.scope_probability, 4),
            "published_at": self.record.published_at.isoformat() if self.record.published_at else None,
            "stage1": None
            if self.stage1 is None
            else {
                "rank": self.stage1.rank,
                "score": self.stage1.score,
                "channels": self.stage1.channel_scores,
                "contributions": self.stage1.channel_contributions,
            },
        }


def edge_json(other: str, edge: Edge) -> dict[str, Any]:
    """An edge as JSON (results and ``car_*`` annotations alike): the record at the other end
    and the rule; the confidence only where the edge is uncertain."""
    out: dict[str, Any] = {"doc_id": other, "rule": edge.rule}
    if edge.confidence < 1.0:
        out["confidence"] = edge.confidence
    return out if edge.untrusted is None else {**out, "untrusted": edge.untrusted}


@dataclass
class RetrievalResult:
    """Ranked records for one query: active frontier first, superseded provenance after
    (a record superseded only by records the caller may not read keeps its place)."""

    query: str
    ranked: list[RetrievedRecord]
    anchors: list[FusedHit]
    scope_ids: dict[str, list[str]]
    timings_ms: dict[str, float]
    policy: Policy | None = None
    """The policy the result was resolved under: renderings and the guard take their words
    and rule descriptions from it when none is passed."""
    scope_posterior: ScopePosterior | None = None
    """P(scope | question) where it was estimated (the core retriever's latent-scope step)."""
    scope_links: tuple[Link, ...] = ()
    """Scope values the question's words name (:mod:`car_rag.scope_linking`), as linked."""
    ambiguity: Ambiguity | None = None
    """Set when the question plausibly names several scopes it does not tell apart (see
    :mod:`car_rag.ambiguity`); None when one scope is clearly its subject or no posterior was estimated."""
    candidates: list[FusedHit] = field(default_factory=list)
    """The fused Stage-1 candidates the anchors were chosen from, best first, with their
    channel scores (the core retriever's; empty where no fusion ran, e.g. a framework's
    Stage 1). Not part of :meth:`to_dict`."""
    as_of: datetime | None = None
    """The date the authority was resolved as of (None: now, every record the store holds)."""
    filters: RecordFilter | None = None
    """The filter the records were chosen under (None: none)."""

    def __iter__(self) -> Iterator[RetrievedRecord]:
        return iter(self.ranked)

    def __len__(self) -> int:
        return len(self.ranked)

    def top(self, k: int | None) -> list[RetrievedRecord]:
        """The first ``k`` records (all with None); a negative ``k`` is an error, not a slice
        that silently drops the last records."""
        if k is not None and k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        return self.ranked[:k]

    def doc_ids(self, k: int | None = None) -> list[str]:
        return [r.doc_id for r in self.top(k)]

    @property
    def active(self) -> list[RetrievedRecord]:
        return [r for r in self.ranked if r.status == "active"]

    @property
    def superseded(self) -> list[RetrievedRecord]:
        return [r for r in self.ranked if r.status == "superseded"]

    def get(self, doc_id: str) -> RetrievedRecord | None:
        return next((r for r in self.ranked if r.doc_id == doc_id), None)

    def to_dict(self, k: int | None = None) -> dict[str, Any]:
        # as_of and filters only where a query set them: other results are written as before.
        asked: dict[str, Any] = {} if self.as_of is None else {"as_of": as_of_label(self.as_of)}
        if self.filters:
            asked["filters"] = self.filters.to_dict()
        return {
            "query": self.query,
            **asked,
            "scope_ids": self.scope_ids,
            "records": [r.to_dict() for r in self.top(k)],
            "scope_posterior": self.scope_posterior.to_dict() if self.scope_posterior is not None else None,
            "scope_links": [link.to_dict() for link in self.scope_links],
            "ambiguity": self.ambiguity.to_dict() if self.ambiguity is not None else None,
            "timings_ms": self.timings_ms,
        }


class _TimestampRSSG(RSSG):
    """The paper's anchor-only baseline: a later record in the same scope bucket voids an
    earlier one, whatever the types. Wrong when several chains share a scope; kept to
    measure what the rule-based RSSG buys."""

    def __init__(self, records: dict[str, Record], members: set[str], scope_keys: tuple[str, ...]):
        self.members = members
        self.voided_by = {}
        self.contested_by = {}
        self.path_confidence = {}
        buckets: dict[tuple[str | None, ...], list[Record]] = {}
        for doc_id in members:
            rec = records[doc_id]
            buckets.setdefault(tuple(rec.scope.get(k) for k in scope_keys), []).append(rec)
        for group in buckets.values():
            for rec in group:
                later = {o.doc_id: "later_in_scope" for o in group if o.sort_time > rec.sort_time}
                if later:
                    self.voided_by[rec.doc_id] = later


def resolve_authority(
    graph: AuthorityGraph,
    policy: Policy,
    query: str,
    anchors: Sequence[FusedHit | Anchor],
    caller: CallerContext | None = None,
    *,
    resolution: ResolutionMode = "rules",
    scope_lookup_limit: int = 20,
    scope_ids: dict[str, list[str]] | None = None,
    posterior: ScopePosterior | None = None,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    filters: RecordFilter | None = None,
) -> RetrievalResult:
    """Stage 2 + 3: authority closure and active frontier for given Stage-1 anchors.

    Works on any :class:`AuthorityGraph` (a store's, or one built per query from a
    framework's nodes), so integrations resolve exactly as the core retriever does.

    With a ``caller``, records they may not read are never admitted; a record voided
    only by such records of its own tenant is still reported superseded, with
    ``hidden_superseder`` set, and keeps its place (an anchor is never ranked after its
    Stage-1 rank). Edges the policy's trust model refuses were never linked (see
    :mod:`car_rag.graph`): they reach a result only as ``disputed_by`` claims between records
    the caller may read.

    ``anchors`` are the core retriever's fused hits, or neutral :class:`Anchor` values from
    any other Stage 1 (a framework retriever). ``scope_ids`` are the scope values the query
    names (default: the policy's ``scope_patterns`` over the query); with a ``posterior``
    every record carries its scope's probability (its anchor's, where its own scope is not
    in the posterior).

    Only edges of at least ``min_confidence`` void (the safe frontier, Definition 9); Stage 2
    still follows weaker ones, so a record they alone void is returned active with its
    weak voiders beside it in ``contested_by``.

    A graph as of a date (:meth:`AuthorityGraph.as_of`) resolves the authority as it stood
    then, and the result says so. Records ``filters`` leaves out are never admitted either, but
    they still void: one they void is superseded, with nothing shown in its place
    (``filtered_superseder``), ranked as a record with a hidden superseder is.
    """
    if not 0.0 <= min_confidence <= 1.0:
        raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
    started = time.perf_counter()
    hits = [a.hit() if isinstance(a, Anchor) else a for a in anchors]
    may_read: Callable[[str], bool] = (lambda _d: True) if caller is None else (lambda d: caller.can_read(graph.records[d]))
    readable = may_read if not filters else (lambda d: may_read(d) and filters.matches(graph.records[d]))
    # member -> (group, role, anchor id): group orders chains (0 = named in the query).
    members: dict[str, tuple[int, Role, str | None]] = {}

    def admit(doc_id: str, group: int, role: Role, anchor_id: str | None) -> None:
        if doc_id in graph and readable(doc_id) and (doc_id not in members or group < members[doc_id][0]):
            members[doc_id] = (group, role if doc_id not in members else members[doc_id][1], anchor_id)

    scope_ids = policy.scope_ids_in(query) if scope_ids is None else scope_ids
    keys = list(scope_ids)
    # Keys named together narrow one lookup (CVE id and package: that CVE of that package).
    for values in itertools.product(*(scope_ids[k] for k in keys)) if keys else ():
        # Filter before capping: restricted records must not crowd readable ones out.
        matches = [r for r in graph.lookup(dict(zip(keys, values))) if readable(r.doc_id)]
        for record in matches[-scope_lookup_limit:]:
            admit(record.doc_id, 0, "scope_match", record.doc_id)
    for hit in hits:
        admit(hit.doc_id, hit.rank, "anchor", hit.doc_id)
    for doc_id, (group, _, _) in list(members.items()):
        for sup in sorted(_chain_above(graph, doc_id, resolution)):  # sorted: a tie of groups goes the same way in any graph
            admit(sup, group, "superseder", doc_id)
    disputed = resolution == "rules" and graph.has_disputes()
    if disputed:
        # A record that claims authority over a member by a relation the member's own claim
        # contradicts (Definition 10) is shown beside it, with what controls it.
        among = graph.disputes_among(members)
        groups = {d: members[d][0] for d in among}  # as they stand before any claimant is admitted
        for doc_id, claims in among.items():
            for claim in claims:
                if claim.untrusted and not readable(claim.superseder):
                    continue  # an untrusted claim is shown only where both records are
                for other in (claim.superseder, *sorted(graph.ancestors(claim.superseder))):
                    admit(other, groups[doc_id], "superseder", doc_id)

    if resolution == "rules":
        rssg = graph.rssg(members, min_confidence)
    else:
        rssg = _TimestampRSSG(graph.records, set(members), policy.scope_keys)
    # Voided by a record the reader may not read: as cheap as ever where all it reads is readable.
    hidden: set[str] = set()
    filtered: set[str] = set()
    for d in members if caller is not None or filters else ():
        above = graph.ancestors(d, min_confidence)
        if caller is not None and not all(map(may_read, above)) and _hidden_voider(graph, d, above, may_read):
            hidden.add(d)
        if filters and any(may_read(a) and not readable(a) for a in above):
            filtered.add(d)
    stage1 = {h.doc_id: h for h in hits}
    # The claims over each member that another member makes (so the reader may read both).
    among = graph.disputes_among(members) if disputed else {}
    claimed = {d: shown for d, claims in among.items() if (shown := [c for c in claims if c.superseder in members])}
    voids: dict[str, list[Edge]] = {}
    for target, sups in rssg.voided_by.items():
        for sup, rule in sups.items():
            voids.setdefault(sup, []).append(Edge(sup, target, rule, rssg.path_confidence.get((sup, target), 1.0)))

    items = []
    for doc_id, (_, role, anchor_id) in members.items():
        voided = rssg.voided_by.get(doc_id, {})
        # A record voided by something the caller cannot see does not control anything.
        controlling = [c for c in rssg.controlling(doc_id) if c not in hidden and c not in filtered]
        items.append(
            RetrievedRecord(
                record=graph.records[doc_id],
                status="superseded" if voided or doc_id in hidden or doc_id in filtered else "active",
                role=role,
                rank=0,
                anchor_id=anchor_id,
                stage1=stage1.get(doc_id),
                superseded_by=controlling,
                voided_by=[Edge(s, doc_id, r, rssg.path_confidence.get((s, doc_id), 1.0)) for s, r in sorted(voided.items())],
                voids=sorted(voids.get(doc_id, []), key=lambda e: e.target),
                contested_by=[Edge(s, doc_id, r, c) for s, (r, c) in sorted(rssg.contested_by.get(doc_id, {}).items())],
                disputed_by=sorted(claimed[doc_id], key=lambda e: e.superseder) if doc_id in claimed else [],
                hidden_superseder=doc_id in hidden and not controlling,
                filtered_superseder=doc_id in filtered and not controlling,
            )
        )

    def order(item: RetrievedRecord) -> tuple[bool, int, float, int, str]:
        # Displaced records (a shown record controls them) after the rest; then by chain
        # (query-named, else anchor rank); within a chain newest first, then Stage-1 rank.
        when = item.record.sort_time
        hit = item.stage1.rank if item.stage1 else 0
        return (item.displaced, members[item.doc_id][0], -when.timestamp(), hit, item.doc_id)

    ranked = sorted(items, key=order)
    # Nothing shown stands in for a record voided only by hidden ones: an anchor among them
    # is never ranked after its Stage-1 rank, so a caller asking for k records sees it.
    keep = sorted(
        (i.stage1.rank, i.doc_id) for i in items if (i.hidden_superseder or i.filtered_superseder) and i.stage1 is not None
    )
    for stage1_rank, doc_id in keep:
        at = next(n for n, i in enumerate(ranked) if i.doc_id == doc_id)
        if at >= stage1_rank:
            ranked.insert(stage1_rank - 1, ranked.pop(at))
    for rank, item in enumerate(ranked, 1):
        item.rank = rank
    if posterior is not None:
        for item in ranked:
            own = posterior.probability(item.record)
            anchor = graph.records.get(item.anchor_id) if item.anchor_id else None
            item.scope_probability = own if own is not None or anchor is None else posterior.probability(anchor)
    elapsed = (time.perf_counter() - started) * 1000
    as_of = graph.when if isinstance(graph, DatedGraph) else None
    return RetrievalResult(
        query, ranked, hits, scope_ids, {"stage23": elapsed}, policy, posterior, as_of=as_of, filters=filters or None
    )


def _hidden_voider(graph: AuthorityGraph, doc_id: str, above: set[str], readable: Callable[[str], bool]) -> bool:
    """Whether a record of ``above`` (what voids ``doc_id``) that the reader may not read counts for
    this reader: only one of ``doc_id``'s own tenant does (an embargoed fix within one
    organisation), so no other tenant's or publisher's private record changes, or dates, what
    this reader is shown."""
    tenant, records = graph.records[doc_id].tenant, graph.records
    return any(records[a].tenant == tenant and not readable(a) for a in above)


def _chain_above(graph: AuthorityGraph, doc_id: str, resolution: ResolutionMode) -> set[str]:
    if resolution == "rules":
        return graph.ancestors(doc_id)
    record = graph.records[doc_id]
    later = (r for r in graph.scope_bucket(record) if r.sort_time > record.sort_time)
    return {r.doc_id for r in later}
