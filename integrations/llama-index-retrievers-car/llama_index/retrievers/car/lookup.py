"""Stage 2's lookups as LlamaIndex reads: the core's queries as ``MetadataFilters``.

car-rag's :class:`car_rag.adapters.AuthorityClosure` plans which records to fetch
(:class:`~car_rag.adapters.ScopeQuery`); these adapters answer it from the store the user already
runs, by metadata filter only: :class:`VectorStoreAuthorityLookup` through a vector store's
``get_nodes(filters=...)``, :class:`NodeAuthorityLookup` from nodes held in memory (a
docstore, for a BM25-only pipeline, or just the nodes at hand).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from car_rag.adapters import AuthorityStore, ScopeQuery, StoredItem
from car_rag.layout import decode_list
from llama_index.core.indices.base import BaseIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index.retrievers.car.layout import MetadataLayout, node_doc_id

__all__ = ["AuthorityLookup", "NodeAuthorityLookup", "ScopeQuery", "VectorStoreAuthorityLookup", "authority_lookup"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)
"""Each Stage-2 lookup is an instrumentation span (``VectorStoreAuthorityLookup.fetch-…``)."""

AuthorityLookup = AuthorityStore
"""The adapter contract (:class:`car_rag.adapters.AuthorityStore`): the items matching any of the queries."""


def _item(node: BaseNode, layout: MetadataLayout) -> StoredItem:
    return StoredItem(node.metadata, node.get_content(), node_doc_id(node, layout), source=node)


def _numeric_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def _condition(key: str, values: Sequence[Any]) -> MetadataFilter:
    # One value is ``==``, except text that reads as a number: PGVectorStore compares ``==`` on
    # such a value as float (a cast that fails on any non-numeric value of the key, and takes
    # "2024" for "2024.0"); ``in`` compares text on every store.
    if len(values) == 1 and not _numeric_text(values[0]):
        return MetadataFilter(key=key, value=values[0], operator=FilterOperator.EQ)
    return MetadataFilter(key=key, value=list(values), operator=FilterOperator.IN)


class VectorStoreAuthorityLookup(AuthorityStore):
    """Lookups through a vector store's ``get_nodes(filters=...)`` (``aget_nodes`` when async).

    Works with any store whose ``get_nodes`` honours nested :class:`MetadataFilters` with
    ``==`` and ``in`` (Chroma, and most stores with metadata filters). Queries over the same
    keys and types are sent as one ``key in [...]`` filter per key (a superset, cut back to
    the exact matches here), which costs a store like Chroma far less than an OR of ANDs;
    groups are OR-ed, ``batch_size`` values per call at most. Explicit edges from other
    scopes need a ``contains`` filter on list metadata; a store that refuses it (LlamaIndex's
    Chroma keeps lists as JSON strings) finds explicit edges within a scope only, with a warning.
    """

    def __init__(self, vector_store: BasePydanticVectorStore, layout: MetadataLayout | None = None, *, batch_size: int = 64):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.vector_store = vector_store
        self.layout = layout or MetadataLayout()
        self.batch_size = batch_size
        self.lists_filterable = not self.layout.json_lists
        self._native_async = type(vector_store).aget_nodes is not BasePydanticVectorStore.aget_nodes

    def _group_filter(self, queries: Sequence[ScopeQuery]) -> MetadataFilters:
        filters: list[MetadataFilter | MetadataFilters] = [
            _condition(key, sorted({q.scope[position][1] for q in queries})) for position, (key, _) in enumerate(queries[0].scope)
        ]
        if queries[0].doc_types is not None:
            filters.append(_condition(self.layout.doc_type_key, queries[0].doc_types))
        return MetadataFilters(filters=filters, condition=FilterCondition.AND)

    def _filters(self, queries: Sequence[ScopeQuery]) -> list[MetadataFilters]:
        groups: dict[tuple[tuple[str, ...], tuple[str, ...] | None], list[ScopeQuery]] = defaultdict(list)
        parts: list[MetadataFilters] = []
        for q in queries:
            if q.naming is None:
                groups[(tuple(k for k, _ in q.scope), q.doc_types)].append(q)
            elif self.lists_filterable:
                naming = MetadataFilter(key="supersedes", value=q.naming, operator=FilterOperator.CONTAINS)
                parts.append(MetadataFilters(filters=[naming]))
        parts += [
            self._group_filter(group[start : start + self.batch_size])
            for group in groups.values()
            for start in range(0, len(group), self.batch_size)
        ]
        chunks = [parts[start : start + self.batch_size] for start in range(0, len(parts), self.batch_size)]
        return [c[0] if len(c) == 1 else MetadataFilters(filters=list(c), condition=FilterCondition.OR) for c in chunks]

    def _exact(self, queries: Sequence[ScopeQuery], batches: Iterable[Sequence[BaseNode]]) -> list[StoredItem]:
        seen: set[str] = set()
        out = []
        for node in (n for nodes in batches for n in nodes):
            if node.node_id not in seen and any(q.matches(node.metadata, self.layout) for q in queries):
                seen.add(node.node_id)
                out.append(_item(node, self.layout))
        return out

    def _refused(self, exc: Exception) -> None:
        logger.warning(
            "car-rag: %s cannot filter list metadata (%s); explicit supersession edges are found within a scope only",
            type(self.vector_store).__name__,
            exc,
        )
        self.lists_filterable = False

    @dispatcher.span
    def fetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        try:
            batches = [self.vector_store.get_nodes(node_ids=None, filters=f) for f in self._filters(queries)]
        except (ValueError, NotImplementedError) as exc:
            if not self.lists_filterable:
                raise TypeError(_cannot_filter(self.vector_store, exc)) from exc
            self._refused(exc)
            return self.fetch(queries)
        return self._exact(queries, batches)

    @dispatcher.span
    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        filters = self._filters(queries)
        try:
            if self._native_async:
                batches = await asyncio.gather(*(self.vector_store.aget_nodes(node_ids=None, filters=f) for f in filters))
            else:  # the store's aget_nodes would block the event loop: run its sync call in a thread
                batches = await asyncio.gather(
                    *(asyncio.to_thread(self.vector_store.get_nodes, node_ids=None, filters=f) for f in filters)
                )
        except (ValueError, NotImplementedError) as exc:
            if not self.lists_filterable:
                raise TypeError(_cannot_filter(self.vector_store, exc)) from exc
            self._refused(exc)
            return await self.afetch(queries)
        return self._exact(queries, batches)


class NodeAuthorityLookup(AuthorityStore):
    """Lookups over nodes held in memory, through an index on (key, value) built once."""

    def __init__(self, nodes: Iterable[BaseNode], layout: MetadataLayout | None = None):
        self.layout = layout or MetadataLayout()
        self.nodes: list[BaseNode] = list(nodes)
        self._by_pair: dict[tuple[str, Any], list[int]] = defaultdict(list)
        self._by_type: dict[Any, list[int]] = defaultdict(list)
        self._naming: dict[str, list[int]] = defaultdict(list)
        for i, node in enumerate(self.nodes):
            for key, value in node.metadata.items():
                if isinstance(value, (str, int, float)):
                    self._by_pair[(key, value)].append(i)
            self._by_type[node.metadata.get(self.layout.doc_type_key)].append(i)
            try:
                for target in decode_list(node.metadata.get("supersedes")):
                    self._naming[target].append(i)
            except ValueError:
                pass  # not a list of ids: the node is reported unusable when it is read

    def _matching(self, query: ScopeQuery) -> Iterable[int]:
        if query.naming is not None:
            return self._naming.get(query.naming, [])
        if query.scope:
            shortest = min((self._by_pair.get(pair, []) for pair in query.scope), key=len)
            candidates: Iterable[int] = shortest
        else:
            candidates = (i for t in query.doc_types or () for i in self._by_type.get(t, []))
        return (i for i in candidates if query.matches(self.nodes[i].metadata, self.layout))

    @dispatcher.span
    def fetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        hits = sorted({i for q in queries for i in self._matching(q)})
        return [_item(self.nodes[i], self.layout) for i in hits]

    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        return self.fetch(queries)  # in memory: nothing to wait for


def _cannot_filter(vector_store: BasePydanticVectorStore, reason: object) -> str:
    return (
        f"{type(vector_store).__name__} cannot be filtered by metadata ({reason}): Stage 2 looks records up "
        "by metadata filter only, through get_nodes(filters=MetadataFilters(...)) with '==' and 'in'; pass the "
        "index's docstore (index.docstore) or its nodes instead, or an AuthorityLookup for this store"
    )


def authority_lookup(source: Any, layout: MetadataLayout | None = None) -> AuthorityStore:
    """The lookup for an index, a vector store, a docstore, a list of nodes, or a lookup
    (returned as is). An index stands for its vector store, or for its docstore where the vector
    store keeps no text (LlamaIndex's in-memory default). A vector store that keeps no text, or
    has no ``get_nodes``, is a ``TypeError`` naming its class and what it lacks (so is one that
    refuses the filters on the first query)."""
    if isinstance(source, AuthorityStore):
        return source
    if isinstance(source, BaseIndex):
        vector_store = getattr(source, "vector_store", None)
        keeps_text = isinstance(vector_store, BasePydanticVectorStore) and vector_store.stores_text
        source = vector_store if keeps_text else source.docstore
    if isinstance(source, BasePydanticVectorStore):
        if not source.stores_text:
            raise TypeError(
                f"{type(source).__name__} keeps no text or metadata of its own (stores_text=False), so it cannot "
                "answer metadata lookups: pass the index itself (store=index) or its docstore (index.docstore)"
            )
        if type(source).get_nodes is BasePydanticVectorStore.get_nodes:
            raise TypeError(_cannot_filter(source, "it does not implement get_nodes"))
        return VectorStoreAuthorityLookup(source, layout)
    if isinstance(source, BaseDocumentStore):
        return NodeAuthorityLookup(source.docs.values(), layout)
    if isinstance(source, (list, tuple)):
        return NodeAuthorityLookup(source, layout)
    raise TypeError(
        f"cannot look records up in a {type(source).__name__}: pass a LlamaIndex index, a vector store with "
        "metadata filters, a docstore, a list of nodes, or an AuthorityLookup"
    )
