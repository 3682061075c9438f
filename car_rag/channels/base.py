"""The lexical-index interface every BM25 backend implements, and backend selection."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["ChannelHit", "LexicalIndex", "ReaderIndexes"]

_Sub = TypeVar("_Sub")


@dataclass(frozen=True)
class ChannelHit:
    """One channel's answer for one record: its score and 1-based rank in that channel."""

    doc_id: str
    score: float
    rank: int


class ReaderIndexes(Generic[_Sub]):
    """Indexes over the records a mask selects, for backends whose precomputed scores hold the
    whole corpus's statistics: one per reader set, built on first use from what ``build`` is
    given (the masked positions), the ``limit`` latest kept. Cleared when the index changes;
    queries of several threads (a store's readers) share it."""

    def __init__(self, build: Callable[[np.ndarray], _Sub], limit: int = 16) -> None:
        self._build, self._limit = build, limit
        self._held: dict[bytes, tuple[np.ndarray, _Sub]] = {}
        self._lock = threading.Lock()

    def get(self, mask: np.ndarray) -> tuple[np.ndarray, _Sub]:
        """The masked records' positions in the full index, and the index over them alone."""
        key = hashlib.blake2b(np.packbits(mask).tobytes() + len(mask).to_bytes(8, "little"), digest_size=16).digest()
        with self._lock:
            if key not in self._held:
                if len(self._held) >= self._limit:
                    self._held.pop(next(iter(self._held)))
                positions = np.flatnonzero(mask)
                self._held[key] = (positions, self._build(positions))
            return self._held[key]

    def clear(self) -> None:
        with self._lock:
            self._held = {}


class LexicalIndex(ABC):
    """A BM25 index over records in a fixed order; ``mask`` selects which may be scored.

    With a mask, every corpus statistic a score reads (record count, average length, document
    frequencies) is counted over the masked records alone: what other tenants store, or
    records the caller may not read, neither moves its ranking nor shows in its scores."""

    backend: str
    supports_add = False
    """Whether :meth:`add` appends records without rebuilding (streaming inserts)."""

    def __init__(self) -> None:
        self.doc_ids: Sequence[str] = []
        self.generation = 0
        """Bumped by every in-place change, so callers can drop what they derived from the index."""

    @abstractmethod
    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None: ...

    def add(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Append records after those indexed; only backends with ``supports_add`` can."""
        raise NotImplementedError(f"the {self.backend} backend cannot add records without a rebuild")

    @abstractmethod
    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        """Score of every indexed record for ``query``, in index order; with ``mask``, scored
        on the statistics of the masked records (the others' scores are then meaningless)."""

    def document_frequency(self, phrase: str, mask: np.ndarray | None = None) -> int:
        """How many indexed records (of those ``mask`` selects) contain ``phrase``'s words (any
        of them, here; backends that keep postings count records holding all of them): how
        common a scope value is as a word of the corpus, which scope linking weighs."""
        scores = self.scores(phrase, mask)
        return int(np.count_nonzero((scores > 0) if mask is None else (scores > 0) & mask))

    def search(self, query: str, k: int, mask: np.ndarray | None = None) -> list[ChannelHit]:
        """Top ``k`` records with a positive score; masked-out records are never scored."""
        scores = self.scores(query) if mask is None else np.where(mask, self.scores(query, mask), 0.0)
        # Only records sharing a term with the query score above 0: rank those alone (a
        # small share of a large corpus) rather than partitioning every score.
        hits = np.flatnonzero(scores > 0)
        k = min(k, len(hits))
        if k <= 0:
            return []
        # The k-th best score, then everything above it and the earliest records tied with it:
        # ties are broken by index (corpus) order, without sorting all the hits.
        positive = scores[hits]
        threshold = -np.partition(-positive, k - 1)[k - 1]
        above = hits[positive > threshold]
        tied = hits[positive == threshold][: k - len(above)]
        top = sorted(np.concatenate([above, tied]).tolist(), key=lambda i: (-scores[i], i))
        return [ChannelHit(self.doc_ids[i], float(scores[i]), r) for r, i in enumerate(top, 1)]

    @abstractmethod
    def _save_body(self, folder: Path) -> None: ...

    @abstractmethod
    def _load_body(self, folder: Path) -> None: ...

    def save(self, folder: Path) -> None:
        """Write the index into ``folder``. ``index.json`` is removed first and put back whole
        last: a process killed while saving leaves no index whose files disagree with the
        records it names (the store rebuilds it from its records instead)."""
        folder.mkdir(parents=True, exist_ok=True)
        meta = folder / "index.json"
        meta.unlink(missing_ok=True)
        self._save_body(folder)
        partial = meta.with_name(meta.name + ".partial")
        partial.write_text(json.dumps({"backend": self.backend, **self._saved_ids()}))
        os.replace(partial, meta)

    def _saved_ids(self) -> dict[str, Any]:
        """What ``index.json`` holds of the ids: the list (an index that writes them elsewhere says where)."""
        return {"doc_ids": list(self.doc_ids)}
