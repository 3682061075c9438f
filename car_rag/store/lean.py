"""A worker's store without the records or the graph: Stage 2 in SQL (``stage2="sql"``).

A :class:`~car_rag.store.CARStore` on PostgreSQL holds every record, the authority graph, BM25
and (up to the exact-search limit) the vectors in each process: 282 MB per 100k records
(``evals/results/serve/stage2.md``). A :class:`LeanStore` over the same database holds what
Stage 1 cannot ask PostgreSQL for with the same result: the BM25 index (built from the stored
texts in ingest order, so it ranks as the in-memory store's does; PostgreSQL's ``ts_rank`` is
not BM25) and the forms of the scope values (:class:`~car_rag.scope_linking.ScopeVocabulary`,
what scope linking reads the question against). Dense search is pgvector's; every query reads
its authority closure in one round trip (:class:`~car_rag.postgres.closure.ClosureQuery`), so
an insert is in Stage 2 and the dense channel as soon as it commits, and the change feed only
brings BM25 and the vocabulary up to date. Queries only: it ingests nothing (writers are
``CARStore`` processes or ``car-rag ingest``). With ``bm25_folder`` its BM25 is the store's
backend saved there and memory-mapped (:mod:`car_rag.channels.mapped_bm25`): the same scores,
outside the worker's heap; the ids and the scope vocabulary are mapped from there too
(:class:`~car_rag.mapped_files.StringColumn`, :class:`~car_rag.scope_linking.MappedVocabulary`).
Each build there is stamped with the newest change it holds: a worker opening a build behind the
log catches it up with the records committed since (none rebuilt unless one it holds was written
again), and workers sharing the folder build it once (:func:`~car_rag.mapped_files.building`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Self

import numpy as np

from car_rag.channels import LexicalIndex, make_lexical_index
from car_rag.channels.mapped_bm25 import MAPPED_BACKENDS, MappedBM25Index, MappedIncrementalBM25Index, new_mapped, open_mapped
from car_rag.eligibility import Gate
from car_rag.embedding import Embedder
from car_rag.graph import AuthorityGraph
from car_rag.mapped_files import Builds, StringColumn, building
from car_rag.policy import Policy
from car_rag.postgres import DEFAULT_SCHEMA, ChangeFeed, PgVectorChannel, PostgresRecordLog
from car_rag.postgres.closure import ClosureQuery, records_by_id, scope_values, texts
from car_rag.record_log import Change
from car_rag.records import Record
from car_rag.scope_linking import MappedVocabulary, ScopeVocabulary
from car_rag.store.car_store import CARStore, with_publishers
from car_rag.store.config import StoreError, built_encoder, checked, vector_column, vector_store_of
from car_rag.store.locking import ReadWriteLock
from car_rag.trust import PublisherScopes

__all__ = ["LeanStore", "STAGE2_MODES", "STAGE2_SQL_ABOVE", "open_for_queries", "stage2_for"]

log = logging.getLogger(__package__)

VOCABULARY = "vocabulary"
"""The subfolder of ``bm25_folder`` the scope values' forms are published in (:class:`MappedVocabulary`)."""


