"""Real stores for the integration tests, built once per process: MiniLM (the packaged copy,
offline) behind ``CAREmbeddings``, embedded Chroma through ``langchain_chroma.Chroma``."""

from __future__ import annotations

import uuid
from functools import cache
from pathlib import Path

import car_rag
import chromadb
from car_rag import Policy, load_policy
from car_rag.store import DEFAULT_HNSW
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.documents import Document

from langchain_car import CAREmbeddings, load_documents, record_to_document
from tests.corpus import records

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"


@cache
def embeddings() -> CAREmbeddings:
    return CAREmbeddings()


@cache
def client() -> chromadb.ClientAPI:
    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))


def new_chroma(docs: list[Document], client_: chromadb.ClientAPI | None = None, prefix: str = "t") -> Chroma:
    """A fresh collection (unique name: in-process Chroma clients share their collections)
    with car-rag's HNSW settings, so dense search ranks as car-rag's own dense channel."""
    store = Chroma(
        collection_name=f"{prefix}-{uuid.uuid4().hex[:12]}",
        embedding_function=embeddings(),
        client=client_ or client(),
        collection_configuration={"hnsw": {**DEFAULT_HNSW}},
    )
    store.add_documents(docs, ids=[d.id for d in docs])
    return store


def corpus_docs() -> list[Document]:
    return [record_to_document(r) for r in records()]


@cache
def corpus_chroma() -> Chroma:
    return new_chroma(corpus_docs(), prefix="corpus")


def demo_policy() -> Policy:
    return load_policy(DEMO / "policy.toml")


def demo_docs() -> list[Document]:
    return load_documents(DEMO / "corpus.jsonl")


@cache
def demo_chroma() -> Chroma:
    return new_chroma(demo_docs(), prefix="demo")
