"""The store's face: :class:`CARStore`, one corpus that a retriever searches."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Self

from car_rag.channels import DenseChannel, LexicalIndex, VectorChannel
from car_rag.embedding import DEFAULT_MODEL, Embedder
from car_rag.extractors import ScopeExtractor
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy, Rule, load_policy
from car_rag.postgres import DEFAULT_SCHEMA, ChangeFeed, PgVectorChannel, PostgresRecordLog
from car_rag.record_log import Change, RecordLog
from car_rag.records import Record
from car_rag.store import chroma
from car_rag.store.config import (
    StoreError,
    built_encoder,
    check_options,
    check_parity,
    checked,
    new_config,
    pairing_rules,
    read_config,
    vector_column,
    vector_store_of,
    vectors_at,
    write_config,
)
from car_rag.store.indexes import Indexes
from car_rag.store.ingest import DEFAULT_CHUNK, ChunkEncoder, Ingest, IngestReport, key_of, key_records
from car_rag.store.locking import ReadWriteLock
from car_rag.store.replica import Replica
from car_rag.store.sqlite_log import SqliteRecordLog
from car_rag.trust import PublisherScopes

__all__ = ["CARStore"]

log = logging.getLogger(__package__)  # car_rag.store: one logger for all the store says, whichever module


class CARStore:
    """One corpus on disk: open it, ingest into it, hand it to a retriever."""

    def __init__(
        self,
        path: Path,
        config: dict[str, Any],
        *,
        embedder: Embedder | None = None,
        chroma_client: Any = None,
        chroma_timeout_s: float | None = None,
        log: RecordLog | None = None,
        publisher_scopes: Mapping[str, PublisherScopes] | None = None,
    ):
        self.path = path
        self.config = config
        self.chroma_timeout_s = chroma_timeout_s
        self.policy = with_publishers(Policy.model_validate(config["policy"]), publisher_scopes or {}, path)
        built_with = built_encoder(config)
        self.embedder = embedder or Embedder(config["embedding_model"], encoder=built_with)
        if embedder is not None and embedder.model_name != config["embedding_model"]:
            raise StoreError(
                f"store {path} holds {config['embedding_model']!r} vectors; got an embedder for {embedder.model_name!r}"
            )
        check_parity(config, self.embedder, str(path))
        self.extractor = ScopeExtractor(self.policy, cache_dir=path / "scope-cache")
        """The policy's ``[record_scope]``, applied to every record ingested."""
        self.lock = ReadWriteLock()
        """Queries hold its read side, ingests its write side (see :mod:`car_rag.store.locking`)."""
        self.log: RecordLog = log or SqliteRecordLog(path / "records.sqlite")
        """Where the records and edges are durable (see :mod:`car_rag.record_log`)."""
        self.feed: ChangeFeed | None = None
        """Set by :meth:`follow`: what keeps this process up with the others' commits."""
        shared = self.log if isinstance(self.log, PostgresRecordLog) else None
        self._client, dense = self._vector_search(shared, chroma_client)  # _client: the Chroma client, on Chroma
        self.indexes = Indexes(path, self.log, dense, config["bm25_backend"], self.embedder)
        """What this process searches: graph, BM25 and vectors (:mod:`car_rag.store.indexes`)."""
        self.replica = None if shared is None else Replica(self.indexes, shared, self.lock, self._client)
        """Set on a shared log (:mod:`car_rag.store.replica`): how other processes' commits reach this one."""
        self._ingest = Ingest(self.indexes, self.log, self.lock, self.embedder, self._client, self.replica, self.location)
        self.indexes.load(self.policy)

    def _vector_search(self, shared: PostgresRecordLog | None, chroma_client: Any) -> tuple[Any, VectorChannel]:
        """Dense search where the configuration puts the vectors: pgvector beside the records of the
        ``shared`` log (no Chroma client), or a Chroma collection and its client (on a shared log,
        connected on first use: the log's own vectors answer meanwhile)."""
        config = self.config
        if vector_store_of(config) == "pgvector":
            if shared is None:
                raise StoreError(f"store {self.path} names pgvector as its vector store, which only a store on PostgreSQL has")
            shared.use_vector_column(vector_column(config))
            return None, PgVectorChannel(shared, ef_search=config["hnsw"]["ef_search"])
        if shared is not None and not config.get("chroma_url"):
            raise StoreError(
                f"store {shared.location} has no Chroma server: the processes sharing it cannot share an embedded vector database"
            )
        connect = partial(chroma.connect, self.path, config.get("chroma_url"), self.chroma_timeout_s)
        if shared is not None and chroma_client is None:
            # Its vectors are in the log too: the store opens, and answers, while Chroma is down.
            client = chroma.Deferred(connect)
            return client, DenseChannel(chroma.Deferred(lambda: chroma.collection(client, config)))
        client = chroma_client or connect()
        return client, DenseChannel(chroma.collection(client, config))

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        path: str | Path,
        policy: str | Path | Policy | None = None,
        *,
        chroma_url: str | None = None,
        embedder: Embedder | None = None,
        encoder: str | None = None,
        bm25_backend: str = "bm25-incremental",
        hnsw: dict[str, Any] | None = None,
        chroma_timeout_s: float | None = None,
        authority_url: str | None = None,
        authority_schema: str | None = None,
        vector_store: str | None = None,
        follow: bool = True,
        publisher_scopes: Mapping[str, PublisherScopes] | None = None,
    ) -> Self:
        """Open the store at ``path``, creating it when ``policy`` is given and none exists.

        ``chroma_url`` (``http://host:port``) keeps the vectors in a Chroma server instead of
        the embedded database; it is remembered in the store's configuration, as are
        ``bm25_backend``, the Chroma ``hnsw`` index settings (see ``DEFAULT_HNSW``) and the
        ``encoder`` (``"onnx"`` or ``"torch"``, see :class:`Embedder`): a new store takes the
        given one (default ``"onnx"``), an existing one its own, and refuses another.
        ``chroma_timeout_s`` bounds every call to that server (default: none, chromadb's own;
        :data:`SHARED_CHROMA_TIMEOUT_S` for a shared store), so a server that stops answering fails
        a query or an insert instead of hanging it.

        ``authority_url`` (``postgresql://…``) opens a store that several processes share: its
        records, edges, entity index and configuration live in that database (in the schema
        ``authority_schema``, default ``car_rag``), its vectors in the Chroma server
        ``chroma_url``, and ``path`` is a folder of this process's own (caches). Every process
        keeps the graph and BM25 in memory and, with ``follow``, applies what the others commit
        within moments (:mod:`car_rag.postgres.feed`).

        ``vector_store="pgvector"`` keeps such a store's vectors in that same database instead of
        Chroma (a ``vector`` column under an HNSW index, written in the records' own transaction;
        ``hnsw`` as for Chroma, see ``DEFAULT_PGVECTOR_HNSW``). A store remembers its vector store
        (``"chroma"`` or ``"pgvector"``) and refuses the other.

        ``publisher_scopes`` (publisher name -> {scope key: values}, a server's keys file) narrows
        the scopes those publishers' records may void tenants' records in, for this process (see
        :mod:`car_rag.trust`); the store's policy is left as built.
        """
        path = Path(path)
        check_options(embedder, encoder, vector_store, chroma_url, authority_url, authority_schema)
        wanted = load_policy(policy) if policy is not None else None
        shared = None if authority_url is None else PostgresRecordLog(authority_url, authority_schema or DEFAULT_SCHEMA)
        where = str(path) if shared is None else shared.location
        stored = read_config(path) if shared is None else shared.setup(None)
        if stored is None:
            if wanted is None:
                raise StoreError(f"no car-rag store at {where}: pass a policy to create one")
            embedder = embedder or Embedder(DEFAULT_MODEL, encoder=encoder)
            path.mkdir(parents=True, exist_ok=True)
            config = new_config(
                wanted, embedder, vector_store=vector_store, bm25_backend=bm25_backend, hnsw=hnsw, chroma_url=chroma_url
            )
            if shared is None:
                try:
                    store = cls(path, config, embedder=embedder, chroma_timeout_s=chroma_timeout_s)  # connect before pinning
                except Exception as exc:
                    raise StoreError(f"cannot create a store at {path}: {exc}") from exc
                write_config(path, config)
                log.info("created store %s (policy %r, vectors in %s)", path, wanted.name, vectors_at(config))
                return store
            if not chroma_url and vector_store != "pgvector":
                raise StoreError(
                    f"a store on PostgreSQL ({where}) keeps its vectors where every process reaches them: "
                    "pass chroma_url (--chroma-url) of a Chroma server, or vector_store='pgvector' "
                    "(--vector-store pgvector) to keep them in that database"
                )
            pgvector = vector_column(config) if vector_store == "pgvector" else None
            stored = shared.setup(config, vectors=pgvector)  # ours, or the one another process stored first
            assert stored is not None
            if stored is config:
                log.info("created store %s (policy %r, vectors in %s)", where, wanted.name, vectors_at(config))
        config, added = checked(stored, where, wanted, vector_store=vector_store, chroma_url=chroma_url)
        if embedder is None and encoder is not None:
            embedder = Embedder(config["embedding_model"], encoder=encoder)
        if shared is not None:
            path.mkdir(parents=True, exist_ok=True)
            chroma_timeout_s = chroma.SHARED_CHROMA_TIMEOUT_S if chroma_timeout_s is None else chroma_timeout_s
        store = cls(
            path, config, embedder=embedder, chroma_timeout_s=chroma_timeout_s, log=shared, publisher_scopes=publisher_scopes
        )
        if added:
            assert wanted is not None
            store._adopt(wanted, added)
        log.info("opened store %s: %d records, policy %r", where, len(store), store.policy.name)
        if follow:
            store.follow()
        return store

    def _adopt(self, wanted: Policy, added: tuple[Rule, ...]) -> None:
        """Take a policy that only adds rules (and the hierarchies they read: a built-in policy
        upgraded to multi-authority or exceptions) where none of them pairs a stored record: they
        make no edge among stored records, so the store takes the new policy for what it ingests
        next; otherwise it must be rebuilt."""
        if blocking := pairing_rules(added, self.policy, wanted, self.records.values()):
            self.close()
            raise StoreError(
                f"store {self.location} holds records with levels or types that the rules {blocking} of the "
                f"policy {wanted.name!r} now pair: ingest into a new store"
            )
        self.config = {**self.config, "policy": json.loads(wanted.model_dump_json())}
        self.policy = self.graph.policy = wanted
        if isinstance(self.log, PostgresRecordLog):
            self.log.replace_config(self.config)
        else:
            write_config(self.path, self.config)
        log.info("store %s: policy %r now adds rules %s", self.location, wanted.name, [r.name for r in added])

    @property
    def location(self) -> str:
        """What messages call this store: its folder, or its PostgreSQL database and schema."""
        return self.log.location if self.log.shared else str(self.path)

    def close(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        with self.lock.write():
            if self.indexes.unsaved:
                self.indexes.flush()
            self.dense.close()
            self.log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    @property
    def graph(self) -> AuthorityGraph:
        return self.indexes.graph

    @property
    def lexical(self) -> LexicalIndex:
        return self.indexes.lexical

    @property
    def dense(self) -> VectorChannel:
        """Dense search: exact in memory up to its limit, else the vector store's HNSW index."""
        return self.indexes.dense

    @property
    def head(self) -> int:
        """The newest change of a shared log this process has applied."""
        return self.indexes.head

    def __len__(self) -> int:
        return len(self.graph)

    def get(self, doc_id: str, tenant: str | None = None) -> Record:
        """The record ``doc_id`` of ``tenant`` (None: the public one), as the store holds it (its
        ``doc_id`` the key :meth:`key` gives)."""
        try:
            return self.graph.records[self.key(doc_id, tenant)]
        except KeyError:
            owner = "" if tenant is None else f" of tenant {tenant!r}"
            raise KeyError(f"no record {doc_id!r}{owner} in store {self.path}") from None

    def key(self, doc_id: str, tenant: str | None = None) -> str:
        """The key the store holds ``tenant``'s record ``doc_id`` under (see :func:`~car_rag.records.tenant_key`)."""
        return key_of(tenant, doc_id, self.graph.records)

    def keyed(self, records: Sequence[Record]) -> list[Record]:
        """``records`` as the store would hold them: under their keys, their ``supersedes`` resolved
        (see :func:`~car_rag.store.ingest.key_records`)."""
        with self.lock.read():
            return key_records(records, self.graph.records)

    @property
    def records(self) -> dict[str, Record]:
        return self.graph.records

    # ------------------------------------------------------------------ writing
    def ingest(
        self,
        source: str | Path | Iterable[Record | dict[str, Any]],
        *,
        progress: bool = True,
        embeddings: Mapping[str, Sequence[float]] | None = None,
        strict: bool = False,
        atomic: bool = False,
        chunk_size: int = DEFAULT_CHUNK,
        may_replace: Callable[[Record, Record], str | None] | None = None,
        encode: ChunkEncoder | None = None,
    ) -> IngestReport:
        """Add or replace records from a JSONL path or an iterable; bad records are reported.

        Works as well for one record at a time (streaming): the graph, the BM25 index and
        the vectors are updated in place, and ``report.newly_superseded`` names the records
        the new ones void. ``embeddings`` (doc_id → vector) skips encoding those records.

        Records are embedded and committed ``chunk_size`` at a time (vectors, then records and
        edges in one SQLite transaction, then BM25), so a crash keeps every committed chunk,
        memory holds one chunk's vectors, and running the same ingest again resumes: records
        already stored with the same fingerprint are skipped before they are embedded
        (``report.unchanged``). Queries running meanwhile see the store between two chunks,
        never inside one. An exception stops the ingest with the chunks before it stored.

        The policy's ``[record_scope]`` extractors fill the scope keys records lack (their own
        scope wins); ``report.missing_scope`` names the rules that still cannot fire for some
        record. ``strict`` stores nothing when there is such a record or an extractor matched
        nothing (``report.strict_refused``): a corpus either goes in with every rule able to
        fire, or not at all, and what was stored before is untouched either way.

        ``atomic`` stores nothing when any record is rejected (``report.errors``): a batch goes in
        whole or not at all, as a service's clients expect of one request; it is one chunk.

        A tenant's record is held under its :func:`~car_rag.records.tenant_key`, so two tenants may
        each hold a record of one doc_id; what a ``supersedes`` of a tenant's record names is its own
        tenant's record of that id, else a public one (see :func:`~car_rag.store.ingest.key_records`).
        The report names records by those keys; :meth:`get` takes a doc_id and its tenant.

        ``may_replace(stored, new)`` is asked, for each record that would replace a stored one,
        whether it may (None) or why not (the record is rejected with that reason, field
        ``doc_id``); it sees the store as the write sees it (in a shared store, after every other
        process's commit), so no other writer can take the doc_id between the check and the write.

        In a store shared through PostgreSQL each chunk is one transaction in this process's turn
        among the writers; its vectors reach the Chroma server after the commit (the outbox).

        ``encode`` embeds the records to store on another engine (:func:`car_rag.store.distributed.ingest_on_ray`);
        everything else, the commits included, is as above.
        """
        return self._ingest.run(
            source,
            self.policy,
            self.extractor,
            progress=progress,
            embeddings=embeddings,
            strict=strict,
            atomic=atomic,
            chunk_size=chunk_size,
            may_replace=may_replace,
            encode=encode,
        )

    def flush(self) -> None:
        """Save the BM25 index and the exact-search vectors. Records are durable as soon as
        ingested; an index saved behind them is caught up from the records table when the
        store is opened, and vectors saved behind them are read from Chroma instead. (A store
        on a shared log keeps no such files: it builds both from the log when opened.)"""
        self.indexes.flush()

    # ------------------------------------------------------------------ a shared log
    def catch_up(self) -> list[Change]:
        """Apply what other processes committed to this store's shared log since this process
        last looked (:mod:`car_rag.postgres.feed` calls it when a commit is signalled, and on a
        timer); returns the changes applied. A store on a log of its own has nothing to catch up."""
        return [] if self.replica is None else self.replica.catch_up()

    def drain_outbox(self, doc_ids: Sequence[str] | None = None, *, batch: int = 500, min_age_s: float = 0.0) -> int:
        """Hand the vector store every vector the shared log holds that it has not taken (the
        outbox: written after each commit, retried from here when the vector store failed);
        processes draining at once take different records. ``doc_ids``: only those (a writer's
        own records: it waits for another process handing them over, so that when it returns
        they are in the vector store); ``min_age_s``: only records written at least that long
        ago (the change feed's retries leave the fresh ones to their writer). Returns how many
        this call handed over (none where the vector store took them in the commit: a log of one
        process's own, or pgvector)."""
        return 0 if self.replica is None else self.replica.drain_outbox(doc_ids, batch=batch, min_age_s=min_age_s)

    def follow(self, *, poll_s: float = 1.0) -> None:
        """Keep this process up with a shared log: apply other processes' commits as they are
        signalled (and every ``poll_s`` regardless), and drain the vector outbox (a thread;
        stopped by :meth:`close`). Nothing to do for a store on a log of its own."""
        if self.replica is not None and self.feed is None:
            self.feed = ChangeFeed(self, self.replica.log, poll_s=poll_s)
            self.feed.start()


def with_publishers(policy: Policy, scopes: Mapping[str, PublisherScopes], where: Path | str) -> Policy:
    """``policy`` deciding trust with ``scopes`` (publisher -> scope key -> values); a scope key the
    policy does not have is refused, since no record's scope could hold it."""
    if not scopes:
        return policy
    for name, keys in scopes.items():
        if unknown := sorted(set(keys) - set(policy.scope_keys)):
            raise StoreError(
                f"publisher {name!r} publishes for scope keys {unknown} that policy {policy.name!r} of store {where} "
                f"does not have (scope_keys {list(policy.scope_keys)})"
            )
    return policy.model_copy(update={"trust": policy.trust.with_publishers(scopes)})
