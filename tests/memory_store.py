"""A store held in memory for the retriever's unit tests: the real graph, BM25 index and exact
vector search a :class:`~car_rag.store.CARStore` searches, without Chroma or a model (the
query and record vectors come from :class:`HashingEmbedderForTests`, a fake embedder)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from car_rag.channels import ChannelHit
from car_rag.channels.dense import VectorChannel
from car_rag.channels.incremental_bm25 import IncrementalBM25Index
from car_rag.graph import AuthorityGraph, SupersessionCycleError
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.store.locking import ReadWriteLock

DIMENSIONS = 32


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
        return out / np.where(norms > 0, norms, 1.0)


class _HeldVectors(VectorChannel):
    """Exact search only: every vector is held, so no engine is ever asked."""

    def _nearest(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None) -> list[ChannelHit]:
        raise AssertionError("the memory store searches exactly")

    def _matching(self, where: Mapping[str, Any]) -> Iterable[str]:
        raise AssertionError("the memory store decides the gate from its records")

    def close(self) -> None:
        pass  # nothing held outside this process


class MemoryStore:
    """What the retriever reads of a store: graph, BM25, exact dense search, records, lock."""

    def __init__(self, policy: Policy, records: Iterable[Record] = ()) -> None:
        self.policy = policy
        self.graph = AuthorityGraph(policy)
        self.lexical = IncrementalBM25Index()
        self.embedder = HashingEmbedderForTests()
        self.dense = _HeldVectors()
        self.dense.hold([], {})
        self.lock = ReadWriteLock()
        self.accepted: list[Record] = []
        """The records held, in the order they were added (those closing a cycle are refused)."""
        self.add(records)

    @property
    def records(self) -> dict[str, Record]:
        return self.graph.records

    def add(self, records: Iterable[Record]) -> None:
        """Add records in order, as a store's ingest does; one closing a cycle is refused."""
        kept = []
        with self.lock.write():
            for record in records:
                try:
                    self.graph.add(record)
                except SupersessionCycleError:
                    continue
                kept.append(record)
            if kept:
                self.lexical.add([r.doc_id for r in kept], [r.text for r in kept])
                self.dense.put([r.doc_id for r in kept], self.embedder.encode([r.text for r in kept]))
        self.accepted += kept
