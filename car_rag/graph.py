"""The authority graph: which record voids which, maintained incrementally.

Edges come from explicit ``supersedes`` lists and from policy rules applied pairwise, but
only between records the entity index puts in the same scope bucket, so adding a record
costs a few index lookups, not a corpus scan. Queries over the graph (superseders,
authority closure, active frontier, the per-query RSSG) follow edges upwards, from a
voided record to what voids it.

An edge carries a confidence (Definition 9: a rule's, or an explicit edge's own; 1.0 when
certain). A path is as sure as its weakest edge, so the closure at a threshold τ is the
closure over the edges at τ or above, and raising τ can only shrink it.

Under several relations (Definition 10) a pair that a hierarchy rule orders one way and
another relation the other way is *disputed*: neither edge is linked, both records keep
their authority, and the pair is kept apart (:meth:`AuthorityGraph.disputes`) to be shown.
An exception rule's edge suspends its target only while the exception is itself active,
and supersession does not pass through it.

An edge whose superseder the policy's trust model (:mod:`car_rag.trust`) does not trust
for its target (another tenant's record, say) is never linked: it is kept as a one-way
claim beside the disputes, so it voids nothing, closes no cycle, and is shown only where
both records are.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar, cast

from car_rag.policy import EXPLICIT_RULE, WILDCARD, Policy
from car_rag.records import Record

__all__ = ["Edge", "AuthorityGraph", "DatedGraph", "SupersessionCycleError", "RSSG", "exists_at"]

_NONE: frozenset[str] = frozenset()
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True)
class Edge:
    """``superseder`` voids ``target`` by ``rule`` (a policy rule name, or 'explicit'), with
    ``confidence`` (1.0: certain; for a path, its weakest edge's). A claim the trust model
    refuses carries the ``untrusted`` rule it breaks (a key of :data:`car_rag.trust.TRUST_REASONS`)."""

    superseder: str
    target: str
    rule: str
    confidence: float = 1.0
    untrusted: str | None = None


class SupersessionCycleError(ValueError):
    """Adding a record would make supersession circular (A voids B voids … voids A)."""

    def __init__(self, doc_id: str, cycle: list[str], edges: list[Edge]):
        self.doc_id = doc_id
        self.cycle = cycle
        self.edges = edges
        path = " ⊳ ".join(cycle)
        rules = ", ".join(f"{e.superseder} ⊳ {e.target} by {e.rule}" for e in edges)
        super().__init__(f"record {doc_id!r} would close a supersession cycle {path} ({rules})")


class AuthorityGraph:
    """Entity index plus supersession edges over a set of records, under one policy."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.records: dict[str, Record] = {}
        self._by_scope: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_type: dict[str, set[str]] = defaultdict(set)
        self._up: dict[str, dict[str, str]] = defaultdict(dict)  # target -> {superseder: rule}
        self._down: dict[str, dict[str, str]] = defaultdict(dict)  # superseder -> {target: rule}
        self._weak: dict[tuple[str, str], float] = {}  # (superseder, target) -> confidence, for edges below 1
        self._explicit_waiting: dict[str, set[str]] = defaultdict(set)  # absent target -> superseders
        self._disputes: dict[str, dict[str, Edge]] = defaultdict(dict)  # record -> {other: other's claim over it}
        self._claims: dict[str, set[str]] = defaultdict(set)  # record -> the records it has a claim over
        self._value_log: list[tuple[str, str]] = []  # (key, value) pairs in the order they first got a record
        self._times: dict[str, float] = {}  # record -> its date in seconds (-inf: undated), what as_of views compare
        self._dated: dict[datetime, DatedGraph] = {}  # the last views as_of gave, newest last
        self._dated_lock = threading.Lock()

    # ------------------------------------------------------------------ building
    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.records

    def add(self, record: Record) -> list[Edge]:
        """Insert or replace a record; returns the edges it now takes part in.

        Raises :class:`SupersessionCycleError` and leaves the graph as it was if the record
        would close a cycle.
        """
        previous = self.records.get(record.doc_id)
        if previous is not None:
            self.remove(record.doc_id)
        edges, disputed = self._edges_for(record)
        self._insert(record, edges, disputed)
        cycle = self._cycle_through(record.doc_id)
        if cycle:
            self.remove(record.doc_id)
            if previous is not None:
                self._insert(previous, *self._edges_for(previous))
            raise SupersessionCycleError(record.doc_id, cycle, self._path_edges(cycle, edges))
        return edges

    def remove(self, doc_id: str) -> None:
        record = self.records.pop(doc_id)
        del self._times[doc_id]
        for key, value in record.scope.items():
            self._by_scope[(key, value)].discard(doc_id)
        self._by_type[record.doc_type].discard(doc_id)
        for sup in self._up.pop(doc_id, {}):
            self._down[sup].pop(doc_id, None)
            self._weak.pop((sup, doc_id), None)
            if doc_id in self.records[sup].supersedes:
                self._explicit_waiting[doc_id].add(sup)
        for tgt in self._down.pop(doc_id, {}):
            self._up[tgt].pop(doc_id, None)
            self._weak.pop((doc_id, tgt), None)
        for tgt in record.supersedes:
            self._explicit_waiting[tgt].discard(doc_id)
        for other in self._disputes.pop(doc_id, {}):
            self._disputes[other].pop(doc_id, None)
            self._claims[other].discard(doc_id)
            if doc_id in self.records[other].supersedes:
                self._explicit_waiting[doc_id].add(other)
        for tgt in self._claims.pop(doc_id, set()):
            self._disputes[tgt].pop(doc_id, None)

    def load_edges(self, records: Iterable[Record], edges: Iterable[Edge], disputed: Iterable[Edge] = ()) -> None:
        """Restore a persisted graph without re-running rules or cycle checks (``disputed``:
        the claims of disputed pairs, both directions)."""
        for record in records:
            self._index(record)
        trust = self.policy.trust
        for edge in edges:
            # A store linked before the trust model keeps an untrusted edge as a claim from now on.
            broken = trust.distrust(self.records[edge.superseder], self.records[edge.target])
            self._claim(replace(edge, untrusted=broken)) if broken else self._link(edge)
        for edge in disputed:
            # What a claim breaks is not stored: it follows from the two records.
            self._claim(replace(edge, untrusted=trust.distrust(self.records[edge.superseder], self.records[edge.target])))
        for record in self.records.values():
            for tgt in record.supersedes:
                if tgt not in self.records:
                    self._explicit_waiting[tgt].add(record.doc_id)

    def _index(self, record: Record) -> None:
        self.records[record.doc_id] = record
        self._times[record.doc_id] = -math.inf if record.time is None else record.time.timestamp()
        for key, value in record.scope.items():
            bucket = self._by_scope[(key, value)]
            if not bucket:
                self._value_log.append((key, value))
            bucket.add(record.doc_id)
        self._by_type[record.doc_type].add(record.doc_id)

    def _link(self, edge: Edge) -> None:
        self._up[edge.target][edge.superseder] = edge.rule
        self._down[edge.superseder][edge.target] = edge.rule
        if edge.confidence < 1.0:
            self._weak[(edge.superseder, edge.target)] = edge.confidence

    def _claim(self, edge: Edge) -> None:
        """Keep a claim that is not linked: one side of a disputed pair, or an untrusted edge."""
        self._disputes[edge.target][edge.superseder] = edge
        self._claims[edge.superseder].add(edge.target)

    def _insert(self, record: Record, edges: list[Edge], disputed: list[Edge]) -> None:
        self._index(record)
        for tgt in record.supersedes:
            if tgt not in self.records:
                self._explicit_waiting[tgt].add(record.doc_id)
        self._explicit_waiting.pop(record.doc_id, None)
        for edge in edges:
            self._link(edge)
        for edge in disputed:
            self._claim(edge)

    def _candidates(self, keys: tuple[str, ...], scope: Mapping[str, str], doc_type: str) -> Iterable[str]:
        if not keys:
            return self._by_type.get(doc_type, ()) if doc_type != WILDCARD else self.records.keys()
        buckets = []
        for key in keys:
            value = scope.get(key)
            if value is None:
                return ()
            buckets.append(self._by_scope.get((key, value), set()))
        buckets.sort(key=len)
        return buckets[0].intersection(*buckets[1:]) if len(buckets) > 1 else buckets[0]

    def _edges_for(self, record: Record, bounded: bool = True) -> tuple[list[Edge], list[Edge]]:
        """Every trusted edge between ``record`` and records already in the graph, and the
        claims that are not linked: the untrusted edges (``bounded``: as many as are kept),
        and pairs a hierarchy rule orders against another relation (disputed)."""
        found: dict[tuple[str, str], tuple[str, float]] = {}
        ranked: set[tuple[str, str]] = set()  # pairs a hierarchy rule orders
        hierarchical = self.policy.hierarchical_rules

        def note(sup: str, tgt: str, rule: str, confidence: float) -> None:
            # The surest reason for a pair; on a tie the first found (explicit edges come first).
            if rule in hierarchical:
                ranked.add((sup, tgt))
            if (sup, tgt) not in found or confidence > found[(sup, tgt)][1]:
                found[(sup, tgt)] = (rule, confidence)

        for tgt in record.supersedes:
            if tgt in self.records:
                note(record.doc_id, tgt, EXPLICIT_RULE, record.edge_confidence(tgt))
        for sup in self._explicit_waiting.get(record.doc_id, ()):
            if sup in self.records:
                note(sup, record.doc_id, EXPLICIT_RULE, self.records[sup].edge_confidence(record.doc_id))
        for rule in self.policy.edge_rules:
            levels = self.policy.hierarchy_of(rule)
            if rule.trigger in (WILDCARD, record.doc_type):
                for other in self._candidates(rule.within, record.scope, rule.target):
                    if other != record.doc_id and rule.fires(record, self.records[other], levels):
                        note(record.doc_id, other, rule.name, rule.confidence)
            if rule.target in (WILDCARD, record.doc_type):
                for other in self._candidates(rule.within, record.scope, rule.trigger):
                    if other != record.doc_id and rule.fires(self.records[other], record, levels):
                        note(other, record.doc_id, rule.name, rule.confidence)
        edges: dict[tuple[str, str], Edge] = {}
        untrusted: list[Edge] = []
        for (sup, tgt), (name, confidence) in found.items():
            # One check for rules, explicit and waiting edges alike, whatever the dates.
            broken = self.policy.trust.distrust(self._record(sup, record), self._record(tgt, record))
            if broken:
                untrusted.append(Edge(sup, tgt, name, confidence, broken))
            else:
                edges[(sup, tgt)] = Edge(sup, tgt, name, confidence)
        # Ordered both ways, with a hierarchy on one side: two relations disagree (Definition 10).
        disputed = [e for (s, t), e in edges.items() if (t, s) in edges and ranked & {(s, t), (t, s)}]
        for e in disputed:
            del edges[(e.superseder, e.target)]
        return list(edges.values()), disputed + (self._bounded(untrusted, record) if bounded else untrusted)

    def _bounded(self, untrusted: list[Edge], record: Record) -> list[Edge]:
        """At most ``trust.claims_per_write`` of the untrusted claims one write makes, per pair of
        tenants (superseder's, target's): the surest first, then those with the newest other record;
        none over a record that already holds that many from the superseder's tenant. So a record
        holds at most that many claims of any one tenant, and a reader is shown at most that many
        of its own tenant's and of public records'.

        Counted per pair so that which claims a reader is shown depends only on records of the
        tenants it already sees in them: another tenant's records never crowd one out."""
        cap = self.policy.trust.claims_per_write
        by_pair: dict[tuple[str | None, str | None], list[tuple[Edge, Record]]] = defaultdict(list)
        for e in untrusted:
            sup, tgt = self._record(e.superseder, record), self._record(e.target, record)
            if sup is record and self._claims_of(record.tenant, e.target) >= cap:
                continue
            by_pair[(sup.tenant, tgt.tenant)].append((e, tgt if sup is record else sup))
        kept: list[Edge] = []
        for claims in by_pair.values():
            claims.sort(key=lambda c: c[1].doc_id)  # a tie goes the same way in any graph
            claims.sort(key=lambda c: (c[0].confidence, c[1].sort_time), reverse=True)
            kept += [e for e, _ in claims[:cap]]
        return kept

    def _claims_of(self, tenant: str | None, target: str) -> int:
        """How many untrusted claims records of ``tenant`` hold over ``target``."""
        held = self._disputes.get(target, {})
        return sum(1 for sup, e in held.items() if e.untrusted and self.records[sup].tenant == tenant)

    def _record(self, doc_id: str, adding: Record) -> Record:
        return adding if doc_id == adding.doc_id else self.records[doc_id]

    def claims_by(self, record: Record) -> list[Edge]:
        """The untrusted edges ``record`` would claim over records already in the graph, were it
        added (a write a deployment refuses; edges to ids not yet written are not among them),
        before :attr:`~car_rag.trust.Trust.claims_per_write` bounds them."""
        _, claims = self._edges_for(record, bounded=False)
        return [c for c in claims if c.untrusted and c.superseder == record.doc_id]

    def _cycle_through(self, doc_id: str) -> list[str]:
        """A path doc_id ⊳ … ⊳ doc_id if one exists (following superseders upwards)."""
        parent: dict[str, str] = {}
        stack = [doc_id]
        while stack:
            node = stack.pop()
            for sup in self._up.get(node, ()):
                if sup == doc_id:
                    path = [node]
                    while path[-1] != doc_id:
                        path.append(parent[path[-1]])
                    return [doc_id, *path]
                if sup not in parent:
                    parent[sup] = node
                    stack.append(sup)
        return []

    def _path_edges(self, cycle: list[str], edges: list[Edge]) -> list[Edge]:
        by_pair = {(e.superseder, e.target): e for e in edges}
        out = []
        for sup, tgt in zip(cycle, cycle[1:]):
            rule = by_pair.get((sup, tgt)) or Edge(sup, tgt, self._up.get(tgt, {}).get(sup, "?"), self.confidence(sup, tgt))
            out.append(rule)
        return out

    # ------------------------------------------------------------------ reading
    def confidence(self, superseder: str, target: str) -> float:
        """The confidence of the edge ``superseder`` ⊳ ``target`` (1.0 for a certain one)."""
        return self._weak.get((superseder, target), 1.0)

    def edges(self) -> list[Edge]:
        return [Edge(s, t, r, self.confidence(s, t)) for t, sups in self._up.items() for s, r in sups.items()]

    def superseders(self, doc_id: str) -> list[Edge]:
        """Records that directly void ``doc_id``."""
        return [Edge(s, doc_id, r, self.confidence(s, doc_id)) for s, r in self._up.get(doc_id, {}).items()]

    def superseded_by(self, doc_id: str) -> list[Edge]:
        """Records that ``doc_id`` directly voids."""
        return [Edge(doc_id, t, r, self.confidence(doc_id, t)) for t, r in self._down.get(doc_id, {}).items()]

    def is_superseded(self, doc_id: str) -> bool:
        return bool(self._up.get(doc_id))

    def disputes(self, doc_id: str) -> list[Edge]:
        """The claims over ``doc_id`` that a disputed pair makes (other ⊳ doc_id by one
        relation while doc_id ⊳ other by another): neither is linked."""
        return list(self._disputes.get(doc_id, {}).values())

    def disputes_among(self, doc_ids: Iterable[str]) -> dict[str, list[Edge]]:
        """:meth:`disputes` of each of ``doc_ids`` that has any (one call per query, not per record)."""
        held = self._disputes
        return {d: list(claims.values()) for d in doc_ids if (claims := held.get(d))}

    def claims_involving(self, doc_id: str) -> list[Edge]:
        """Every claim that is not linked with ``doc_id`` at either end (what a store persists)."""
        made = [self._disputes[t][doc_id] for t in self._claims.get(doc_id, ())]
        return self.disputes(doc_id) + made

    def has_disputes(self) -> bool:
        """Whether any pair is disputed (queries skip the dispute step where none is)."""
        return bool(self._disputes)

    def disputed_edges(self) -> list[Edge]:
        """Every claim of every disputed pair (both directions)."""
        return [e for claims in self._disputes.values() for e in claims.values()]

    def ancestors(self, doc_id: str, min_confidence: float = 0.0) -> set[str]:
        """Everything that voids ``doc_id``, transitively, over edges of at least ``min_confidence``."""
        seen: set[str] = set()
        stack = [doc_id]
        weak = self._weak if min_confidence > 0.0 else {}
        while stack:
            node = stack.pop()
            for sup in self._up.get(node, ()):
                if sup not in seen and weak.get((sup, node), 1.0) >= min_confidence:
                    seen.add(sup)
                    stack.append(sup)
        return seen

    def closure(self, doc_ids: Iterable[str]) -> set[str]:
        """Authority closure: the records plus everything that voids them, transitively."""
        out: set[str] = set()
        for doc_id in doc_ids:
            if doc_id not in out:
                out.add(doc_id)
                out |= self.ancestors(doc_id)
        return out

    def frontier(self, doc_ids: Iterable[str]) -> set[str]:
        """Active frontier: members of the set that no member voids, transitively."""
        members = set(doc_ids)
        return {d for d in members if not (self.ancestors(d) & members)}

    def lookup(self, scope: Mapping[str, str]) -> list[Record]:
        """Entity-index lookup: records whose scope has every given key/value, oldest first."""
        ids = self._candidates(tuple(scope), scope, WILDCARD) if scope else ()
        return sorted((self.records[i] for i in ids), key=lambda r: (r.sort_time, r.doc_id))

    def holds(self, key: str, value: str) -> bool:
        """Whether some record's scope has ``key`` = ``value`` (one entity-index probe)."""
        return bool(self._by_scope.get((key, value)))

    def scope_values_since(self, position: int) -> tuple[list[tuple[str, str]], int]:
        """Scope ``(key, value)`` pairs that got their first record since ``position`` of this
        graph's log, and the log's new end: what an index of scope values (scope linking)
        needs to stay in step with inserts without rescanning. A pair may repeat (removed,
        then held again); whether it is still held is :meth:`holds`'s answer."""
        return self._value_log[position:], len(self._value_log)

    def scope_members(self, key: str, value: str) -> Set[str]:
        """Ids of the records whose scope has ``key`` = ``value`` (a read-only view)."""
        return self._by_scope.get((key, value), _NONE)

    def scope_bucket(self, record: Record) -> list[Record]:
        """Records sharing ``record``'s scope on every policy scope key it has."""
        keys = {k: record.scope[k] for k in self.policy.scope_keys if k in record.scope}
        return self.lookup(keys)

    def rssg(self, doc_ids: Iterable[str], min_confidence: float = 0.0) -> RSSG:
        """The supersession graph restricted to one query's retrieved set, at confidence τ."""
        return RSSG(self, set(doc_ids), min_confidence)

    def as_of(self, when: datetime) -> DatedGraph:
        """This graph as it stood at ``when`` (see :class:`DatedGraph`); the same view for the
        same instant while it is among the last few asked for, so what is derived from a
        view (its scope-value index) is built once per date."""
        with self._dated_lock:  # queries of several threads ask at once
            view = self._dated.pop(when, None)  # never `or`: a graph's truth is its length, counted
            if view is None:
                view = DatedGraph(self, when)
            if len(self._dated) >= 16:
                self._dated.pop(next(iter(self._dated)))
            self._dated[when] = view
        return view


def exists_at(record: Record, when: datetime) -> bool:
    """Whether ``record`` existed at ``when``: its :attr:`~car_rag.records.Record.time`
    (``effective_at``, else ``published_at``) is not after it. An undated record exists at every date."""
    return record.time is None or record.time <= when


class _Present(Mapping[_K, _V]):
    """A read-only view of one of a graph's indexes keeping what existed at a date: ``keep``
    narrows each value (a bucket of ids, a record's superseders) to the records that did."""

    def __init__(self, base: Mapping[_K, _V], keep: Callable[[_K, _V], _V | None]) -> None:
        self._base, self._keep = base, keep

    def __getitem__(self, key: _K) -> _V:
        if key not in self._base:  # never base[key]: a defaultdict would grow
            raise KeyError(key)
        value = self._keep(key, self._base[key])
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[_K]:
        return (k for k in self._base if k in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]  # any key: what the base does not hold is not here
        except KeyError:
            return False
        return True


class DatedGraph(AuthorityGraph):
    """An :class:`AuthorityGraph` as it stood at ``when``: only the records that existed then
    (:func:`exists_at`), and only the edges and claims between them. Every edge is a pair's
    (rules fire pairwise), so this is the graph a store of those records alone would build,
    read through views of the live graph: nothing is copied, inserts show as they come, and
    it cannot be written to."""

    def __init__(self, graph: AuthorityGraph, when: datetime) -> None:
        # Not AuthorityGraph.__init__: every index is a view of ``graph``'s. The reading methods
        # use only get, [] and `in` of them, which the views answer.
        self.policy, self.when, self.base = graph.policy, when, graph
        records, times, moment = graph.records, graph._times, when.timestamp()

        def exists(doc_id: str) -> bool:
            # exists_at, on the dates the graph keeps in seconds (a query's many lookups compare floats)
            return times.get(doc_id, math.inf) <= moment

        def ids(_key: object, held: set[str]) -> set[str]:
            return {d for d in held if times.get(d, math.inf) <= moment}

        def by_id(key: str, value: _V) -> _V | None:
            return value if exists(key) else None

        def towards(_key: str, others: Mapping[str, _V]) -> Mapping[str, _V]:
            return {o: v for o, v in others.items() if exists(o)}

        self.exists = exists
        self.records = cast(dict[str, Record], _Present(records, by_id))
        self._by_scope = cast(defaultdict[tuple[str, str], set[str]], _Present(graph._by_scope, ids))
        self._by_type = cast(defaultdict[str, set[str]], _Present(graph._by_type, ids))
        self._up = cast(defaultdict[str, dict[str, str]], _Present(graph._up, towards))
        self._down = cast(defaultdict[str, dict[str, str]], _Present(graph._down, towards))
        self._disputes = cast(defaultdict[str, dict[str, Edge]], _Present(graph._disputes, towards))
        self._claims = cast(defaultdict[str, set[str]], _Present(graph._claims, ids))
        self._weak = graph._weak
        self._value_log = graph._value_log

    def add(self, record: Record) -> list[Edge]:
        raise TypeError("a graph as of a date is read-only: add records to the store's graph")

    def remove(self, doc_id: str) -> None:
        raise TypeError("a graph as of a date is read-only: remove records from the store's graph")

    def load_edges(self, records: Iterable[Record], edges: Iterable[Edge], disputed: Iterable[Edge] = ()) -> None:
        raise TypeError("a graph as of a date is read-only")

    def as_of(self, when: datetime) -> DatedGraph:
        return self.base.as_of(min(when, self.when))

    def has_disputes(self) -> bool:
        # Only lets a query skip the dispute step: the claims it then reads are this date's.
        return self.base.has_disputes()

    def scope_values_since(self, position: int) -> tuple[list[tuple[str, str]], int]:
        return self.base.scope_values_since(position)


class RSSG:
    """Retrieved-Set Supersession Graph: who voids whom among one query's records.

    Supersession through a record outside the set still counts (A ⊳ B ⊳ C with only A and
    C retrieved: C is voided by A), and is reported with the first rule on the path. Only
    paths whose every edge reaches ``min_confidence`` void (the safe frontier of
    Definition 9); members reaching a record only through weaker paths are kept in
    ``contested_by`` with the confidence of their surest path. An exception's edge counts
    only as a record's own suspension, while no member voids (revokes) the exception.
    """

    def __init__(self, graph: AuthorityGraph, members: set[str], min_confidence: float = 0.0):
        self.members = members
        self._graph, self._tau = graph, min_confidence
        self._exceptions = graph.policy.exception_rules
        self._memo: dict[str, tuple[dict[str, str], bool]] = {}
        self.voided_by: dict[str, dict[str, str]] = {}
        self.contested_by: dict[str, dict[str, tuple[str, float]]] = {}
        self.path_confidence: dict[tuple[str, str], float] = {}
        """(voider, target) -> confidence of the surest path, where below 1."""
        for doc_id in members:
            hits, uncertain = self._voiders(doc_id)
            if hits:
                self.voided_by[doc_id] = hits
            if not uncertain:
                continue
            for sup, (rule, confidence) in self._surest_paths(doc_id).items():
                if confidence < 1.0:
                    self.path_confidence[(sup, doc_id)] = confidence
                if sup not in hits:
                    self.contested_by.setdefault(doc_id, {})[sup] = (rule, confidence)

    def _suspends(self, exception: str, doc_id: str, node: str) -> bool:
        """Whether an exception's edge into ``node`` suspends ``doc_id``: only its own (no
        supersession passes through an exception) and only while no member revokes it."""
        return node == doc_id and exception in self.members and not self._voiders(exception)[0]

    def _voiders(self, doc_id: str) -> tuple[dict[str, str], bool]:
        """Members voiding ``doc_id`` at ``min_confidence``, each with the rule of the first hop
        towards it, and whether any edge on the way was less than certain."""
        if doc_id in self._memo:
            return self._memo[doc_id]
        graph, weak, exceptions = self._graph, self._graph._weak, self._exceptions
        found: dict[str, str] = {}
        first_rule: dict[str, str] = {}
        uncertain = False
        stack = [doc_id]
        while stack:
            node = stack.pop()
            for sup, rule in graph._up.get(node, {}).items():
                if weak and (sup, node) in weak:
                    uncertain = True
                    if weak[(sup, node)] < self._tau:
                        continue
                if sup in first_rule:
                    continue
                if exceptions and rule in exceptions:
                    if self._suspends(sup, doc_id, node):
                        first_rule[sup] = found[sup] = rule
                    continue
                first_rule[sup] = rule if node == doc_id else first_rule[node]
                if sup in self.members:
                    found[sup] = first_rule[sup]
                stack.append(sup)
        self._memo[doc_id] = (found, uncertain)
        return found, uncertain

    def _surest_paths(self, doc_id: str) -> dict[str, tuple[str, float]]:
        """Members voiding ``doc_id`` by any path, each with the first hop's rule and the
        confidence of its surest path (the widest path: its weakest edge is as strong as can be)."""
        graph = self._graph
        best: dict[str, float] = {doc_id: 1.0}
        first_rule: dict[str, str] = {}
        heap = [(-1.0, doc_id)]
        while heap:
            negative, node = heapq.heappop(heap)
            if -negative < best[node]:
                continue
            for sup, rule in graph._up.get(node, {}).items():
                width = min(-negative, graph.confidence(sup, node))
                if width <= best.get(sup, -1.0):
                    continue
                if rule in self._exceptions:
                    if self._suspends(sup, doc_id, node):
                        best[sup], first_rule[sup] = width, rule
                    continue
                best[sup] = width
                first_rule[sup] = rule if node == doc_id else first_rule[node]
                heapq.heappush(heap, (-width, sup))
        return {s: (first_rule[s], best[s]) for s in first_rule if s in self.members}

    @property
    def frontier(self) -> set[str]:
        return self.members - set(self.voided_by)

    def controlling(self, doc_id: str) -> list[str]:
        """Frontier members that void ``doc_id`` (empty if it is itself active)."""
        return sorted(s for s in self.voided_by.get(doc_id, {}) if s not in self.voided_by)
