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

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, cast

import numpy as np

from car_rag.channels import ChannelHit, LexicalIndex, make_lexical_index
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore
from car_rag.store.locking import ReadWriteLock

__all__ = ["DEFAULT_BM25_BACKEND", "DenseSearch", "FrameworkCorpus"]

DEFAULT_BM25_BACKEND = "bm25-incremental"
"""A new :class:`~car_rag.CARStore`'s BM25 (bm25s's tokenizer and formula, records added in place)."""


class DenseSearch(Protocol):
    """A framework store's dense search, as the core's dense channel needs it."""

    def embed_query(self, query: str) -> Sequence[float]:
        """The query's vector, by the embedding model the store's vectors were made with."""

    def search(self, vector: Sequence[float], k: int) -> list[tuple[str, float]]:
        """The ``k`` nearest records as ``(doc_id, cosine similarity)``, best first (a record's
        chunks may repeat: its best counts)."""


class _QueryEncoder:
    """The ``embedder`` face the core retriever calls: queries only (records are embedded by the framework)."""

    def __init__(self, dense: DenseSearch):
        self.model = dense

    def encode(self, texts: Sequence[str], **_: Any) -> np.ndarray:
        return np.asarray([self.model.embed_query(t) for t in texts], dtype=np.float32)


class _DenseChannel:
    """The core's dense channel over :class:`DenseSearch`: top ``k`` records the caller may read
    (read deeper until ``k`` readable records are found or the store has no more)."""

    exact = True  # searched on the query's own thread

    def __init__(self, dense: DenseSearch, size: Callable[[], int]):
        self.dense, self.size = dense, size

    def search(
        self,
        vector: Sequence[float],
        k: int,
        *,
        where: Any = None,
        readable: Callable[[Sequence[str]], np.ndarray] | None = None,
    ) -> list[ChannelHit]:
        del where  # a metadata filter in Chroma's syntax: the framework's store may speak another; ``readable`` gates
        depth, total = k, self.size()
        while True:
            best: dict[str, float] = {}
            raw = self.dense.search(vector, depth)
            for doc_id, score in raw:
                best.setdefault(doc_id, float(score))
            ids = list(best)
            if readable is not None and ids:
                ids = [d for d, ok in zip(ids, readable(ids)) if ok]
            if len(ids) >= k or len(raw) < depth or depth >= total:
                return [ChannelHit(d, best[d], rank) for rank, d in enumerate(ids[:k], 1)]
            depth = min(2 * depth, total)


class FrameworkCorpus:
    """The records of a framework's store as the core retriever's store: graph, BM25, dense search.

    ``records`` are in the store's order (BM25 breaks ties by it, as a store does by ingest
    order). Build the retriever with :meth:`retriever`; keep the corpus in step with the
    framework's inserts and deletes through :meth:`add` and :meth:`remove`.
    """

    def __init__(
        self, policy: Policy, records: Iterable[Record], dense: DenseSearch, *, bm25_backend: str = DEFAULT_BM25_BACKEND
    ):
        self.policy = policy
        self.lock = ReadWriteLock()
        self.graph = AuthorityGraph(policy)
        self.embedder = _QueryEncoder(dense)
        self.dense = _DenseChannel(dense, lambda: len(self.graph))
        self.bm25_backend = bm25_backend
        self.lexical: LexicalIndex = make_lexical_index(bm25_backend)
        self._order: list[str] = []
        self.add(records)

    @property
    def records(self) -> dict[str, Record]:
        return self.graph.records

    def __len__(self) -> int:
        return len(self.graph)

    def add(self, records: Iterable[Record]) -> None:
        """Take new or replaced records (a replaced one keeps its place in the order)."""
        records = list(records)
        if not records:
            return
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

    def remove(self, doc_ids: Iterable[str]) -> None:
        """Forget records the framework's store deleted (ids it does not hold are ignored)."""
        gone = {d for d in doc_ids if d in self.graph}
        if not gone:
            return
        with self.lock.write():
            for doc_id in gone:
                self.graph.remove(doc_id)
            self._order = [d for d in self._order if d not in gone]
            self._rebuild_lexical()

    def _rebuild_lexical(self) -> None:
        index = make_lexical_index(self.bm25_backend)
        index.build(self._order, [self.graph.records[d].text for d in self._order])
        self.lexical = index

    def retriever(self, **options: Any) -> ControllingAuthorityRetriever:
        """The core's retriever over this corpus (``options`` as for
        :class:`~car_rag.ControllingAuthorityRetriever`: ``k1``, ``depth``, ``min_confidence``, …)."""
        # The retriever reads only what this class holds (policy, graph, lexical, dense, embedder, records, lock).
        return ControllingAuthorityRetriever(cast(CARStore, self), **options)
