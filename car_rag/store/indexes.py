"""What one process searches, held in memory and rebuilt from the record log: the authority
graph, the BM25 index and the dense channel (exact search up to its limit).

A store in a folder keeps two files so that it opens quickly: ``bm25/`` (the lexical index) and
``dense-exact.npz`` (the vectors for exact search, stamped with what they encode). An index saved
behind the records is caught up from the log, vectors saved behind them are read from Chroma
instead. A store on a shared log keeps no such file: it builds both from the log when opened, as
no file of this process's can be behind another's commits.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from car_rag.channels import DenseChannel, LexicalIndex, VectorChannel, load_lexical_index, make_lexical_index
from car_rag.embedding import Embedder
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.record_log import RecordLog, StoredRecordError
from car_rag.store.config import StoreError

__all__ = ["DENSE_COPY", "Indexes"]

log = logging.getLogger(__package__)  # car_rag.store: one logger for all the store says, whichever module

DENSE_COPY = "dense-exact.npz"


class Indexes:
    """The graph, BM25 and vectors of the records in ``log``, and ``head``, the newest change of a
    shared log they hold. Callers hold the store's lock: writers its write side."""

    def __init__(self, folder: Path, log: RecordLog, dense: VectorChannel, bm25_backend: str, embedder: Embedder):
        self.folder, self.log, self.dense, self.bm25_backend, self.embedder = folder, log, dense, bm25_backend, embedder
        self.graph: AuthorityGraph
        self.lexical: LexicalIndex
        self.head = 0
        """The newest change of a shared log this process has applied."""
        self.unsaved = 0
        """Records BM25 holds that its saved copy lacks."""
        self.orphans: set[str] = set()
        """Ids in Chroma without a stored record: vectors written before a crash cut off their records."""

    def load(self, policy: Policy) -> None:
        """Read everything from the log, the graph under ``policy``."""
        try:
            state = self.log.load(vectors_up_to=self.dense.exact_limit)
        except StoredRecordError as exc:
            raise StoreError(str(exc)) from None
        records = state.records
        self.graph = AuthorityGraph(policy)
        self.graph.load_edges(records, state.edges, state.disputed)
        self.head = state.head
        self.unsaved = 0
        self.orphans = set()
        ordered = [r.doc_id for r in records]
        self.lexical = make_lexical_index(self.bm25_backend)
        if self.log.shared:
            # Vectors come from the log (the collection may lag behind it: the outbox), BM25 is
            # built afresh: no file of this process's can be behind another's commits.
            self.dense.hold(ordered, state.vectors)
            self.lexical.build(ordered, [r.text for r in records])
            return
        # Vectors are written before records, so ids in Chroma that the records table lacks
        # were cut off by a crash in between; re-ingesting one must clear its stale metadata.
        chroma = self.chroma
        vectors = chroma.collection.count()
        if vectors != len(records):
            self.orphans = set(chroma.ids()) - set(self.graph.records)
            if self.orphans:
                log.warning(
                    "%s: %d vectors have no stored record (an ingest was cut off); re-ingesting them clears them",
                    self.folder,
                    len(self.orphans),
                )
        # exact search up to EXACT_SEARCH_LIMIT records: same ranking every build
        chroma.load(ordered, vectors, copy=self.folder / DENSE_COPY, stamp=self._stamp())
        bm25_dir = self.folder / "bm25"
        if (bm25_dir / "index.json").is_file():
            try:
                self.lexical = load_lexical_index(bm25_dir)
            except FileNotFoundError as exc:  # saved by a version that kept less: rebuilt below
                log.info("%s: the saved BM25 index lacks %s", self.folder, Path(exc.filename or "").name)
        indexed = len(self.lexical.doc_ids)
        if self.lexical.doc_ids == ordered:
            return
        if self.lexical.supports_add and self.lexical.doc_ids == ordered[:indexed]:
            tail = records[indexed:]  # ingested after the index was last saved
            self.lexical.add([r.doc_id for r in tail], [r.text for r in tail])
            self.unsaved = len(tail)
            log.debug("%s: BM25 index caught up with %d records ingested after it was saved", self.folder, len(tail))
        else:
            log.info("%s: rebuilding the BM25 index over %d records", self.folder, len(records))
            self.lexical.build(ordered, [r.text for r in records])
            self.flush()

    def reload(self) -> None:
        """Read everything from the log again, under the graph's policy (the graph may be ahead of the log)."""
        self.load(self.graph.policy)

    @property
    def chroma(self) -> DenseChannel:
        """The dense channel of a store whose vectors are in Chroma (every store in a folder)."""
        assert isinstance(self.dense, DenseChannel)
        return self.dense

    def take(self, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray | None, replaces: bool) -> None:
        """Records the graph has taken, into BM25 and, with their ``vectors``, into exact search
        (a shared log's: Chroma's are read back as written); ``replaces``: some replace a stored one."""
        if vectors is not None:
            self.dense.put(ids, vectors)
        if self.lexical.supports_add and not replaces:
            self.lexical.add(ids, texts)
            self.unsaved += len(ids)
            if self.unsaved * 10 >= len(self.lexical.doc_ids):  # saving costs O(N): amortize it
                self.flush()
        else:
            self.rebuild_lexical()

    def flush(self) -> None:
        """Save the BM25 index and the exact-search vectors of a store in a folder."""
        if not self.log.shared:
            self.lexical.save(self.folder / "bm25")
            self.chroma.save(self.folder / DENSE_COPY, self._stamp())
        self.unsaved = 0

    def rebuild_lexical(self) -> None:
        # In ingest order; a shared log may already hold records other processes committed since
        # this one last applied changes: they join when they are applied.
        ordered = [d for d, _ in self.log.ordered() if d in self.graph.records]
        index = make_lexical_index(self.bm25_backend)
        index.build(ordered, [self.graph.records[d].text for d in ordered])
        self.lexical = index
        self.flush()

    def _stamp(self) -> str:
        """What the vectors encode: every record's id and fingerprint, in ingest order, and the encoder."""
        digest = hashlib.sha256(f"{self.embedder.model_name}\t{self.embedder.encoder}\n".encode())
        for doc_id, fingerprint in self.log.ordered():
            digest.update(f"{doc_id}\t{fingerprint}\n".encode())
        return digest.hexdigest()
