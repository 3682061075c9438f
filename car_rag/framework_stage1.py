"""car-rag's own Stage 1 over the records a framework's vector store holds.

A framework user's records live in their LlamaIndex index or LangChain vector store, not in a
:class:`~car_rag.CARStore`. :class:`FrameworkCorpus` holds what the core's
:class:`~car_rag.ControllingAuthorityRetriever` reads from a store (the policy, the authority
graph, a BM25 index over the records' texts, a lock) beside the framework's dense search, so
the core runs unchanged over it: calibrated fusion, scope linking, the scope posterior,
ambiguity, then Stages 2 and 3. An integration supplies the records (read once from the index)
and a :class:`DenseSearch` over the store, and keeps the corpus in step with inserts and
deletes (:meth:`FrameworkCorpus.add`, :meth:`FrameworkCorpus.remove`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from car_rag.channels import ChannelHit, LexicalIndex, VectorChannel, make_lexical_index
from car_rag.channels.dense import EXACT_SEARCH_LIMIT
from car_rag.graph import AuthorityGraph
from car_rag.layout import LayoutError, RecordLayout
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore
from car_rag.store.locking import ReadWriteLock

__all__ = ["DEFAULT_BM25_BACKEND", "DenseSearch", "FrameworkCorpus", "MissingAuthorityMetadata", "StoreItem", "group_records"]

DEFAULT_BM25_BACKEND = "bm25-incremental"
"""A new :class:`~car_rag.CARStore`'s BM25 (bm25s's tokenizer and formula, records added in place)."""


class MissingAuthorityMetadata(ValueError):
    """A framework's store holds items without the metadata car-rag needs to apply a policy."""


@dataclass(frozen=True)
class StoreItem:
    """One entry of a framework's store (a node, a document): its id there, metadata and text."""

    item_id: str
    metadata: Mapping[str, Any]
    text: str
    source_id: str | None = None
    """The store's id of the document the item was cut from, the record id when metadata names none."""

    def doc_id(self, layout: RecordLayout) -> str:
        return layout.doc_id(self.metadata, None) or self.source_id or self.item_id


def group_records(
    items: Sequence[StoreItem],
    policy: Policy,
    layout: RecordLayout,
    *,
    extraction: str,
    foreign_keys: frozenset[str] = frozenset(),
) -> tuple[list[Record], dict[str, str]]:
    """The records ``items`` stand for, in their order (a record's chunks, items with one
    ``doc_id``, joined in order), and each item's record. Items without car-rag's metadata are
    refused, naming the keys and ``extraction`` (how the framework's users add them)."""
    lacking = [i.item_id for i in items if layout.doc_type(i.metadata) is None]
    if lacking:
        raise MissingAuthorityMetadata(
            f"{len(lacking)} of {len(items)} items in the store lack car-rag's metadata key {layout.doc_type_key!r} "
            f"(with {layout.doc_id_key!r} and the policy's scope keys {list(policy.scope_keys)}), e.g. {lacking[0]!r}: "
            f"car-rag cannot apply a policy to them. {extraction}, or run `car-rag extract` on the documents "
            "and load the records it writes (to keep such items as they are, wrap a retriever of your own instead)"
        )
    chunks: dict[str, list[StoreItem]] = {}
    for item in items:
        chunks.setdefault(item.doc_id(layout), []).append(item)
    records = []
    for doc_id, parts in chunks.items():
        text = "\n\n".join(p.text for p in parts)
        try:
            records.append(layout.record(parts[0].metadata, text, policy, default_id=doc_id, foreign_keys=foreign_keys))
        except LayoutError as exc:
            raise MissingAuthorityMetadata(f"{exc}. {extraction}, or run `car-rag extract` on the documents") from exc
    return records, {p.item_id: doc_id for doc_id, parts in chunks.items() for p in parts}


class DenseSearch(Protocol):
    """A framework store's dense search, as the core's dense channel needs it. Items are the
    store's own entries (nodes, documents): a record's chunks are several items."""

    def embed_query(self, query: str) -> Sequence[float]:
        """The query's vector, by the embedding model the store's vectors were made with."""

    def search(self, vector: Sequence[float], k: int) -> list[tuple[str, float]]:
        """The store's ``k`` nearest items as ``(item id, cosine similarity)``, best first."""

    def vectors(self, item_ids: Sequence[str]) -> Mapping[str, Sequence[float]] | None:
        """The stored vectors of these items, or None when the store does not hand them out
        (then every query asks :meth:`search`)."""


class _QueryEncoder:
    """The ``embedder`` face the core retriever calls: queries only (records are embedded by the framework)."""

    def __init__(self, dense: DenseSearch):
        self.model = dense

    def encode(self, texts: Sequence[str], **_: Any) -> np.ndarray:
        return np.asarray([self.model.embed_query(t) for t in texts], dtype=np.float32)


class _StoreVectors(VectorChannel):
    """The store's vectors held for exact search up to ``exact_limit`` items, as a store of the
    core's holds Chroma's or pgvector's; beyond it (or when the store hands none out) the
    store's own search answers."""

    def __init__(self, dense: DenseSearch, exact_limit: int):
        super().__init__(exact_limit=exact_limit)
        self.dense = dense

    def _nearest(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None) -> list[ChannelHit]:
        return [ChannelHit(item, score, rank) for rank, (item, score) in enumerate(self.dense.search(vector.tolist(), k), 1)]

    def _matching(self, where: Mapping[str, Any]) -> Iterable[str]:
        raise NotImplementedError("the caller gate is applied to the records (readable), not as a store filter")

    def close(self) -> None:
        pass


