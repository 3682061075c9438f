"""Stage 2 over a store car-rag does not own: lookup planning, the closure, the adapter contract.

Authority resolution never searches by similarity. :class:`AuthorityClosure` says which
records to fetch by metadata filter (:class:`ScopeQuery`: the scope an anchor shares with
what could void it, optionally of the superseding types, or the records naming it in their
explicit ``supersedes``), absorbs what the store returned, and repeats from every record
found until the authority closure is complete; then :func:`car_rag.adapters.resolve_authority`
builds the active frontier. An integration is an :class:`AuthorityStore`: it translates
queries into its store's filter language and hands back :class:`StoredItem` values.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from car_rag.channels.base import ChannelHit
from car_rag.channels.fusion import FusedHit, calibrated_fusion
from car_rag.eligibility import CallerContext
from car_rag.graph import AuthorityGraph, SupersessionCycleError
from car_rag.latent_scope import QuestionScope, detect_ambiguity, read_question_scope
from car_rag.layout import LayoutError, RecordLayout, decode_list
from car_rag.policy import WILDCARD, Policy
from car_rag.records import Record
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, Anchor, RetrievalResult, resolve_authority

__all__ = [
    "SCORE_SCALES",
    "AuthorityClosure",
    "AuthorityStore",
    "ScopeQuery",
    "StoredItem",
    "aresolve_closure",
    "minimal_queries",
    "resolve_closure",
]


SCORE_SCALES: Mapping[str, str] = {
    "dense": "dense",
    "bm25": "bm25",
    "VectorIndexRetriever": "dense",
    "VectorStoreRetriever": "dense",
    "BM25Retriever": "bm25",
}
"""A Stage-1 channel (an integration names its retriever's type) -> the scale of its scores
that calibrated fusion reads (``dense``: cosine similarity; ``bm25``: relative to the best)."""


@dataclass(frozen=True)
class ScopeQuery:
    """Records whose metadata has every ``key == value`` in ``scope`` and, unless
    ``doc_types`` is None, a doc_type among them; or (``naming``) the records whose explicit
    ``supersedes`` lists that doc id, wherever their scope. Build with :meth:`make`."""

    scope: tuple[tuple[str, str], ...] = ()
    doc_types: tuple[str, ...] | None = None
    naming: str | None = None

    @classmethod
    def make(cls, scope: Mapping[str, str] | Iterable[tuple[str, str]], doc_types: Iterable[str] | None = None) -> ScopeQuery:
        items = tuple(sorted(dict(scope).items()))
        types = None if doc_types is None else tuple(sorted(set(doc_types)))
        if not items and not types:
            raise ValueError("a scope query needs a scope or doc types (it would match every record)")
        return cls(items, types)

    @classmethod
    def superseders_naming(cls, doc_id: str) -> ScopeQuery:
        """Records that void ``doc_id`` by an explicit edge: found across scopes."""
        return cls(naming=doc_id)

    def covers(self, other: ScopeQuery) -> bool:
        """Whether every record ``other`` matches is matched by this query too."""
        if self.naming is not None or other.naming is not None:
            return self == other
        if not set(self.scope) <= set(other.scope):
            return False
        return self.doc_types is None or (other.doc_types is not None and set(other.doc_types) <= set(self.doc_types))

    def matches(self, meta: Mapping[str, Any], layout: RecordLayout | None = None) -> bool:
        """Whether flat metadata in ``layout`` (car-rag's by default) satisfies the query."""
        layout = layout or _LAYOUT
        if self.naming is not None:
            try:
                return self.naming in decode_list(meta.get("supersedes"))
            except (LayoutError, ValueError):
                return False
        if any(meta.get(k) != v for k, v in self.scope):
            return False
        return self.doc_types is None or meta.get(layout.doc_type_key) in self.doc_types


_LAYOUT = RecordLayout()


def minimal_queries(queries: Iterable[ScopeQuery]) -> list[ScopeQuery]:
    """Drop queries another one covers; same-scope queries merge their types."""
    by_scope: dict[tuple[tuple[str, str], ...], set[str] | None] = {}
    naming: dict[ScopeQuery, None] = {}
    for q in queries:
        if q.naming is not None:
            naming[q] = None
        elif q.scope in by_scope:
            known = by_scope[q.scope]
            by_scope[q.scope] = None if known is None or q.doc_types is None else known | set(q.doc_types)
        else:
            by_scope[q.scope] = None if q.doc_types is None else set(q.doc_types)
    merged = [ScopeQuery(s, None if t is None else tuple(sorted(t))) for s, t in by_scope.items()]
    return [q for q in merged if not any(o is not q and o.covers(q) for o in merged)] + list(naming)


@dataclass(frozen=True)
class StoredItem:
    """One item a store returned: its flat metadata, its text, the store's own id for it
    (used when the metadata has no doc id), and the adapter's object (node, document)."""

    metadata: Mapping[str, Any]
    text: str
    store_id: str | None = None
    source: Any = None


class AuthorityStore(ABC):
    """What an integration implements: the items matching any of the queries, each once."""

    @abstractmethod
    def fetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        """Items matching at least one query (filter only: no similarity, no limit)."""

    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        """Async :meth:`fetch`; by default it runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(self.fetch, queries)


class AuthorityClosure:
    """Stage 2 for one query, without I/O: the queries to fetch next, the records found, and
    the point where nothing new can void a member (the closure of the anchors and of the
    records in the scope of ids the query names). Sync and async loops share it."""

    def __init__(
        self,
        policy: Policy,
        query: str,
        *,
        layout: RecordLayout | None = None,
        scope_lookup_limit: int = 20,
        max_rounds: int = 32,
        foreign_keys: frozenset[str] = frozenset(),
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    ):
        if max_rounds < 1:
            raise ValueError("max_rounds must be >= 1")
        if not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
        self.min_confidence = min_confidence
        self.policy, self.query, self.layout = policy, query, layout or _LAYOUT
        self.scope_lookup_limit, self.max_rounds, self.foreign_keys = scope_lookup_limit, max_rounds, foreign_keys
        self.graph = AuthorityGraph(policy)
        self.sources: dict[str, Any] = {}
        """doc_id -> the adapter's object for the record (the first one absorbed)."""
        self.anchors: list[Anchor] = []
        self.roots: list[str] = []
        self.lookups = self.rounds = 0
        self._issued: list[ScopeQuery] = []
        self._expanded: set[str] = set()
        self._spellings: dict[str, list[str]] = {}
        """Scope key -> the metadata fields that also hold it in a framework's store (record_scope.metadata_fields)."""
        for name, key in policy.record_scope.metadata_fields.items():
            self._spellings.setdefault(key, []).append(name)
        scope_ids = policy.scope_ids_in(query)
        keys = list(scope_ids)
        # Keys named together narrow one lookup, as in resolve_authority.
        self._named = [dict(zip(keys, v)) for v in itertools.product(*(scope_ids[k] for k in keys))] if keys else []
        if scope_lookup_limit <= 0:
            self._named = []

    # ------------------------------------------------------------------ records
    def read(self, item: StoredItem) -> Record:
        """The record an item's metadata describes (raises :class:`LayoutError`)."""
        return self.layout.record(item.metadata, item.text, self.policy, default_id=item.store_id, foreign_keys=self.foreign_keys)

    def add(self, record: Record, source: Any = None) -> bool:
        """Admit a record to this query's graph; False (with a warning) if it closes a cycle."""
        if record.doc_id in self.graph:
            return True
        try:
            self.graph.add(record)
        except SupersessionCycleError as exc:
            warnings.warn(f"car-rag: skipping {record.doc_id!r}: {exc}", stacklevel=3)
            return False
        self.sources[record.doc_id] = source
        return True

    def add_anchor(self, record: Record, anchor: Anchor, source: Any = None) -> bool:
        """A Stage-1 hit: admitted, and a root of the closure."""
        if not self.add(record, source):
            return False
        self.anchors.append(anchor)
        self.roots.append(record.doc_id)
        return True

    def absorb(self, items: Iterable[StoredItem]) -> None:
        """Take the items one lookup round returned; unusable ones are skipped with a warning."""
        for item in items:
            try:
                record = self.read(item)
            except LayoutError as exc:
                warnings.warn(f"car-rag: Stage-2 lookup returned an unusable document: {exc}", stacklevel=2)
                continue
            self.add(record, item.source)

    # ------------------------------------------------------------------ planning
    def _spelled(self, scope: Mapping[str, str], doc_types: Iterable[str] | None = None) -> list[ScopeQuery]:
        """The query for ``scope`` once per way a store may name its keys: the scope key, and
        each metadata field the policy maps to it, so records a framework stored under its own
        metadata names (``cve_id`` for scope key ``cve``) are found too."""
        options = [[(key, value)] + [(name, value) for name in self._spellings.get(key, ())] for key, value in scope.items()]
        return [ScopeQuery.make(pairs, doc_types) for pairs in itertools.product(*options)]

    def _voider_queries(self, record: Record) -> list[ScopeQuery]:
        """Queries matching every record that could void ``record``: its scope bucket, each
        rule's ``within`` scope of the rule's trigger type, and explicit edges from anywhere."""
        out = [ScopeQuery.superseders_naming(record.doc_id)]
        bucket = {k: record.scope[k] for k in self.policy.scope_keys if k in record.scope}
        if bucket:  # within-scope explicit edges for stores that cannot answer ``naming``
            out += self._spelled(bucket)
        for rule in self.policy.rules:
            if rule.target not in (WILDCARD, record.doc_type) or any(k not in record.scope for k in rule.within):
                continue
            types = None if rule.trigger == WILDCARD else [rule.trigger]
            if not rule.within and types is None:
                warnings.warn(f"car-rag: rule {rule.name!r} is global and untyped; Stage 2 cannot look it up", stacklevel=3)
                continue
            out += self._spelled({k: record.scope[k] for k in rule.within}, types)
        return out

    def next_queries(self, caller: CallerContext | None = None) -> list[ScopeQuery]:
        """Queries for the next lookup round; empty when the closure is complete. ``caller``: the
        reader the result is for (records it may not read are no roots)."""
        planned = [q for scope in self._named for q in self._spelled(scope)] if self.rounds == 0 else []
        if self.rounds == 1 and self._named:
            # The records resolve_authority admits for the scope ids the query names: filtered
            # before the cap, as there, so another tenant's many records crowd out none of the reader's.
            for scope in self._named:
                matches = [r for r in self.graph.lookup(scope) if caller is None or caller.can_read(r)]
                for record in matches[-self.scope_lookup_limit :]:
                    if record.doc_id not in self.roots:
                        self.roots.append(record.doc_id)
        todo = sorted(self.graph.closure(self.roots) - self._expanded)
        self._expanded.update(todo)
        planned += [q for doc_id in todo for q in self._voider_queries(self.graph.records[doc_id])]
        fresh = [q for q in minimal_queries(planned) if not any(old.covers(q) for old in self._issued)]
        self._issued.extend(fresh)
        self.lookups += len(fresh)
        self.rounds += bool(fresh)
        return fresh

    def steps(self, caller: CallerContext | None = None) -> Iterable[list[ScopeQuery]]:
        """The lookup rounds for ``caller``'s result, each a list of queries to answer with
        :meth:`absorb` before the next; stops at the closure, or at ``max_rounds`` with a warning."""
        queries = self.next_queries(caller)
        while queries:
            yield queries
            if self.rounds >= self.max_rounds:
                if self.next_queries(caller):
                    warnings.warn(
                        f"car-rag: Stage 2 stopped after max_rounds={self.max_rounds} lookup rounds "
                        "before reaching the authority closure",
                        stacklevel=2,
                    )
                return
            queries = self.next_queries(caller)

    # ------------------------------------------------------------------ result
    def finish(self, caller: CallerContext | None = None) -> RetrievalResult:
        """Stage 3 over the records found: car-rag's RSSG and active frontier; where the anchors'
        scores have a scale car-rag knows, also the scope posterior and the ambiguity."""
        scope, candidates = self._question_scope(caller)
        result = resolve_authority(
            self.graph,
            self.policy,
            self.query,
            self.anchors,
            caller,
            scope_lookup_limit=self.scope_lookup_limit,
            min_confidence=self.min_confidence,
            posterior=None if scope is None else scope.posterior,
        )
        if scope is not None:
            result.scope_links = scope.links
            readable = caller.can_read if caller is not None else (lambda _r: True)
            result.ambiguity = detect_ambiguity(candidates, scope.posterior, self.graph, self.policy, readable=readable)
        return result

    def _question_scope(self, caller: CallerContext | None) -> tuple[QuestionScope | None, list[FusedHit]]:
        """The latent-scope reading of the anchors, when every anchor has a score from a channel
        whose scale calibrated fusion knows (a vector retriever's similarity, BM25): the
        framework's own order is kept; only the probabilities and the ambiguity are added.
        Ranks alone say nothing about how sure Stage 1 was, so rank-only anchors get none."""
        scales = {SCORE_SCALES.get(a.channel, "") for a in self.anchors}
        if not self.anchors or len(scales) != 1 or "" in scales or any(a.score is None for a in self.anchors):
            return None, []
        scale = scales.pop()
        run = [ChannelHit(a.doc_id, float(a.score or 0.0), a.rank) for a in self.anchors]
        candidates = calibrated_fusion({scale: run})
        readable = caller.can_read if caller is not None else None
        return read_question_scope(self.query, candidates, self.graph, self.policy, readable=readable), candidates


log = logging.getLogger(__name__)


def _log_closure(closure: AuthorityClosure, store: AuthorityStore) -> None:
    log.debug(
        "Stage 2 over %s: %d anchors, %d lookup rounds, %d lookups, %d records in the closure",
        type(store).__name__,
        len(closure.anchors),
        closure.rounds,
        closure.lookups,
        len(closure.graph),
    )


def resolve_closure(closure: AuthorityClosure, store: AuthorityStore, caller: CallerContext | None = None) -> RetrievalResult:
    """Run ``closure`` against ``store`` (sync) and resolve; anchors must be added first."""
    for queries in closure.steps(caller):
        closure.absorb(store.fetch(queries))
    _log_closure(closure, store)
    return closure.finish(caller)


async def aresolve_closure(
    closure: AuthorityClosure, store: AuthorityStore, caller: CallerContext | None = None
) -> RetrievalResult:
    """:func:`resolve_closure` with the store's lookups awaited (:meth:`AuthorityStore.afetch`)."""
    for queries in closure.steps(caller):
        closure.absorb(await store.afetch(queries))
    _log_closure(closure, store)
    return closure.finish(caller)
