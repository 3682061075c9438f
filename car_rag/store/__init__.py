"""The persistent store behind one corpus: records, authority graph, BM25 index, vectors.

A store is a directory::

    car-store.json    configuration: policy, embedding model and encoder, vector store (Chroma location), BM25 backend
    records.sqlite    records (in ingest order) and supersession edges
    bm25/             the lexical index
    dense-exact.npz   a copy of the vectors for exact search (up to 20k records), checked against the records
    chroma/           the embedded Chroma database (absent when a Chroma server is used)
    scope-cache/      the LLM scope extractor's answers (only when the policy names one)

or, shared by several processes, a schema in PostgreSQL (:mod:`car_rag.postgres`) with a folder of
each process's own for its caches.

Scope keys are written as Chroma metadata on every record, so the vector store itself can
answer Stage-2 lookups (``get(where={"cve_id": ...})``); the framework integrations rely on
that. Ingest is idempotent by ``doc_id``: an unchanged record is skipped, a changed one
replaces the old, and a rejected one leaves everything already stored untouched.

The rooms: :mod:`~car_rag.store.car_store` (:class:`CARStore`, the face), :mod:`~car_rag.store.config`
(the configuration and what opening checks), :mod:`~car_rag.store.ingest`, :mod:`~car_rag.store.chroma`,
:mod:`~car_rag.store.indexes` (what one process holds in memory), :mod:`~car_rag.store.replica`
(following a shared log), :mod:`~car_rag.store.locking`, :mod:`~car_rag.store.sqlite_log`,
:mod:`~car_rag.store.distributed` (an ingest's embedding on Ray, ``car-rag[ray]``). All of them log
under ``car_rag.store``.
"""

from car_rag.store.car_store import CARStore
from car_rag.store.chroma import RESERVED_METADATA, SHARED_CHROMA_TIMEOUT_S, chroma_metadata
from car_rag.store.config import (
    CONFIG_FILE,
    DEFAULT_HNSW,
    DEFAULT_PGVECTOR_HNSW,
    FORMAT_VERSION,
    VECTOR_STORES,
    StoreError,
    built_encoder,
    vector_store_of,
)
from car_rag.store.indexes import DENSE_COPY
from car_rag.store.ingest import DEFAULT_CHUNK, IngestReport

__all__ = [
    "CARStore",
    "IngestReport",
    "StoreError",
    "RESERVED_METADATA",
    "chroma_metadata",
    "CONFIG_FILE",
    "DEFAULT_CHUNK",
    "DEFAULT_HNSW",
    "DEFAULT_PGVECTOR_HNSW",
    "DENSE_COPY",
    "FORMAT_VERSION",
    "SHARED_CHROMA_TIMEOUT_S",
    "VECTOR_STORES",
    "built_encoder",
    "vector_store_of",
]
