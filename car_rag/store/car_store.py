"""The persistent store behind one corpus: records, authority graph, BM25 index, vectors.

A store is a directory::

    car-store.json    configuration: policy, embedding model and encoder, vector store (Chroma location), BM25 backend
    records.sqlite    records (in ingest order) and supersession edges
    bm25/             the lexical index
    dense-exact.npz   a copy of the vectors for exact search (up to 20k records), checked against the records
    chroma/           the embedded Chroma database (absent when a Chroma server is used)
    scope-cache/      the LLM scope extractor's answers (only when the policy names one)

Scope keys are written as Chroma metadata on every record, so the vector store itself can
answer Stage-2 lookups (``get(where={"cve_id": ...})``); the framework integrations rely on
that. Ingest is idempotent by ``doc_id``: an unchanged record is skipped, a changed one
replaces the old, and a rejected one leaves everything already stored untouched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np
from tqdm.auto import tqdm

from car_rag.channels import DenseChannel, LexicalIndex, VectorChannel, load_lexical_index, make_lexical_index
from car_rag.embedding import DEFAULT_MODEL, Embedder
from car_rag.extractors import MissingScope, ScopeExtractor, missing_scope
from car_rag.extras import require
from car_rag.graph import AuthorityGraph, Edge, SupersessionCycleError
from car_rag.layout import CAR_PREFIX, LAYOUT_KEYS, RecordLayout
from car_rag.locking import ReadWriteLock
from car_rag.policy import Policy, Rule, load_policy
from car_rag.record_log import Change, LogWriter, RecordLog, SqliteRecordLog, StoredRecordError
from car_rag.records import LoadReport, Record, RecordError, load_records, parse_records

if TYPE_CHECKING:
    from car_rag.feed import ChangeFeed
    from car_rag.pg_log import Outbox, PostgresRecordLog, VectorColumn

__all__ = ["CARStore", "IngestReport", "StoreError", "RESERVED_METADATA", "chroma_metadata"]

log = logging.getLogger(__name__)

CONFIG_FILE = "car-store.json"
DENSE_COPY = "dense-exact.npz"
DEFAULT_HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32}
"""Chroma's defaults (ef 100, M 16) lose up to 9 of the exact top 10 on templated corpora with
duplicate texts (measured on ghsa-freeform); these keep search near exact at ~0.3 ms/query."""
VECTOR_STORES = ("chroma", "pgvector")
"""Where a store's vectors are searched past the exact limit: a Chroma collection (embedded, or a
server), or pgvector in the PostgreSQL of a shared store (its records' own table)."""
DEFAULT_PGVECTOR_HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 400, "max_neighbors": 32}
"""pgvector's HNSW index in Chroma's words (``max_neighbors`` is pgvector's ``m``). On 100k templated
records (``evals/results/serve/pgvector-100k.md``) pgvector's index defaults (m 16, ef_construction 64)
found 0.72-0.89 of the exact top 10 at ef_search 100-400; with Chroma's values above its graph found
0.87-0.90 (two builds) against Chroma's 0.95; ef_search 400 finds 0.94-0.96 at 6 ms p50, 800 0.99 at 12."""
FORMAT_VERSION = 1
SHARED_CHROMA_TIMEOUT_S = 30.0
"""A shared store's bound on each Chroma call when none is given: a writer waits for its own
vectors to be handed over, and must not wait for ever on a server that stopped answering."""
DEFAULT_CHUNK = 512
"""Records an ingest embeds and commits together (:meth:`CARStore.ingest`). On ghsa-freeform (2,318
records; ``evals/results/ingest/``) embedding is 95% of an ingest at any chunk size, and chunks of 128
to 1,024 took the time of one chunk within the machine's noise; what chunks add is in the writes (2.2 s
in one chunk, 2.4 to 3.7 s in chunks of 1,024 down to 128). A crash loses at most the chunk being
embedded: at 512, about 20 s of work on those long texts, under 10 s on short records; its vectors
take 0.8 MB."""
RESERVED_METADATA = LAYOUT_KEYS
"""Metadata keys a scope key may not take (see :mod:`car_rag.layout`)."""


class StoreError(RuntimeError):
    """A store that cannot be opened or written as asked."""


def vector_store_of(config: Mapping[str, Any]) -> str:
    """The engine a store's vectors are in (its configuration); stores from before the field: Chroma."""
    return str(config.get("vector_store", "chroma"))


def _vectors_at(config: Mapping[str, Any]) -> str:
    """Where a store's vectors are, for messages."""
    if vector_store_of(config) == "pgvector":
        return "pgvector beside its records"
    return f"Chroma at {config['chroma_url']}" if config.get("chroma_url") else "embedded Chroma"


def _vector_column(config: Mapping[str, Any]) -> VectorColumn:
    """The pgvector column and HNSW index of a store on pgvector, from its configuration."""
    from car_rag.pg_log import VectorColumn

    hnsw = config["hnsw"]
    if set(hnsw) - set(DEFAULT_PGVECTOR_HNSW) or hnsw["space"] != "cosine":
        raise StoreError(f"pgvector's HNSW index takes {sorted(DEFAULT_PGVECTOR_HNSW)} with space 'cosine', got {hnsw}")
    return VectorColumn(config["vector_dimension"], hnsw["max_neighbors"], hnsw["ef_construction"])