class LeanStore:
    """A store on PostgreSQL (pgvector) opened to answer queries with Stage 2 in SQL; see the module."""

    def __init__(
        self,
        shared: PostgresRecordLog,
        config: dict[str, Any],
        *,
        embedder: Embedder | None = None,
        publisher_scopes: Mapping[str, PublisherScopes] | None = None,
        bm25_folder: str | Path | None = None,
    ):
        if vector_store_of(config) != "pgvector":
            raise StoreError(
                f"store {shared.location} keeps its vectors in {vector_store_of(config)}: Stage 2 in SQL (stage2='sql') "
                "serves stores whose vectors are in the same PostgreSQL (vector_store='pgvector')"
            )
        if bm25_folder is not None and config["bm25_backend"] not in MAPPED_BACKENDS:
            raise StoreError(
                f"store {shared.location} ranks with the {config['bm25_backend']} BM25 backend, which cannot be "
                f"memory-mapped (bm25_folder maps {', '.join(MAPPED_BACKENDS)}): open it without bm25_folder"
            )
        self.log, self.config = shared, config
        self.bm25_folder = None if bm25_folder is None else Path(bm25_folder)
        self.policy: Policy = with_publishers(Policy.model_validate(config["policy"]), publisher_scopes or {}, shared.location)
        self.embedder = embedder or Embedder(config["embedding_model"], encoder=built_encoder(config))
        shared.use_vector_column(vector_column(config))
        self.dense = PgVectorChannel(shared, ef_search=config["hnsw"]["ef_search"])
        self.lexical: LexicalIndex = make_lexical_index(config["bm25_backend"])
        self.vocabulary: ScopeVocabulary | MappedVocabulary = ScopeVocabulary()
        self._vocabularies = None if self.bm25_folder is None else Builds(self.bm25_folder / VOCABULARY)
        self.lock = ReadWriteLock()
        """Queries hold its read side, the change feed its write side."""
        self.feed: ChangeFeed | None = None
        self.head = 0
        """The newest change BM25 and the vocabulary hold."""
        self.closure = ClosureQuery(shared, self.policy)
        self._indexed: set[str] = set()
        """The ids BM25 holds where they are in the heap (mapped ones are found in their files)."""
        self._idle: list[Any] = []
        self._pool = threading.Lock()
        self.load()

    @classmethod
    def open(
        cls,
        authority_url: str,
        authority_schema: str | None = None,
        *,
        embedder: Embedder | None = None,
        encoder: str | None = None,
        follow: bool = True,
        publisher_scopes: Mapping[str, PublisherScopes] | None = None,
        bm25_folder: str | Path | None = None,
    ) -> Self:
        """Open the store in ``authority_schema`` (default ``car_rag``) of the database at
        ``authority_url`` for queries; ``follow``: keep BM25 and the vocabulary up with commits;
        ``bm25_folder``: BM25 memory-mapped from there (see the module)."""
        shared = PostgresRecordLog(authority_url, authority_schema or DEFAULT_SCHEMA)
        stored = shared.setup(None)
        if stored is None:
            raise StoreError(f"no car-rag store at {shared.location}: run car-rag ingest first")
        config, _ = checked(stored, shared.location, None, vector_store=None, chroma_url=None)
        if embedder is None and encoder is not None:
            embedder = Embedder(config["embedding_model"], encoder=encoder)
        store = cls(shared, config, embedder=embedder, publisher_scopes=publisher_scopes, bm25_folder=bm25_folder)
        log.info("opened store %s for queries, Stage 2 in SQL: %d records", shared.location, len(store))
        if follow:
            store.follow()
        return store

    def load(self) -> None:
        """BM25, exact-search vectors (up to the limit) and the vocabulary, from one snapshot. With
        ``bm25_folder``, under its build lock (workers starting together build it once): the builds
        there, caught up with the records committed after the change each is stamped with, else
        built from the stored records and published."""
        with self._building(), self.log.connect(autocommit=False, role="load") as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            count, head = conn.execute(self.log._sql("SELECT count(*), coalesce(max(change), 0) FROM {records}")).fetchone()
            head, exact = int(head), count <= self.dense.exact_limit
            lexical = self._saved_lexical(conn, count, head)
            ids, bodies, vectors = [], [], {}
            if lexical is None or exact:
                for doc_id, text, vector in texts(conn, self.log, vectors=exact):
                    ids.append(doc_id)
                    if lexical is None:
                        bodies.append(text)
                    if vector is not None:
                        vectors[doc_id] = vector
            if lexical is None:
                lexical = self._new_lexical(head)
                lexical.build(ids, bodies)
            vocabulary = self._load_vocabulary(conn, head)
        self.dense.hold(ids if exact else lexical.doc_ids, vectors)
        self.lexical, self.vocabulary, self.head = lexical, vocabulary, head
        self._indexed = set() if isinstance(lexical.doc_ids, StringColumn) else set(ids)

    def _building(self) -> AbstractContextManager[None]:
        return nullcontext() if self.bm25_folder is None else building(self.bm25_folder)

    def _stamp(self, head: int) -> dict[str, Any]:
        """What a build under ``bm25_folder`` holds: this store's records committed up to change ``head``."""
        return {"schema": self.log.schema, "change": head}

    def _behind(self, stamp: Mapping[str, Any], head: int) -> int | None:
        """The change a build stamped ``stamp`` holds the records up to, where this snapshot (at
        change ``head``) can catch it up; None for another store's build, or one newer than the snapshot."""
        change = stamp.get("change")
        if stamp.get("schema") != self.log.schema or not isinstance(change, int) or change > head:
            return None
        return change

    def _saved_lexical(self, conn: Any, count: int, head: int) -> LexicalIndex | None:
        """The index ``bm25_folder`` holds, caught up to ``head`` with the records committed after
        its stamp; None where there is none, it is another store's, or a record it holds was
        replaced since (its place in BM25 is its first ingest's: rebuilt)."""
        if self.bm25_folder is None:
            return None
        saved = open_mapped(self.config["bm25_backend"], self.bm25_folder)
        since = None if saved is None else self._behind(saved.stamp, head)
        if saved is None or since is None or not saved.doc_ids or not self._holds(conn, saved.doc_ids[0], saved.doc_ids[-1]):
            return None
        later = [(doc_id, text) for doc_id, text, _ in texts(conn, self.log, vectors=False, after=since)]
        if len(saved.doc_ids) + len(later) != count:  # a record it holds was written again since (none is ever removed)
            return None
        if later:
            if not saved.supports_add:
                return None
            saved.stamp = self._stamp(head)  # what a compaction publishes
            saved.add([d for d, _ in later], [t for _, t in later])
        return saved

    def _holds(self, conn: Any, *doc_ids: str) -> bool:
        """Whether this store holds every one of ``doc_ids`` (a saved build's first and last: not another store's)."""
        found = conn.execute(self.log._sql("SELECT count(*) FROM {records} WHERE doc_id = ANY(%s)"), (list(set(doc_ids)),))
        return int(found.fetchone()[0]) == len(set(doc_ids))

    def _new_lexical(self, head: int) -> LexicalIndex:
        """An index to build: in the heap, or mapped from ``bm25_folder`` and stamped ``head``
        (publishing where the one it replaces did, so that this process's earlier build is removed)."""
        if self.bm25_folder is None:
            return make_lexical_index(self.config["bm25_backend"])
        fresh = new_mapped(self.config["bm25_backend"], self.bm25_folder)
        fresh.stamp = self._stamp(head)
        if isinstance(self.lexical, MappedBM25Index | MappedIncrementalBM25Index):
            fresh.builds = self.lexical.builds
        return fresh

    def _load_vocabulary(self, conn: Any, head: int) -> ScopeVocabulary | MappedVocabulary:
        """The scope values' forms: in the heap; or mapped from the build under ``bm25_folder``, with
        the pairs of the records committed after its stamp beside it, where they are fewer than a
        tenth of its own (else written again, whole, and published)."""
        if self._vocabularies is None:
            vocabulary = ScopeVocabulary()
            vocabulary.add(scope_values(conn, self.log))
            return vocabulary
        found = self._vocabularies.current()
        since = None if found is None else self._behind(found[1], head)
        if found is not None and since is not None:
            try:
                saved = MappedVocabulary(found[0])
            except FileNotFoundError:  # removed meanwhile by the process that published a newer one
                saved = None
            if saved is not None:
                later = list(scope_values(conn, self.log, after=since)) if since < head else []
                if len(later) * 10 <= len(saved):
                    saved.add(later)
                    return saved
        stamp = self._stamp(head)
        built = self._vocabularies.publish(lambda folder: MappedVocabulary.write(folder, scope_values(conn, self.log), stamp))
        return MappedVocabulary(built)

    def _holds_any(self, doc_ids: Sequence[str]) -> bool:
        """Whether BM25 holds one of ``doc_ids`` already (a record replaced since)."""
        held = self.lexical.doc_ids
        if isinstance(held, StringColumn):  # found by hash in its mapped files
            return any(d in held for d in doc_ids)
        return not self._indexed.isdisjoint(doc_ids)

    @property
    def location(self) -> str:
        return self.log.location

    def __len__(self) -> int:
        """The records BM25 holds (those committed up to :attr:`head`)."""
        return len(self.lexical.doc_ids)

    @property
    def records(self) -> dict[str, Record]:
        raise StoreError(
            f"{self.location} is open with Stage 2 in SQL: this process holds no records (open it with stage2='memory')"
        )

    @property
    def graph(self) -> AuthorityGraph:
        raise StoreError(
            f"{self.location} is open with Stage 2 in SQL: this process holds no graph (open it with stage2='memory')"
        )

    # ------------------------------------------------------------------ queries
    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A connection for closure queries (one per query running at once); one that fails is closed."""
        with self._pool:
            conn = self._idle.pop() if self._idle else None
        try:
            conn = conn or self.log.connect(autocommit=False, role="closure")
            yield conn
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        with self._pool:
            self._idle.append(conn)

    def neighbourhood(self, query: str, doc_ids: Collection[str], named: Mapping[str, Sequence[str]]) -> AuthorityGraph:
        """The graph a query's latent-scope step and Stages 2 and 3 read: the closure of ``doc_ids``
        (its Stage-1 candidates), of the records holding a value its words may name, and of those
        holding the scope ids ``named`` (the policy's patterns)."""
        values = self.vocabulary.named_by(query) | {(k, v) for k, vs in named.items() for v in vs}
        with self._connection() as conn:
            return self.closure.graph(conn, doc_ids, values)

    def fetch(self, doc_ids: Collection[str]) -> dict[str, Record]:
        """The stored records of ``doc_ids``, by id (those stored): one query."""
        with self._connection() as conn, conn.transaction():
            return records_by_id(conn, self.log, doc_ids)

    def gate_mask(self, gate: Gate, doc_ids: Sequence[str]) -> np.ndarray:
        """``gate``'s mask over ``doc_ids``, decided by PostgreSQL over the stored records (the
        condition the dense channel searches under: :meth:`~car_rag.eligibility.Gate.chroma_where`)."""
        admitted = self.dense._matching(gate.chroma_where() or {})
        if isinstance(doc_ids, StringColumn):  # BM25's mapped ids: each admitted one found by hash
            mask = np.zeros(len(doc_ids), dtype=bool)
            positions = [p for p in map(doc_ids.position, admitted) if p is not None]
            mask[positions] = True
            return mask
        held = set(admitted)
        return np.fromiter((d in held for d in doc_ids), dtype=bool, count=len(doc_ids))

    # ------------------------------------------------------------------ the change feed
    def catch_up(self) -> list[Change]:
        """Take other processes' commits into BM25, exact search and the vocabulary; the changes taken."""
        changes = self.log.changes(self.head, vectors=self.dense.exact)
        if not changes:
            return []
        with self.lock.write():
            fresh = [c for c in changes if c.number > self.head]
            if not fresh:
                return []
            ids = [c.record.doc_id for c in fresh]
            self.vocabulary.add(pair for c in fresh for pair in c.record.scope.items())
            vectors = {c.record.doc_id: c.vector for c in fresh if c.vector is not None}
            if vectors:
                self.dense.put(list(vectors), np.vstack(list(vectors.values())))
            if self.lexical.supports_add and not self._holds_any(ids) and len(set(ids)) == len(ids):
                if isinstance(self.lexical, MappedIncrementalBM25Index):
                    self.lexical.stamp = self._stamp(fresh[-1].number)  # what a compaction publishes
                self.lexical.add(ids, [c.record.text for c in fresh])
                if not isinstance(self.lexical.doc_ids, StringColumn):
                    self._indexed.update(ids)
                self.head = fresh[-1].number
            else:  # a record replaced: its place in BM25 is its first ingest's, as in the store
                self.load()
        return fresh

    def drain_outbox(self, *, min_age_s: float = 0.0) -> int:
        """Nothing waits: pgvector takes each vector in its record's commit."""
        return 0

    def follow(self, *, poll_s: float = 1.0) -> None:
        """Keep BM25 and the vocabulary up with other processes' commits (a thread; stopped by :meth:`close`)."""
        if self.feed is None:
            self.feed = ChangeFeed(self, self.log, poll_s=poll_s)
            self.feed.start()

    def close(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        with self.lock.write(), self._pool:
            for conn in self._idle:
                conn.close()
            self._idle = []
            self.dense.close()
            self.log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


STAGE2_MODES = ("memory", "sql", "auto")
STAGE2_SQL_ABOVE = 250_000
"""``stage2="auto"`` serves a store on PostgreSQL (pgvector) with Stage 2 in SQL above this many
records. Chosen from one measured size (``evals/results/scale-out/stage2-sql.md``, 100k records):
there a memory-mode worker is ready at 613 MB and a sql-mode one at 394 MB, the sql mode costing
+20 ms p50 (+47%) per query; at 250k a memory-mode worker holds about 1.2 GB growing linearly (its
open peaks above that), past which saving memory is worth the latency. A judgment, not a fit."""


def open_for_queries(
    path: str | Path,
    *,
    stage2: str = "auto",
    sql_above: int = STAGE2_SQL_ABOVE,
    authority_url: str | None = None,
    authority_schema: str | None = None,
    embedder: Embedder | None = None,
    encoder: str | None = None,
    follow: bool = True,
    publisher_scopes: Mapping[str, PublisherScopes] | None = None,
    bm25_folder: str | Path | None = None,
    **options: Any,
) -> CARStore | LeanStore:
    """A store opened to answer queries, Stage 2 in this process's memory (a :class:`CARStore`,
    ``stage2="memory"``) or in SQL (a :class:`LeanStore`, ``"sql"``: a store on PostgreSQL whose
    vectors are in pgvector); ``"auto"``: SQL where the store is such a store of more than
    ``sql_above`` records. ``bm25_folder``: where a store served in SQL maps BM25 (:class:`LeanStore`;
    a memory store keeps its own in its folder). ``options`` go to :meth:`CARStore.open` (a memory store's alone)."""
    if stage2 not in STAGE2_MODES:
        raise ValueError(f"stage2 must be one of {', '.join(STAGE2_MODES)}, got {stage2!r}")
    if sql_above < 0:
        raise ValueError(f"sql_above must be >= 0, got {sql_above}")
    if stage2 == "sql" and authority_url is None:
        raise StoreError(
            f"stage2='sql' reads Stage 2 from a store on PostgreSQL (authority_url, --authority-url); {path} is a folder"
        )
    if stage2 == "auto":
        stage2 = "memory" if authority_url is None else stage2_for(authority_url, authority_schema, sql_above)
    if stage2 == "sql":
        assert authority_url is not None
        return LeanStore.open(
            authority_url,
            authority_schema,
            embedder=embedder,
            encoder=encoder,
            follow=follow,
            publisher_scopes=publisher_scopes,
            bm25_folder=bm25_folder,
        )
    return CARStore.open(
        path,
        authority_url=authority_url,
        authority_schema=authority_schema,
        embedder=embedder,
        encoder=encoder,
        follow=follow,
        publisher_scopes=publisher_scopes,
        **options,
    )


def stage2_for(authority_url: str, authority_schema: str | None, sql_above: int) -> str:
    """``"sql"`` for a store on pgvector of more than ``sql_above`` records, else ``"memory"``
    (a store whose vectors are in Chroma, or none yet: :meth:`CARStore.open` says what it lacks)."""
    shared = PostgresRecordLog(authority_url, authority_schema or DEFAULT_SCHEMA)
    try:
        config = shared.setup(None)
        if config is None or vector_store_of(config) != "pgvector":
            return "memory"
        with shared.connect(role="count") as conn:
            count = int(conn.execute(shared._sql("SELECT count(*) FROM {records}")).fetchone()[0])
    finally:
        shared.close()
    chosen = "sql" if count > sql_above else "memory"
    log.info("%s: %d records, Stage 2 in %s (stage2='auto', SQL above %d)", shared.location, count, chosen, sql_above)
    return chosen
