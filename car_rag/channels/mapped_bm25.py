"""BM25 read from disk, memory-mapped: BM25 outside a serving worker's heap (issue 36).

A worker serving Stage 2 in SQL (:class:`~car_rag.store.lean.LeanStore`) otherwise holds BM25 in
its heap, 42 MB per 100k records, so a 10M-record store cannot be served by a 2 GB worker. These
indexes are the store's own backends (``bm25s``, ``bm25-incremental``) with their large arrays
(score matrix or postings, token ids) in files mapped read-only: the same arrays, so the same
scores and rankings, but their pages belong to the page cache (shared by the workers mapping them,
dropped under pressure) and a query touches only its terms' pages. The ids are mapped too
(:class:`~car_rag.mapped_files.StringColumn`, found by hash, not through a dict), and so is
``bm25-incremental``'s term vocabulary. What stays in the heap: ``bm25s``'s vocabulary, per-record
lengths (``bm25-incremental``), and the postings, ids and terms added since the last compaction.

Each build goes to a new subfolder of the index's folder and ``current`` is pointed at it by one
rename: a file is never rewritten in place, since truncating a file another process maps kills
that process (SIGBUS), while unlinking one leaves its mapping readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from car_rag.channels.base import LexicalIndex
from car_rag.channels.bm25s_index import BM25sIndex
from car_rag.channels.incremental_bm25 import IncrementalBM25Index
from car_rag.mapped_files import Builds, StringColumn

__all__ = ["MAPPED_BACKENDS", "MappedBM25Index", "MappedIncrementalBM25Index", "open_mapped", "new_mapped"]

IDS = "ids"
"""The ids' column in a build (:class:`~car_rag.mapped_files.StringColumn`), named in its ``index.json``."""
TERMS = "terms"
"""A mapped BM25-incremental build's stems by id (a :class:`~car_rag.mapped_files.StringColumn`)."""