class _DenseChannel:
    """The core's dense channel over a framework's store: the top ``k`` records the caller may
    read, a record's best item counting (read deeper until ``k`` are found or none are left)."""

    exact = True  # searched on the query's own thread

    def __init__(self, items: _StoreVectors, doc_of: Mapping[str, str]):
        self.items, self.doc_of = items, doc_of

    def search(
        self,
        vector: np.ndarray,
        k: int,
        *,
        where: Any = None,
        readable: Callable[[Sequence[str]], np.ndarray] | None = None,
    ) -> list[ChannelHit]:
        del where  # the caller gate in Chroma's syntax; the framework's store may speak another: ``readable`` gates
        depth, total = k, len(self.doc_of)
        while True:
            best: dict[str, float] = {}
            hits = self.items.search(np.asarray(vector, dtype=np.float32), depth)
            for hit in hits:
                doc_id = self.doc_of.get(hit.doc_id)
                if doc_id is not None:
                    best.setdefault(doc_id, hit.score)
            ids = list(best)
            if readable is not None and ids:
                ids = [d for d, ok in zip(ids, readable(ids)) if ok]
            if len(ids) >= k or len(hits) < depth or depth >= total:
                return [ChannelHit(d, best[d], rank) for rank, d in enumerate(ids[:k], 1)]
            depth = min(2 * depth, total)


class FrameworkCorpus:
    """The records of a framework's store as the core retriever's store: graph, BM25, dense search.

    ``records`` are in the store's order (BM25 breaks ties by it, as a store does by ingest
    order); ``items`` maps the store's item ids to the records they belong to (default: one item
    per record, its id the record's). Build the retriever with :meth:`retriever`; keep the corpus
    in step with the framework's inserts and deletes through :meth:`add` and :meth:`remove`.
    """

    def __init__(
        self,
        policy: Policy,
        records: Iterable[Record],
        dense: DenseSearch,
        *,
        items: Mapping[str, str] | None = None,
        bm25_backend: str | None = None,
        exact_limit: int = EXACT_SEARCH_LIMIT,
    ):
        self.policy = policy
        self.lock = ReadWriteLock()
        self.graph = AuthorityGraph(policy)
        self.embedder = _QueryEncoder(dense)
        self._source = dense
        self._items: dict[str, str] = {}  # item id -> doc_id
        self._vectors: dict[str, np.ndarray] | None = {}  # item id -> vector, while held for exact search
        self._store_vectors = _StoreVectors(dense, exact_limit)
        self.dense = _DenseChannel(self._store_vectors, self._items)
        self.bm25_backend = bm25_backend or DEFAULT_BM25_BACKEND
        self.lexical: LexicalIndex = make_lexical_index(self.bm25_backend)
        self._order: list[str] = []
        self.add(records, items)

    @property
    def records(self) -> dict[str, Record]:
        return self.graph.records

    def __len__(self) -> int:
        return len(self.graph)

    def add(self, records: Iterable[Record], items: Mapping[str, str] | None = None) -> None:
        """Take new or replaced records and their store items (a replaced record keeps its place)."""
        records = list(records)
        if not records:
            return
        items = dict(items) if items is not None else {r.doc_id: r.doc_id for r in records}
        with self.lock.write():
            replaced = any(r.doc_id in self.graph for r in records)
            for record in records:
                if record.doc_id not in self.graph:
                    self._order.append(record.doc_id)
                self.graph.add(record)
            if replaced or not self.lexical.supports_add:
                self._rebuild_lexical()
            else:
                self.lexical.add([r.doc_id for r in records], [r.text for r in records])
            self._items.update(items)
            self._take_vectors(list(items))

    def remove(self, doc_ids: Iterable[str]) -> None:
        """Forget records the framework's store deleted, with their items (unknown ids are ignored)."""
        gone = {d for d in doc_ids if d in self.graph}
        if not gone:
            return
        with self.lock.write():
            for doc_id in gone:
                self.graph.remove(doc_id)
            self._order = [d for d in self._order if d not in gone]
            self._rebuild_lexical()
            dropped = [i for i, d in self._items.items() if d in gone]
            for item in dropped:
                del self._items[item]
            if self._vectors is not None:
                for item in dropped:
                    self._vectors.pop(item, None)
                self._store_vectors.hold(list(self._vectors), self._vectors)

    def _take_vectors(self, item_ids: list[str]) -> None:
        """Hold the new items' vectors for exact search, while the store hands them out and all fit."""
        if self._vectors is None:
            return
        got = self._source.vectors(item_ids) if len(self._items) <= self._store_vectors.exact_limit else None
        if got is None or any(i not in got for i in item_ids):
            self._vectors = None
            self._store_vectors.exact_limit = -1  # the store's own search answers from now on
            return
        fresh = {i: np.asarray(got[i], dtype=np.float32) for i in item_ids}
        self._vectors.update(fresh)
        if self._store_vectors.exact:
            self._store_vectors.put(list(fresh), np.vstack(list(fresh.values())))
        else:
            self._store_vectors.hold(list(self._vectors), self._vectors)

    def _rebuild_lexical(self) -> None:
        index = make_lexical_index(self.bm25_backend)
        index.build(self._order, [self.graph.records[d].text for d in self._order])
        self.lexical = index

    def retriever(self, **options: Any) -> ControllingAuthorityRetriever:
        """The core's retriever over this corpus (``options`` as for
        :class:`~car_rag.ControllingAuthorityRetriever`: ``k1``, ``depth``, ``min_confidence``, …)."""
        # The retriever reads only what this class holds (policy, graph, lexical, dense, embedder, records, lock).
        return ControllingAuthorityRetriever(cast(CARStore, self), **options)
