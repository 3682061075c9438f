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
from tests.corpus import ANCHOR, CHAIN_QUERY, QUERY, SUPERSEDER, doc_id
from tests.integration_tests import stores

POLICY = load_policy("security-advisory")


@pytest.fixture(scope="module")
def memory_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(embedding=stores.embeddings())
    docs = stores.corpus_docs()
    store.add_documents(docs, ids=[doc_id(d) for d in docs])
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
    docs = CARRetriever(
        base_retriever=memory_store.as_retriever(search_kwargs={"k": 3}), store=memory_store, policy=POLICY, k=10
    ).invoke(CHAIN_QUERY)
    assert docs[0].id == "zipcraft-2.3.4-release"
    assert {d.id: d.metadata for d in docs}["zipcraft-2.3.1-release"]["car_status"] == "superseded"


def test_bm25_stage1_is_invoked_not_read(memory_store) -> None:
    bm25 = BM25Retriever.from_documents(stores.corpus_docs(), k=3)
    handler = _Starts()
    docs = CARRetriever(base_retriever=bm25, store=memory_store, policy=POLICY).invoke(QUERY, config={"callbacks": [handler]})
    assert docs[0].id == SUPERSEDER
    assert handler.names == ["CARRetriever", "BM25Retriever"]


def test_an_ambiguous_question_carries_its_ambiguity_where_stage1_gives_scores() -> None:
    from car_rag import Record
    from langchain_core.runnables import RunnableLambda

    from langchain_car import record_to_document

    attack = "Prototype pollution in the merge helper lets a remote attacker alter object prototypes."
    records = [
        Record(doc_id=f"{pkg}-d", text=attack, doc_type="vulnerability_disclosure", scope={"package": pkg, "cve_id": cve})
        for pkg, cve in (("alpha-utils", "CVE-2034-0001"), ("beta-utils", "CVE-2034-0002"))
    ]
    records.append(
        Record(
            doc_id="alpha-utils-p",
            text="Release 3.1.0: maintenance.",
            doc_type="patch_release",
            scope={"package": "alpha-utils", "cve_id": "CVE-2034-0001"},
        )
    )
    store = InMemoryVectorStore(embedding=stores.embeddings())
    docs = [record_to_document(r) for r in records]
    store.add_documents(docs, ids=[doc_id(d) for d in docs])

    def scored(query: str) -> list:
        hits = store.similarity_search_with_score(query, k=2)  # cosine similarity
        return [d.model_copy(update={"metadata": {**d.metadata, "score": s}}) for d, s in hits]

    retriever = CARRetriever(base_retriever=RunnableLambda(scored), store=store, policy=POLICY, stage1_channel="dense")
    by_id = {d.id: d.metadata for d in retriever.invoke("Has the prototype pollution in merge been fixed?")}
    ambiguity = by_id["alpha-utils-p"]["car_ambiguity"]
    assert ambiguity["scopes"] == 2 and ambiguity["states"] == {"patched": 1, "vulnerable": 1}
    assert by_id["beta-utils-d"]["car_scope_probability"] == pytest.approx(0.5, abs=0.01)
    named = {d.id: d.metadata for d in retriever.invoke("Has the prototype pollution in alpha-utils been fixed?")}
    assert named["alpha-utils-p"]["car_ambiguity"] is None
    assert named["alpha-utils-p"]["car_scope_probability"] == pytest.approx(1.0)
    # A retriever that gives ranks only: nothing is estimated, so nothing is claimed.
    plain = CARRetriever(base_retriever=store.as_retriever(search_kwargs={"k": 2}), store=store, policy=POLICY)
    ranks_only = {d.id: d.metadata for d in plain.invoke("Has the prototype pollution in merge been fixed?")}
    assert {m["car_ambiguity"] for m in ranks_only.values()} == {None}
    assert {m["car_scope_probability"] for m in ranks_only.values()} == {None}