class _Published(LexicalIndex):
    """What both mapped backends share: their :attr:`builds`, the :attr:`stamp` each build carries
    in its ``index.json``, and their ids in a :class:`~car_rag.mapped_files.StringColumn`."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.builds = Builds(folder)
        self.stamp: dict[str, Any] = {}
        """What the index holds, in its owner's terms (a store's: its schema and newest change),
        written into each build it publishes."""

    def _saved_ids(self) -> dict[str, Any]:
        return {**self.stamp, "ids": IDS}

    def _save_ids(self, folder: Path) -> None:
        StringColumn.write(folder / IDS, self.doc_ids)

    def _load_ids(self, folder: Path) -> None:
        self.doc_ids = StringColumn(folder / IDS)


class MappedBM25Index(_Published, BM25sIndex):
    """A :class:`BM25sIndex` whose score matrix and token ids are mapped from :attr:`builds`.

    A caller's mask still builds an index over the masked records in the heap (bm25s's scores
    hold the whole corpus's statistics), as :class:`BM25sIndex` does; an insert rebuilds."""

    backend = "bm25s-mapped"

    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index in the heap, publish the index, then serve it from there (mapped)."""
        super().build(doc_ids, texts)
        self.generation += 1  # rebuilt in place (a store's change feed): what callers derived is stale
        if self.doc_ids:  # bm25s cannot index an empty corpus; scores() answers for it from the heap
            self._load_body(self.builds.publish(self.save))

    def _save_body(self, folder: Path) -> None:
        self._save_ids(folder)
        self._bm25.save(str(folder), show_progress=False)
        self._tokenizer.save_vocab(str(folder))
        self._tokenizer.save_stopwords(str(folder))
        np.save(folder / "corpus-tokens.npy", self._tokens)
        np.save(folder / "corpus-offsets.npy", self._offsets)

    def _load_body(self, folder: Path) -> None:
        self._load_ids(folder)
        self._tokens = np.load(folder / "corpus-tokens.npy", mmap_mode="r")
        self._offsets = np.load(folder / "corpus-offsets.npy", mmap_mode="r")
        self._readers.clear()
        self._bm25 = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        self._tokenizer.load_vocab(str(folder))
        self._tokenizer.load_stopwords(str(folder))


class MappedIncrementalBM25Index(_Published, IncrementalBM25Index):
    """An :class:`IncrementalBM25Index` whose compacted postings and term vocabulary are mapped
    from :attr:`builds` (the vocabulary a column of stems, an id a stem's position: bm25s's
    dictionaries hold about 430 bytes a term).

    ``add`` keeps its postings (and new terms) in the heap until they reach a tenth of the mapped
    ones; the compaction then merges them in the heap (a peak of the whole postings) and
    publishes a build."""

    backend = "bm25-incremental-mapped"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self._terms: StringColumn | None = None
        """The stems by id, once a build is mapped (until then the heap tokenizer numbers them)."""
        self._stopwords = frozenset(self._tokenizer.stopwords)

    def _compact(self) -> None:
        if not self._pending:
            return
        super()._compact()
        self._load_body(self.builds.publish(self.save))

    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._terms = None  # tokenized by the heap vocabulary until the build is published
        super().build(doc_ids, texts)

    def _token_ids(self, texts: Sequence[str], *, update: bool) -> list[list[int]]:
        """As the heap tokenizer numbers terms (its stems in order of first sight, the empty token
        first), each stem's id its position in :attr:`_terms`, found by hash."""
        terms = self._terms
        if terms is None:
            return super()._token_ids(texts, update=update)
        tokenizer = self._tokenizer
        stop, stem = self._stopwords, tokenizer.stemmer
        out = []
        for text in texts:
            ids = []
            for word in tokenizer.splitter(text.lower() if tokenizer.lower else text):
                if word in stop:
                    continue
                term = stem(word)
                position = terms.position(term)
                if position is None and update:
                    position = len(terms)
                    terms.extend([term])
                if position is not None:
                    ids.append(position)
            out.append(ids or [0])
        return out

    def _save_body(self, folder: Path) -> None:
        self._compact()
        self._save_ids(folder)
        for name in ("ptr", "docs", "tf"):
            np.save(folder / f"postings-{name}.npy", getattr(self, f"_{name}"))
        np.save(folder / "lengths.npy", self._lengths[: len(self.doc_ids)])
        StringColumn.write(folder / TERMS, self._terms if self._terms is not None else self._heap_terms())

    def _heap_terms(self) -> list[str]:
        """The heap tokenizer's stems by id (ids run from 0 without a gap: each new stem gets the next)."""
        by_id = self._tokenizer.stem_to_sid
        terms = sorted(by_id, key=by_id.__getitem__)
        assert [by_id[t] for t in terms] == list(range(len(terms))), "bm25s numbers stems without gaps"
        return terms

    def _load_body(self, folder: Path) -> None:
        self._load_ids(folder)
        self._ptr, self._docs, self._tf = (np.load(folder / f"postings-{n}.npy", mmap_mode="r") for n in ("ptr", "docs", "tf"))
        # Lengths are written by add (4 bytes a record): kept in the heap.
        self._lengths = np.array(np.load(folder / "lengths.npy"), dtype=np.float32)
        self._total_length = float(self._lengths.sum(dtype=np.float64))
        self._terms = StringColumn(folder / TERMS)
        self._tokenizer.reset_vocab()  # its dictionaries: replaced by the mapped terms


MAPPED_BACKENDS: dict[str, type[MappedBM25Index] | type[MappedIncrementalBM25Index]] = {
    "bm25s": MappedBM25Index,
    "bm25-incremental": MappedIncrementalBM25Index,
}
"""The mapped index of each store backend that has one (by the store's ``bm25_backend``)."""


def new_mapped(backend: str, folder: Path) -> MappedBM25Index | MappedIncrementalBM25Index:
    """An empty mapped index of the store backend ``backend``, its builds under ``folder``."""
    if backend not in MAPPED_BACKENDS:
        raise ValueError(f"the {backend} BM25 backend cannot be memory-mapped; these can: {', '.join(MAPPED_BACKENDS)}")
    return MAPPED_BACKENDS[backend](folder)


def open_mapped(backend: str, folder: Path) -> MappedBM25Index | MappedIncrementalBM25Index | None:
    """The newest build under ``folder`` of the store backend ``backend``, mapped; None where there is none."""
    index = new_mapped(backend, folder)
    found = index.builds.current()
    if found is None or found[1].get("backend") != index.backend:
        return None
    built, saved = found
    index.stamp = {k: v for k, v in saved.items() if k not in ("backend", "ids")}
    try:
        index._load_body(built)
    except FileNotFoundError:  # removed meanwhile by the process that published a newer one
        return None
    return index
