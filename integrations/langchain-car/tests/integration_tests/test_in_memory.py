"""CARRetriever on langchain-core's ``InMemoryVectorStore`` (a second real store beside Chroma)
with the real MiniLM: the store is Stage 1 (through its own retriever) and Stage 2."""

from __future__ import annotations

from typing import Any

import pytest
from car_rag import load_policy
from langchain_community.retrievers import BM25Retriever
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_car import CARRetriever
from tests.corpus import ANCHOR, CHAIN_QUERY, QUERY, SUPERSEDER
from tests.integration_tests import stores

POLICY = load_policy("security-advisory")


@pytest.fixture(scope="module")
def memory_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(embedding=stores.embeddings())
    docs = stores.corpus_docs()
    store.add_documents(docs, ids=[d.id for d in docs])
    return store


class _Starts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.names.append(kwargs.get("name") or "")


def test_in_memory_vector_store_as_stage1_and_stage2(memory_store) -> None:
    stage1 = memory_store.as_retriever(search_kwargs={"k": 3})
    assert SUPERSEDER not in [d.id for d in stage1.invoke(QUERY)]
    handler = _Starts()
    docs = CARRetriever(base_retriever=stage1, store=memory_store, policy=POLICY).invoke(QUERY, config={"callbacks": [handler]})
    by_id = {d.id: d.metadata for d in docs}
    assert docs[0].id == SUPERSEDER and by_id[ANCHOR]["car_status"] == "superseded"
    assert handler.names == ["CARRetriever", "VectorStoreRetriever"]


def test_in_memory_explicit_chain(memory_store) -> None:
    docs = CARRetriever(base_retriever=memory_store.as_retriever(search_kwargs={"k": 3}), store=memory_store, policy=POLICY, k=10).invoke(CHAIN_QUERY)
    assert docs[0].id == "zipcraft-2.3.4-release"
    assert {d.id: d.metadata for d in docs}["zipcraft-2.3.1-release"]["car_status"] == "superseded"


def test_bm25_stage1_is_invoked_not_read(memory_store) -> None:
    bm25 = BM25Retriever.from_documents(stores.corpus_docs(), k=3)
    handler = _Starts()
    docs = CARRetriever(base_retriever=bm25, store=memory_store, policy=POLICY).invoke(QUERY, config={"callbacks": [handler]})
    assert docs[0].id == SUPERSEDER
    assert handler.names == ["CARRetriever", "BM25Retriever"]