def built_encoder(config: Mapping[str, Any]) -> str:
    """The encoder a store's vectors came from (its ``car-store.json``); stores from before the field: PyTorch."""
    return str(config.get("encoder", "torch"))


@dataclass
class IngestReport:
    """What one ingest changed."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    errors: list[RecordError] = field(default_factory=list)
    new_edges: list[Edge] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    """Seconds spent per step: parse, scope (the policy's extractors), embed, graph, chroma, records (sqlite), bm25."""
    scope_filled: dict[str, int] = field(default_factory=dict)
    """Scope values the policy's ``[record_scope]`` extractors filled, by extractor."""
    missing_scope: list[MissingScope] = field(default_factory=list)
    """Per rule, the input's records it can never fire for: they lack a key of its ``within``."""
    warnings: list[str] = field(default_factory=list)
    """Extractors that matched nothing in the input (a mapped metadata field no record has)."""
    strict_refused: bool = False
    """``strict`` ingest found missing scope or a warning, and stored nothing."""

    def merge(self, part: IngestReport) -> None:
        """Add what one chunk of the ingest changed, and the time it took."""
        self.added += part.added
        self.updated += part.updated
        self.unchanged += part.unchanged
        self.errors += part.errors
        self.new_edges += part.new_edges
        self.warnings += part.warnings
        for step, seconds in part.timings_s.items():
            self.timings_s[step] = self.timings_s.get(step, 0.0) + seconds

    @property
    def newly_superseded(self) -> list[str]:
        """Records that this ingest made superseded."""
        return sorted({e.target for e in self.new_edges})

    def summary(self) -> str:
        counts = (
            f"{len(self.added)} added, {len(self.updated)} updated, {self.unchanged} unchanged, "
            f"{len(self.errors)} rejected, {len(self.new_edges)} supersession edges added"
        )
        if self.scope_filled:
            counts += "; scope filled by " + ", ".join(f"{name} {n}" for name, n in self.scope_filled.items())
        problems = [str(m) for m in self.missing_scope] + self.warnings
        if self.strict_refused:
            return f"nothing stored (strict): {'; '.join(problems)}"
        return "; ".join([counts, *problems])


def chroma_metadata(record: Record) -> dict[str, Any]:
    """Chroma metadata for a record: car-rag's flat layout with native lists, so the
    collection alone can rebuild the record and answer Stage-2 lookups (the integrations do)."""
    return _CHROMA_LAYOUT.metadata(record)


_CHROMA_LAYOUT = RecordLayout(json_lists=False)


def _reserved_by(key: str) -> str | None:
    """Whose metadata key a scope key would take: car-rag's own, or one Chroma refuses
    ("chroma:document", keys starting with "#" or "$"), which would fail the whole batch."""
    if key in RESERVED_METADATA or key.startswith(CAR_PREFIX):
        return "car-rag"
    if key == "chroma:document" or key.startswith(("#", "$")):
        return "Chroma"
    return None


def _scope_key_errors(record: Record, source: str, line: int | None) -> list[RecordError]:
    return [
        RecordError(source, line, record.doc_id, f"scope.{key}", f"scope key {key!r} is reserved for {owner} metadata")
        for key in record.scope
        if (owner := _reserved_by(key))
    ]


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
    ):
        self.path = path
        self.config = config
        self.chroma_timeout_s = chroma_timeout_s
        self.policy = Policy.model_validate(config["policy"])
        built_with = built_encoder(config)
        self.embedder = embedder or Embedder(config["embedding_model"], encoder=built_with)
        if embedder is not None and embedder.model_name != config["embedding_model"]:
            raise StoreError(
                f"store {path} holds {config['embedding_model']!r} vectors; got an embedder for {embedder.model_name!r}"
            )
        if self.embedder.encoder != built_with:
            raise StoreError(
                f"store {path} was built with the {built_with!r} encoder; this process asked for the "
                f"{self.embedder.encoder!r} encoder. One store holds one encoder's vectors: open it with "
                f"--encoder {built_with} (encoder={built_with!r}), or ingest into a new store"
            )
        self.extractor = ScopeExtractor(self.policy, cache_dir=path / "scope-cache")
        """The policy's ``[record_scope]``, applied to every record ingested."""
        self.lock = ReadWriteLock()
        """Queries hold its read side, ingests its write side (see :mod:`car_rag.locking`)."""
        self.log: RecordLog = log or SqliteRecordLog(path / "records.sqlite")
        """Where the records and edges are durable (see :mod:`car_rag.record_log`)."""
        self.head = 0
        """The newest change of a shared log this process has applied."""
        self.feed: ChangeFeed | None = None
        """Set by :meth:`follow`: what keeps this process up with the others' commits."""
        self.dense: VectorChannel
        """Dense search: exact in memory up to its limit, else the vector store's HNSW index."""
        self._client: Any = None
        """The Chroma client of a store on Chroma."""
        if vector_store_of(config) == "pgvector":
            from car_rag.channels.pgvector import PgVectorChannel

            if not self.log.shared:
                raise StoreError(f"store {path} names pgvector as its vector store, which only a store on PostgreSQL has")
            self._shared_log.use_vector_column(_vector_column(config))
            self.dense = PgVectorChannel(self._shared_log, ef_search=config["hnsw"]["ef_search"])
        elif self.log.shared and not config.get("chroma_url"):
            raise StoreError(f"store {self.log.location} has no Chroma server: the processes sharing it cannot share "
                             "an embedded vector database")
        elif self.log.shared and chroma_client is None:
            # Its vectors are in the log too: the store opens, and answers, while Chroma is down.
            self._client = _Deferred(self._connect_chroma)
            self.dense = DenseChannel(_Deferred(self._collection))
        else:
            self._client = chroma_client or self._connect_chroma()
            self.dense = DenseChannel(self._collection())
        self._load()

    def _collection(self) -> Any:
        """The store's Chroma collection (made on first use)."""
        return self._client.get_or_create_collection(
            self.config["collection"], embedding_function=None,
            configuration={"hnsw": self.config.get("hnsw", DEFAULT_HNSW)},
        )

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
    ) -> CARStore:
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
        within moments (:mod:`car_rag.feed`).

        ``vector_store="pgvector"`` keeps such a store's vectors in that same database instead of
        Chroma (a ``vector`` column under an HNSW index, written in the records' own transaction;
        ``hnsw`` as for Chroma, see ``DEFAULT_PGVECTOR_HNSW``). A store remembers its vector store
        (``"chroma"`` or ``"pgvector"``) and refuses the other.
        """
        path = Path(path)
        if embedder is not None and encoder is not None and embedder.encoder != encoder:
            raise ValueError(f"encoder={encoder!r} contradicts the embedder given ({embedder.encoder!r})")
        if vector_store not in (None, *VECTOR_STORES):
            raise ValueError(f"vector_store must be one of {', '.join(VECTOR_STORES)}, got {vector_store!r}")
        if vector_store == "pgvector" and (chroma_url is not None or authority_url is None):
            raise ValueError("vector_store='pgvector' keeps the vectors beside the records of a store on PostgreSQL: "
                             "pass authority_url (--authority-url), and no chroma_url")
        config_file = path / CONFIG_FILE
        wanted = load_policy(policy) if policy is not None else None
        shared: PostgresRecordLog | None = None
        if authority_url is not None:
            from car_rag.pg_log import DEFAULT_SCHEMA, PostgresRecordLog

            shared = PostgresRecordLog(authority_url, authority_schema or DEFAULT_SCHEMA)
            where = shared.location
            stored = shared.setup(None)
        elif authority_schema is not None:
            raise ValueError("authority_schema names a schema of the PostgreSQL store: pass authority_url too")
        else:
            where = str(path)
            stored = json.loads(config_file.read_text()) if config_file.is_file() else None
        if stored is None:
            if wanted is None:
                raise StoreError(f"no car-rag store at {where}: pass a policy to create one")
            embedder = embedder or Embedder(DEFAULT_MODEL, encoder=encoder)
            path.mkdir(parents=True, exist_ok=True)
            config = {
                "format_version": FORMAT_VERSION,
                "policy": json.loads(wanted.model_dump_json()),
                "embedding_model": embedder.model_name,
                "encoder": embedder.encoder,
                "vector_store": vector_store or "chroma",
                "bm25_backend": bm25_backend,
            }
            if vector_store == "pgvector":
                config["vector_dimension"] = embedder.dimension
                config["hnsw"] = {**DEFAULT_PGVECTOR_HNSW, **(hnsw or {})}
            else:
                config["collection"] = f"car-{uuid.uuid4().hex[:16]}"
                config["chroma_url"] = chroma_url
                config["hnsw"] = {**DEFAULT_HNSW, **(hnsw or {})}
            if shared is None:
                try:
                    store = cls(path, config, embedder=embedder, chroma_timeout_s=chroma_timeout_s)  # connect before pinning
                except Exception as exc:
                    raise StoreError(f"cannot create a store at {path}: {exc}") from exc
                config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False))
                log.info("created store %s (policy %r, vectors in %s)", path, wanted.name, _vectors_at(config))
                return store
            if not chroma_url and vector_store != "pgvector":
                raise StoreError(f"a store on PostgreSQL ({where}) keeps its vectors where every process reaches them: "
                                 "pass chroma_url (--chroma-url) of a Chroma server, or vector_store='pgvector' "
                                 "(--vector-store pgvector) to keep them in that database")
            pgvector = _vector_column(config) if vector_store == "pgvector" else None
            stored = shared.setup(config, vectors=pgvector)  # ours, or the one another process stored first
            assert stored is not None
            if stored is config:
                log.info("created store %s (policy %r, vectors in %s)", where, wanted.name, _vectors_at(config))
        config = stored
        if config.get("format_version") != FORMAT_VERSION:
            raise StoreError(f"{where}: unsupported store format {config.get('format_version')!r}")
        if wanted is not None and (built := Policy.model_validate(config["policy"])) != wanted:
            differ = _resolution_differences(built, wanted)
            if differ and (added := _added_rules(built, wanted)):
                return cls._adopt_added_rules(path, config, wanted, added, embedder, shared, follow)
            if differ:
                raise StoreError(
                    f"store {where} was built with policy {built.name!r}; the policy given ({wanted.name!r}) "
                    f"resolves differently (its {', '.join(differ)} differ): ingest into a new store"
                )
            # Only the words (states, descriptions, verbs) or the record_scope extractors
            # differ: neither changes an edge between stored records, so this process answers
            # in the caller's words and fills the scope of what it ingests with the caller's
            # extractors; the stored policy is left as built.
            config = {**config, "policy": json.loads(wanted.model_dump_json())}
        if vector_store is not None and vector_store != vector_store_of(config):
            raise StoreError(f"store {where} uses {_vectors_at(config)}, not {vector_store}: a store keeps the vector "
                             "store it was made with (ingest into a new store to change it)")
        if chroma_url is not None and chroma_url != config.get("chroma_url"):
            raise StoreError(f"store {where} uses {_vectors_at(config)}, not Chroma at {chroma_url}")
        if embedder is None and encoder is not None:
            embedder = Embedder(config["embedding_model"], encoder=encoder)
        if shared is not None:
            path.mkdir(parents=True, exist_ok=True)
        if shared is not None and chroma_timeout_s is None:
            chroma_timeout_s = SHARED_CHROMA_TIMEOUT_S
        store = cls(path, config, embedder=embedder, chroma_timeout_s=chroma_timeout_s, log=shared)
        log.info("opened store %s: %d records, policy %r", where, len(store), store.policy.name)
        if follow:
            store.follow()
        return store

    @classmethod
    def _adopt_added_rules(
        cls, path: Path, config: dict[str, Any], wanted: Policy, added: tuple[Rule, ...], embedder: Embedder | None,
        shared: PostgresRecordLog | None, follow: bool,
    ) -> CARStore:
        """Open a store under a policy that only adds rules (and the hierarchies they read: a
        built-in policy upgraded to multi-authority or exceptions): where no stored records
        are of the types an added rule pairs, or none has a level an added hierarchy reads,
        those rules make no edge among stored records, so the store takes the new policy for
        what it ingests next; otherwise it must be rebuilt."""
        store = cls(path, config, embedder=embedder, log=shared)
        new_levels = {name: h for name, h in wanted.hierarchies.items() if name not in store.policy.hierarchies}
        records = store.records.values()

        def pairs_stored(rule: Rule) -> bool:
            typed = all(t == "*" or any(r.doc_type == t for r in records) for t in (rule.trigger, rule.target))
            level = new_levels.get(rule.hierarchy or "")
            return typed and (level is None or level.default is not None or any(level.field in r.metadata for r in records))

        if blocking := sorted(r.name for r in added if pairs_stored(r)):
            store.close()
            raise StoreError(f"store {store.location} holds records with levels or types that the rules {blocking} of the "
                             f"policy {wanted.name!r} now pair: ingest into a new store")
        store.config = {**config, "policy": json.loads(wanted.model_dump_json())}
        store.policy = store.graph.policy = wanted
        if shared is not None:
            shared.replace_config(store.config)
        else:
            (path / CONFIG_FILE).write_text(json.dumps(store.config, indent=2, ensure_ascii=False))
        log.info("store %s: policy %r now adds rules %s", store.location, wanted.name, [r.name for r in added])
        if follow:
            store.follow()
        return store

    def _connect_chroma(self) -> Any:
        chromadb = require("chromadb", "store", "the store's vector index")
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        url = self.config.get("chroma_url")
        if url:
            parsed = urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise StoreError(f"chroma_url must look like http://host:port, got {url!r}")
            if self.chroma_timeout_s is not None:
                # chromadb's client asks the server who we are as it is made, with no timeout: a
                # server that accepts and never answers would hold this thread for ever
                import httpx

                httpx.get(f"{url.rstrip('/')}/api/v2/heartbeat", timeout=self.chroma_timeout_s).raise_for_status()
            client = chromadb.HttpClient(
                host=parsed.hostname, port=parsed.port or 8000, ssl=parsed.scheme == "https", settings=settings
            )
            if self.chroma_timeout_s is not None:
                _bound_http_calls(client, self.chroma_timeout_s)
            return client
        return chromadb.PersistentClient(path=str(self.path / "chroma"), settings=settings)

    @property
    def location(self) -> str:
        """What messages call this store: its folder, or its PostgreSQL database and schema."""
        return self.log.location if self.log.shared else str(self.path)

    def _load(self) -> None:
        try:
            state = self.log.load(vectors_up_to=self.dense.exact_limit)
        except StoredRecordError as exc:
            raise StoreError(str(exc)) from None
        records = state.records
        self.graph = AuthorityGraph(self.policy)
        self.graph.load_edges(records, state.edges, state.disputed)
        self.head = state.head
        self._unsaved = 0
        self._orphans: set[str] = set()
        ordered = [r.doc_id for r in records]
        self.lexical: LexicalIndex = make_lexical_index(self.config["bm25_backend"])
        if self.log.shared:
            # Vectors come from the log (the collection may lag behind it: the outbox), BM25 is
            # built afresh: no file of this process's can be behind another's commits.
            self.dense.hold(ordered, state.vectors)
            self.lexical.build(ordered, [r.text for r in records])
            return
        # Vectors are written before records, so ids in Chroma that the records table lacks
        # were cut off by a crash in between; re-ingesting one must clear its stale metadata.
        chroma = self._chroma
        vectors = chroma.collection.count()
        if vectors != len(records):
            self._orphans = set(chroma.ids()) - set(self.graph.records)
            if self._orphans:
                log.warning("%s: %d vectors have no stored record (an ingest was cut off); re-ingesting them clears them",
                            self.path, len(self._orphans))
        # exact search up to EXACT_SEARCH_LIMIT records: same ranking every build
        chroma.load(ordered, vectors, copy=self.path / DENSE_COPY, stamp=self._stamp())
        bm25_dir = self.path / "bm25"
        if (bm25_dir / "index.json").is_file():
            self.lexical = load_lexical_index(bm25_dir)
        indexed = len(self.lexical.doc_ids)
        if self.lexical.doc_ids == ordered:
            return
        if self.lexical.supports_add and self.lexical.doc_ids == ordered[:indexed]:
            tail = records[indexed:]  # ingested after the index was last saved
            self.lexical.add([r.doc_id for r in tail], [r.text for r in tail])
            self._unsaved = len(tail)
            log.debug("%s: BM25 index caught up with %d records ingested after it was saved", self.path, len(tail))
        else:
            log.info("%s: rebuilding the BM25 index over %d records", self.path, len(records))
            self.lexical.build(ordered, [r.text for r in records])
            self.flush()

    @property
    def _chroma(self) -> DenseChannel:
        """The dense channel of a store whose vectors are in Chroma (every store in a folder)."""
        assert isinstance(self.dense, DenseChannel)
        return self.dense

    @property
    def _outbox(self) -> bool:
        """Whether the vectors reach the vector store after the commit, from the shared log's
        outbox (a Chroma server; pgvector takes them in the commit)."""
        return self.log.shared and self._shared_log.outbox

    def close(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        with self.lock.write():
            if self._unsaved:
                self.flush()
            self.dense.close()
            self.log.close()

    def __enter__(self) -> CARStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.graph)

    def get(self, doc_id: str) -> Record:
        try:
            return self.graph.records[doc_id]
        except KeyError:
            raise KeyError(f"no record {doc_id!r} in store {self.path}") from None

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

        ``may_replace(stored, new)`` is asked, for each record that would replace a stored one,
        whether it may (None) or why not (the record is rejected with that reason, field
        ``doc_id``); it sees the store as the write sees it (in a shared store, after every other
        process's commit), so no other writer can take the doc_id between the check and the write.

        In a store shared through PostgreSQL each chunk is one transaction in this process's turn
        among the writers; its vectors reach the Chroma server after the commit (the outbox).
        """
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        started = time.perf_counter()
        label = str(source) if isinstance(source, (str, Path)) else "<records>"
        loaded: LoadReport = load_records(source) if isinstance(source, (str, Path)) else parse_records(source, label)
        report = IngestReport(errors=list(loaded.errors))
        report.timings_s["parse"] = time.perf_counter() - started
        tick = time.perf_counter()
        filled = self.extractor.fill(loaded.records, source=label, lines=loaded.lines)  # an LLM may be slow: no lock
        report.errors += filled.errors
        report.warnings, report.scope_filled = filled.warnings, filled.filled
        report.timings_s["scope"] = time.perf_counter() - tick
        with self.lock.read():  # another thread's ingest may be writing the records table
            fingerprints = self.log.fingerprints([r.doc_id for r in filled.records])
        valid: list[Record] = []
        changed: list[Record] = []
        for record in filled.records:
            problems = _scope_key_errors(record, label, loaded.lines.get(record.doc_id))
            if problems:
                report.errors.extend(problems)
                continue
            valid.append(record)
            if fingerprints.get(record.doc_id) == record.fingerprint():
                report.unchanged += 1
                continue
            changed.append(record)
        report.missing_scope = missing_scope(self.policy, valid)
        if strict and (report.missing_scope or report.warnings):
            report.strict_refused = True
            changed = []
        if atomic and report.errors:
            changed = []
        if changed:
            size = len(changed) if atomic else chunk_size
            quiet = not progress or len(changed) <= self.embedder.batch_size  # a bar only where embedding takes a while
            with tqdm(total=len(valid), initial=report.unchanged, desc="ingest", unit="rec", disable=quiet) as bar:
                if report.unchanged:
                    bar.set_postfix_str(f"{report.unchanged} already stored", refresh=False)
                for start in range(0, len(changed), size):
                    chunk = changed[start : start + size]
                    report.merge(self._ingest_chunk(chunk, embeddings, atomic, label, loaded.lines, may_replace))
                    bar.update(len(chunk))
        self._log_ingest(label, report)
        return report

    def _ingest_chunk(
        self,
        chunk: Sequence[Record],
        embeddings: Mapping[str, Sequence[float]] | None,
        atomic: bool,
        label: str,
        lines: Mapping[str, int],
        may_replace: Callable[[Record, Record], str | None] | None,
    ) -> IngestReport:
        """Embed one chunk, then add it to the graph and write it; what it changed."""
        part = IngestReport()
        vectors = self._vectors(chunk, embeddings, part)  # outside the lock: the slow part
        with self.log.transaction() as tx:  # a shared log: this process's turn among the writers
            others = tx.changes(self.head, vectors=self.dense.exact)  # what other processes committed before this turn
            with self.lock.write():
                self._apply(others)
                # Another thread or process may have ingested some of these since they were read.
                fingerprints = tx.fingerprints([r.doc_id for r in chunk])
                accepted: list[Record] = []
                replaced: list[Record | None] = []  # what each accepted record replaced in the graph
                try:
                    tick = time.perf_counter()
                    for record in chunk:
                        if fingerprints.get(record.doc_id) == record.fingerprint():
                            part.unchanged += 1
                            continue
                        previous = self.graph.records.get(record.doc_id)
                        refusal = None if previous is None or may_replace is None else may_replace(previous, record)
                        problem = None if refusal is None else ("doc_id", refusal)
                        if problem is None:
                            try:
                                part.new_edges.extend(self.graph.add(record))
                            except SupersessionCycleError as exc:
                                problem = ("supersedes", str(exc))
                        if problem is not None:
                            part.errors.append(RecordError(label, lines.get(record.doc_id), record.doc_id, *problem))
                            if atomic:
                                self._undo(accepted, replaced, part)
                                accepted, replaced = [], []
                                break
                            continue
                        accepted.append(record)
                        replaced.append(previous)
                        (part.updated if record.doc_id in fingerprints else part.added).append(record.doc_id)
                    part.timings_s["graph"] = time.perf_counter() - tick
                    if accepted:
                        keep = {r.doc_id for r in accepted}
                        rows = [i for i, r in enumerate(chunk) if r.doc_id in keep]
                        self._write(tx, accepted, vectors[rows], bool(part.updated), False, part)
                except BaseException:
                    if self.log.shared and not tx.committed:
                        # Nothing of this chunk is durable and the graph alone took it in: take it back
                        # out (re-reading the log needs the database, which may be what failed).
                        log.warning("%s: ingest of %s failed; nothing of its last chunk was stored (chunks "
                                    "committed before stay)", self.location, label)
                        self._undo(accepted, replaced, part)
                    else:
                        log.warning("%s: ingest of %s failed; re-reading the store (chunks committed before stay)",
                                    self.location, label)
                        self._load()  # the graph may be ahead of what was written: re-read the log
                    raise
        if self._outbox and accepted:
            self._drain_after_ingest([r.doc_id for r in accepted], part)
        return part

    def _undo(self, accepted: list[Record], replaced: list[Record | None], report: IngestReport) -> None:
        """Take an atomic batch's records back out of the graph, newest first, restoring what each
        replaced; nothing of the batch has been written yet."""
        for record, previous in zip(reversed(accepted), reversed(replaced)):
            self.graph.remove(record.doc_id)
            if previous is not None:
                self.graph.add(previous)
        report.added, report.updated, report.new_edges = [], [], []

    def _log_ingest(self, label: str, report: IngestReport) -> None:
        log.info("%s: ingested %s: %s; %d records held", self.location, label, report.summary(), len(self))
        if report.new_edges:  # counts only: a log line is read by people who may not read every record
            log.debug("%s: %d new supersession edges; %d records newly superseded", self.location, len(report.new_edges),
                      len(report.newly_superseded))
        log.debug("%s: ingest timings (s): %s", self.location, ", ".join(f"{k} {v:.3f}" for k, v in report.timings_s.items()))

    def _vectors(
        self, records: Sequence[Record], given: Mapping[str, Sequence[float]] | None, report: IngestReport
    ) -> np.ndarray:
        tick = time.perf_counter()
        given = given or {}
        todo = [r for r in records if r.doc_id not in given]
        encoded = iter(self.embedder.encode([r.text for r in todo])) if todo else iter(())
        rows = [np.asarray(given[r.doc_id], dtype=np.float32) if r.doc_id in given else next(encoded) for r in records]
        vectors = np.vstack(rows).astype(np.float32, copy=False)
        if given and vectors.shape[1] != self.embedder.dimension:
            raise StoreError(
                f"embeddings have {vectors.shape[1]} dimensions; "
                f"{self.embedder.model_name} vectors have {self.embedder.dimension}"
            )
        report.timings_s["embed"] = time.perf_counter() - tick
        return vectors

    def _write(
        self, tx: LogWriter, records: Sequence[Record], vectors: np.ndarray, replaces: bool, progress: bool,
        report: IngestReport,
    ) -> None:
        """Make ``records`` (already in the graph) durable, then searchable. Into a log one process
        owns, vectors go first (a crash before the records' commit leaves orphan vectors, healed by
        re-ingesting); into a shared log, the records' vectors commit with them and a Chroma server
        is handed them after the commit (:meth:`drain_outbox`); pgvector searches them as committed."""
        timings = report.timings_s
        texts = [r.text for r in records]
        ids = [r.doc_id for r in records]
        if not self.log.shared:
            tick = time.perf_counter()
            self._chroma.upsert(
                ids, vectors, texts, [chroma_metadata(r) for r in records], self._client.get_max_batch_size(),
                progress=progress, stored=set(report.updated) | (self._orphans & set(ids)),
            )
            self._orphans.difference_update(ids)
            timings["chroma"] = time.perf_counter() - tick
        tick = time.perf_counter()
        graph = self.graph
        edges = {(e.superseder, e.target): e for d in ids for e in graph.superseders(d) + graph.superseded_by(d)}
        # A disputed pair's two claims: over each record, and its own over the other.
        claims = [
            c for d in ids for e in graph.disputes(d)
            for c in (e, *graph.disputes(e.superseder)) if d in (c.superseder, c.target)
        ]
        disputed = {(c.superseder, c.target): c for c in claims}
        head = tx.write(records, edges.values(), disputed.values(), vectors if self.log.keeps_vectors else None)
        tx.commit()
        self.head = max(self.head, head)
        timings["records"] = time.perf_counter() - tick
        tick = time.perf_counter()
        if self.log.shared:
            self.dense.put(ids, vectors)
        if self.lexical.supports_add and not replaces:
            self.lexical.add(ids, texts)
            self._unsaved += len(ids)
            if self._unsaved * 10 >= len(self.lexical.doc_ids):  # saving costs O(N): amortize it
                self.flush()
        else:
            self._rebuild_lexical()
        timings["bm25"] = time.perf_counter() - tick

    # ------------------------------------------------------------------ a shared log
    def _apply(self, changes: Sequence[Change]) -> list[Change]:
        """Other processes' commits to a shared log, oldest first, taken into the graph, BM25 and
        exact search as their writers took them (the same records make the same edges); returns
        those not applied before. Caller holds the write lock."""
        fresh = [c for c in changes if c.number > self.head]
        if not fresh:
            return []
        replaces = False
        for change in fresh:
            replaces = replaces or change.record.doc_id in self.graph.records
            try:
                self.graph.add(change.record)
            except SupersessionCycleError:
                log.error("%s: change %d closes a cycle in this process's graph, which its writer's did not: "
                          "re-reading the store", self.location, change.number)
                self._load()
                return fresh
        ids = [c.record.doc_id for c in fresh]
        vectors = {c.record.doc_id: c.vector for c in fresh if c.vector is not None}
        if vectors:
            self.dense.put(list(vectors), np.vstack(list(vectors.values())))
        if self.lexical.supports_add and not replaces:
            self.lexical.add(ids, [c.record.text for c in fresh])
        else:
            self._rebuild_lexical()
        self.head = fresh[-1].number
        return fresh

    def catch_up(self) -> list[Change]:
        """Apply what other processes committed to this store's shared log since this process
        last looked (:mod:`car_rag.feed` calls it when a commit is signalled, and on a timer);
        returns the changes applied. A store on a log of its own has nothing to catch up."""
        if not self.log.shared:
            return []
        changes = self._shared_log.changes(self.head, vectors=self.dense.exact)
        if not changes:
            return []
        with self.lock.write():
            applied = self._apply(changes)
        if applied:
            log.debug("%s: applied %d changes up to %d", self.location, len(applied), self.head)
        return applied

    def drain_outbox(self, doc_ids: Sequence[str] | None = None, *, batch: int = 500, min_age_s: float = 0.0) -> int:
        """Hand the vector store every vector the shared log holds that it has not taken (the
        outbox: written after each commit, retried from here when the vector store failed);
        processes draining at once take different records. ``doc_ids``: only those (a writer's
        own records: it waits for another process handing them over, so that when it returns
        they are in the vector store); ``min_age_s``: only records written at least that long
        ago (the change feed's retries leave the fresh ones to their writer). Returns how many
        this call handed over (none where the vector store took them in the commit: a log of one
        process's own, or pgvector)."""
        if not self._outbox:
            return 0
        if doc_ids is not None:
            return sum(self._hand_over(self._shared_log.pending(batch, doc_ids[i : i + batch]))
                       for i in range(0, len(doc_ids), batch))
        done = 0
        while handed := self._hand_over(self._shared_log.pending(batch, min_age_s=min_age_s)):
            done += handed
        return done

    def _hand_over(self, pending: Outbox) -> int:
        """Upsert an outbox's vectors into the vector store; they stop being pending when it ends."""
        with pending as outbox:
            if outbox.rows:
                records = [r for _, _, r, _ in outbox.rows]
                self._chroma.upsert(
                    [r.doc_id for r in records], np.vstack([v for *_, v in outbox.rows]), [r.text for r in records],
                    [chroma_metadata(r) for r in records], self._client.get_max_batch_size(), exact=False,
                )
                outbox.done([(doc_id, change) for doc_id, change, _, _ in outbox.rows])
            return len(outbox.rows)

    def _drain_after_ingest(self, doc_ids: list[str], report: IngestReport) -> None:
        """The vectors of what was just committed, to the vector store; a failure leaves them in
        the outbox (the records are stored: their vectors follow when the vector store answers)."""
        tick = time.perf_counter()
        try:
            self.drain_outbox(doc_ids)
        except Exception as exc:
            waiting = self._shared_log.count_pending()
            report.warnings.append(f"{waiting} vectors wait in the outbox: the vector store failed "
                                   f"({type(exc).__name__}); they are written when it answers")
            log.warning("%s: vector store failed (%s: %s); %d vectors wait in the outbox", self.location,
                        type(exc).__name__, exc, waiting)
        report.timings_s["chroma"] = time.perf_counter() - tick

    @property
    def _shared_log(self) -> PostgresRecordLog:
        from car_rag.pg_log import PostgresRecordLog

        assert isinstance(self.log, PostgresRecordLog)
        return self.log

    def follow(self, *, poll_s: float = 1.0) -> None:
        """Keep this process up with a shared log: apply other processes' commits as they are
        signalled (and every ``poll_s`` regardless), and drain the vector outbox (a thread;
        stopped by :meth:`close`). Nothing to do for a store on a log of its own."""
        if self.log.shared and self.feed is None:
            from car_rag.feed import ChangeFeed

            self.feed = ChangeFeed(self, self._shared_log, poll_s=poll_s)
            self.feed.start()

    def flush(self) -> None:
        """Save the BM25 index and the exact-search vectors. Records are durable as soon as
        ingested; an index saved behind them is caught up from the records table when the
        store is opened, and vectors saved behind them are read from Chroma instead. (A store
        on a shared log keeps no such files: it builds both from the log when opened.)"""
        if self.log.shared:
            self._unsaved = 0
            return
        self.lexical.save(self.path / "bm25")
        self._chroma.save(self.path / DENSE_COPY, self._stamp())
        self._unsaved = 0

    def _stamp(self) -> str:
        """What the vectors encode: every record's id and fingerprint, in ingest order, and the encoder."""
        digest = hashlib.sha256(f"{self.embedder.model_name}\t{self.embedder.encoder}\n".encode())
        for doc_id, fingerprint in self.log.ordered():
            digest.update(f"{doc_id}\t{fingerprint}\n".encode())
        return digest.hexdigest()

    def _ordered_ids(self) -> list[str]:
        return [d for d, _ in self.log.ordered()]

    def _rebuild_lexical(self) -> None:
        # In ingest order; a shared log may already hold records other processes committed since
        # this one last applied changes: they join when they are applied.
        ordered = [d for d in self._ordered_ids() if d in self.graph.records]
        index = make_lexical_index(self.config["bm25_backend"])
        index.build(ordered, [self.graph.records[d].text for d in ordered])
        self.lexical = index
        self.flush()


