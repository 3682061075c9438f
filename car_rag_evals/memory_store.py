"""A store held in memory: the real graph, BM25 index and exact vector search a
:class:`~car_rag.store.CARStore` searches, without Chroma, for the checks that rebuild a store
from some of its records (``evals/asof_rebuild.py``) and for unit tests (with
:class:`HashingEmbedderForTests`, a fake embedder, where no model should load)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from car_rag.channels import ChannelHit
from car_rag.channels.dense import VectorChannel
from car_rag.channels.lexical import make_lexical_index
from car_rag.graph import AuthorityGraph, SupersessionCycleError
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.store.locking import ReadWriteLock

__all__ = ["HashingEmbedderForTests", "MemoryStore"]

DIMENSIONS = 32


class Encoder(Protocol):
    @property
    def model(self) -> object: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEmbedderForTests:
    """Bag of hashed words as a unit vector: texts sharing words are near, and no model loads."""

    model_name = "hashing-for-tests"
    model = None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % DIMENSIONS] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.asarray(out / np.where(norms > 0, norms, 1.0), dtype=np.float32)


class _HeldVectors(VectorChannel):
    """Exact search only: every vector is held, so no engine is ever asked."""

    def _nearest(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None) -> list[ChannelHit]:
        raise AssertionError("a memory store searches exactly")

    def _matching(self, where: Mapping[str, Any]) -> Iterable[str]:
        raise AssertionError("a memory store decides the gate from its records")

    def close(self) -> None:
        """Nothing is held outside this process."""


class MemoryStore:
    """What the retriever reads of a store: graph, BM25 (``bm25_backend``), exact dense search,
    records, lock. Records are added in order, as an ingest adds them (one closing a cycle is
    refused); their vectors come from ``embedder``, or from ``rows`` (unit rows by id, as
    :meth:`VectorChannel.held` gives them: a store rebuilt from another's vectors scores as it does)."""

    def __init__(
        self,
        policy: Policy,
        records: Iterable[Record] = (),
        *,
        embedder: Encoder | None = None,
        rows: Mapping[str, np.ndarray] | None = None,
        bm25_backend: str = "bm25-incremental",
    ) -> None:
        self.policy = policy
        self.graph = AuthorityGraph(policy)
        self.lexical = make_lexical_index(bm25_backend)
        self.embedder: Encoder = embedder or HashingEmbedderForTests()
        self.dense = _HeldVectors()
        self.dense.hold([], {})
        self.lock = ReadWriteLock()
        self.accepted: list[Record] = []
        """The records held, in the order they were added."""
        self._rows = rows
        if rows is None or self.lexical.supports_add:
            self.add(records)
        else:  # a backend that cannot add: one build over the records
            self._accept(records)
            self.lexical.build([r.doc_id for r in self.accepted], [r.text for r in self.accepted])
            self._vectors(self.accepted)

    @property
    def records(self) -> dict[str, Record]:
        return self.graph.records

    def add(self, records: Iterable[Record]) -> None:
        """Add records in order, as a store's ingest does."""
        with self.lock.write():
            kept = self._accept(records)
            if kept:
                self.lexical.add([r.doc_id for r in kept], [r.text for r in kept])
                self._vectors(kept)

    def _accept(self, records: Iterable[Record]) -> list[Record]:
        kept = []
        for record in records:
            try:
                self.graph.add(record)
            except SupersessionCycleError:
                continue
            kept.append(record)
        self.accepted += kept
        return kept

    def _vectors(self, records: Sequence[Record]) -> None:
        if self._rows is None:
            self.dense.put([r.doc_id for r in records], self.embedder.encode([r.text for r in records]))
            return
        held = self.dense.held()
        ids, rows = held if held is not None else ([], np.zeros((0, 0), dtype=np.float32))
        added = [r.doc_id for r in records]
        new = np.vstack([self._rows[d] for d in added])
        self.dense.hold_rows(ids + added, new if not ids else np.vstack([rows, new]))
