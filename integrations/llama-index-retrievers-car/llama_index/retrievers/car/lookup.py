"""Stage 2's entity lookup: filter-only reads of the store the user already runs.

Authority resolution never searches by similarity. It asks the store for the records that
share an anchor's scope (``package == "lodash" AND cve_id == "CVE-…"``), optionally of the
types that can supersede it, which any LlamaIndex vector store with metadata filters can
answer through ``get_nodes(filters=MetadataFilters(...))``. :class:`NodeAuthorityLookup`
answers the same questions from a list of nodes in memory (a docstore, for a BM25-only
pipeline, or just the nodes at hand).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index.retrievers.car.layout import MetadataLayout

__all__ = [
    "AuthorityLookup",
    "NodeAuthorityLookup",
    "ScopeQuery",
    "VectorStoreAuthorityLookup",
    "authority_lookup",
]


@dataclass(frozen=True)
class ScopeQuery:
    """Records whose metadata has every ``key == value`` in ``scope`` and, unless
    ``doc_types`` is None, a doc_type among ``doc_types``. Build with :meth:`make`."""

    scope: tuple[tuple[str, str], ...]
    doc_types: tuple[str, ...] | None = None

    @classmethod
    def make(cls, scope: dict[str, str] | Iterable[tuple[str, str]], doc_types: Iterable[str] | None = None) -> "ScopeQuery":
        items = tuple(sorted(dict(scope).items()))
        types = None if doc_types is None else tuple(sorted(set(doc_types)))
        if not items and not types:
            raise ValueError("a scope query needs a scope or doc types (it would match every record)")
        return cls(items, types)

    def covers(self, other: "ScopeQuery") -> bool:
        """Whether every record ``other`` matches is matched by this query too."""
        if not set(self.scope) <= set(other.scope):
            return False
        if self.doc_types is None:
            return True
        return other.doc_types is not None and set(other.doc_types) <= set(self.doc_types)

    def matches(self, metadata: dict[str, Any], doc_type_key: str) -> bool:
        if any(metadata.get(k) != v for k, v in self.scope):
            return False
        return self.doc_types is None or metadata.get(doc_type_key) in self.doc_types

    def to_filters(self, doc_type_key: str) -> MetadataFilters:
        filters: list[MetadataFilter | MetadataFilters] = [
            MetadataFilter(key=k, value=v, operator=FilterOperator.EQ) for k, v in self.scope
        ]
        if self.doc_types is not None:
            if len(self.doc_types) == 1:
                filters.append(MetadataFilter(key=doc_type_key, value=self.doc_types[0], operator=FilterOperator.EQ))
            else:
                filters.append(MetadataFilter(key=doc_type_key, value=list(self.doc_types), operator=FilterOperator.IN))
        return MetadataFilters(filters=filters, condition=FilterCondition.AND)


def minimal_queries(queries: Iterable[ScopeQuery]) -> list[ScopeQuery]:
    """Drop queries another one covers; same-scope queries merge their types."""
    by_scope: dict[tuple[tuple[str, str], ...], set[str] | None] = {}
    for q in queries:
        if q.scope in by_scope:
            known = by_scope[q.scope]
            by_scope[q.scope] = None if known is None or q.doc_types is None else known | set(q.doc_types)
        else:
            by_scope[q.scope] = None if q.doc_types is None else set(q.doc_types)
    merged = [ScopeQuery(s, None if t is None else tuple(sorted(t))) for s, t in by_scope.items()]
    return [q for q in merged if not any(o is not q and o.covers(q) for o in merged)]


class AuthorityLookup(ABC):
    """Filter-only access to a store's records: the nodes matching any of the queries."""

    @abstractmethod
    def fetch(self, queries: Sequence[ScopeQuery]) -> list[BaseNode]:
        """Nodes matching at least one query (each node once)."""

    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[BaseNode]:
        """Async :meth:`fetch`; by default it runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(self.fetch, queries)


class VectorStoreAuthorityLookup(AuthorityLookup):
    """Lookups through a vector store's ``get_nodes(filters=...)`` (``aget_nodes`` when async).

    Works with any store whose ``get_nodes`` honours nested :class:`MetadataFilters` with
    ``==`` and ``in`` (Chroma, and most stores with metadata filters). Queries over the same
    keys and types are sent as one ``key in [...]`` filter per key (a superset, cut back to
    the exact matches here), which costs a store like Chroma far less than an OR of ANDs;
    groups are OR-ed, ``batch_size`` values per call at most.
    """

    def __init__(self, vector_store: BasePydanticVectorStore, layout: MetadataLayout | None = None, *, batch_size: int = 64):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.vector_store = vector_store
        self.layout = layout or MetadataLayout()
        self.batch_size = batch_size
        self._native_async = type(vector_store).aget_nodes is not BasePydanticVectorStore.aget_nodes

    def _group_filter(self, queries: Sequence[ScopeQuery]) -> MetadataFilters:
        if len(queries) == 1:
            return queries[0].to_filters(self.layout.doc_type_key)
        filters: list[MetadataFilter | MetadataFilters] = []
        for position, (key, _) in enumerate(queries[0].scope):
            values = sorted({q.scope[position][1] for q in queries})
            operator = FilterOperator.EQ if len(values) == 1 else FilterOperator.IN
            filters.append(MetadataFilter(key=key, value=values[0] if len(values) == 1 else values, operator=operator))
        types = queries[0].doc_types
        if types is not None:
            operator = FilterOperator.EQ if len(types) == 1 else FilterOperator.IN
            value = types[0] if len(types) == 1 else list(types)
            filters.append(MetadataFilter(key=self.layout.doc_type_key, value=value, operator=operator))
        return MetadataFilters(filters=filters, condition=FilterCondition.AND)

    def _filters(self, queries: Sequence[ScopeQuery]) -> list[MetadataFilters]:
        groups: dict[tuple[tuple[str, ...], tuple[str, ...] | None], list[ScopeQuery]] = defaultdict(list)
        for q in queries:
            groups[(tuple(k for k, _ in q.scope), q.doc_types)].append(q)
        parts = [
            self._group_filter(group[start : start + self.batch_size])
            for group in groups.values()
            for start in range(0, len(group), self.batch_size)
        ]
        out = []
        for start in range(0, len(parts), self.batch_size):
            chunk = parts[start : start + self.batch_size]
            out.append(chunk[0] if len(chunk) == 1 else MetadataFilters(filters=chunk, condition=FilterCondition.OR))
        return out

    def _exact(self, queries: Sequence[ScopeQuery], batches: Iterable[Sequence[BaseNode]]) -> list[BaseNode]:
        key = self.layout.doc_type_key
        seen: set[str] = set()
        out = []
        for nodes in batches:
            for node in nodes:
                if node.node_id not in seen and any(q.matches(node.metadata, key) for q in queries):
                    seen.add(node.node_id)
                    out.append(node)
        return out

    def fetch(self, queries: Sequence[ScopeQuery]) -> list[BaseNode]:
        if not queries:
            return []
        batches = [self.vector_store.get_nodes(node_ids=None, filters=f) for f in self._filters(queries)]
        return self._exact(queries, batches)

    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[BaseNode]:
        if not queries:
            return []
        filters = self._filters(queries)
        if self._native_async:
            batches = await asyncio.gather(*(self.vector_store.aget_nodes(node_ids=None, filters=f) for f in filters))
        else:  # the store's aget_nodes would block the event loop: run its sync call in a thread
            batches = await asyncio.gather(
                *(asyncio.to_thread(self.vector_store.get_nodes, node_ids=None, filters=f) for f in filters)
            )
        return self._exact(queries, batches)


class NodeAuthorityLookup(AuthorityLookup):
    """Lookups over nodes held in memory, through an index on (key, value) built once."""

    def __init__(self, nodes: Iterable[BaseNode], layout: MetadataLayout | None = None):
        self.layout = layout or MetadataLayout()
        self.nodes: list[BaseNode] = list(nodes)
        self._by_pair: dict[tuple[str, Any], list[int]] = defaultdict(list)
        self._by_type: dict[Any, list[int]] = defaultdict(list)
        for i, node in enumerate(self.nodes):
            for key, value in node.metadata.items():
                if isinstance(value, (str, int, float)):
                    self._by_pair[(key, value)].append(i)
            self._by_type[node.metadata.get(self.layout.doc_type_key)].append(i)

    def _matching(self, query: ScopeQuery) -> Iterable[int]:
        if query.scope:
            lists = sorted((self._by_pair.get(pair, []) for pair in query.scope), key=len)
            candidates: Iterable[int] = lists[0]
        else:
            candidates = (i for t in query.doc_types or () for i in self._by_type.get(t, []))
        key = self.layout.doc_type_key
        return (i for i in candidates if query.matches(self.nodes[i].metadata, key))

    def fetch(self, queries: Sequence[ScopeQuery]) -> list[BaseNode]:
        hits = sorted({i for q in queries for i in self._matching(q)})
        return [self.nodes[i] for i in hits]

    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[BaseNode]:
        return self.fetch(queries)  # in memory: nothing to wait for


def authority_lookup(source: Any, layout: MetadataLayout | None = None) -> AuthorityLookup:
    """The lookup for a vector store, a docstore, a list of nodes, or a lookup (returned as is)."""
    if isinstance(source, AuthorityLookup):
        return source
    if isinstance(source, BasePydanticVectorStore):
        return VectorStoreAuthorityLookup(source, layout)
    if isinstance(source, BaseDocumentStore):
        return NodeAuthorityLookup(source.docs.values(), layout)
    if isinstance(source, (list, tuple)):
        return NodeAuthorityLookup(source, layout)
    raise TypeError(
        f"cannot look records up in a {type(source).__name__}: pass a LlamaIndex vector store with metadata "
        "filters, a docstore, a list of nodes, or an AuthorityLookup"
    )