class _Deferred:
    """An object made on first use, and made again at the next use for as long as making it
    fails (a Chroma client and collection: connecting to a server that is down raises)."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._made is None:
            self._made = self._make()
        return getattr(self._made, name)


def _added_rules(built: Policy, wanted: Policy) -> tuple[Rule, ...]:
    """The rules (with exception revocations) ``wanted`` adds to ``built``, where it changes
    nothing else that decides edges beyond the hierarchies they read; empty otherwise."""
    names = {r.name for r in built.rules}
    narrowed = wanted.model_copy(update={"rules": tuple(r for r in wanted.rules if r.name in names),
                                         "hierarchies": built.hierarchies})
    kept = all(wanted.hierarchies.get(name) == h for name, h in built.hierarchies.items())
    if not kept or _resolution_differences(built, narrowed):
        return ()
    return tuple(r for r in wanted.edge_rules if r.name not in {b.name for b in built.edge_rules})


def _bound_http_calls(client: Any, seconds: float) -> None:
    """Give a Chroma HTTP client's calls a timeout. chromadb (1.5) builds its httpx session with
    ``timeout=None`` and offers no setting, so a server that accepts and never answers would hang
    a query or an insert for ever, holding the store's lock; the session is reached through the
    client's private ``_server``, and a chromadb without it is named in a warning."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):
        log.warning("cannot bound Chroma's HTTP calls to %s s: this chromadb keeps its HTTP session elsewhere", seconds)
        return
    session.timeout = httpx.Timeout(seconds)


def _resolution_differences(built: Policy, wanted: Policy) -> list[str]:
    """The fields of two policies that decide edges and scopes and differ (empty: only words or
    ``record_scope`` differ; extractors decide the scope of records ingested next, not an edge
    between stored ones, whose scope is stored with them)."""
    words = {"description", "verb"}
    rules = [r.model_dump(exclude=words) for r in built.rules], [r.model_dump(exclude=words) for r in wanted.rules]
    fields = ("name", "scope_keys", "scope_patterns", "case_insensitive_keys", "hierarchies")
    return [f for f in fields if getattr(built, f) != getattr(wanted, f)] + (["rules"] if rules[0] != rules[1] else [])
