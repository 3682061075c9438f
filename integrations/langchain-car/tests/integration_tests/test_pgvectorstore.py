"""car-rag on ``langchain_postgres.PGVectorStore`` (the successor of ``PGVector``): a real PostgreSQL +
pgvector (the ``pg_database`` fixture), metadata in the store's JSON column, real MiniLM. Stage 2
goes through the store's public ``get(where=...)``; the answers equal those over the same documents
held in memory."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from car_rag import load_policy
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_postgres import Column, PGEngine, PGVectorStore

from langchain_car import CARRetriever, PGVectorStoreLookup, record_to_document
from langchain_car.lookup import DocumentListLookup, as_lookup
from tests.corpus import ANCHOR, CHAIN_QUERY, QUERY, SUPERSEDER, records
from tests.integration_tests import stores

POLICY = load_policy("security-advisory")


def new_pgvectorstore(uri: str, docs: list[Document]) -> PGVectorStore:
    engine = PGEngine.from_connection_string(url=uri)
    table = f"car_{uuid.uuid4().hex[:12]}"
    engine.init_vectorstore_table(table_name=table, vector_size=384, id_column=Column("langchain_id", "TEXT"))
    store = PGVectorStore.create_sync(engine=engine, table_name=table, embedding_service=stores.embeddings())
    store.add_documents(docs, ids=[str(d.id) for d in docs])
    return store


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    # an id with LIKE's wildcards, named by a record's explicit edge: the widened filter must not over-match
    odd = records()[0].model_copy(update={"doc_id": "odd_id%1", "supersedes": []})
    naming = records()[1].model_copy(update={"doc_id": "names-odd", "supersedes": ["odd_id%1"]})
    lookalike = records()[2].model_copy(update={"doc_id": "names-lookalike", "supersedes": ["oddAidBB1"]})
    return [*stores.corpus_docs(), *(record_to_document(r) for r in (odd, naming, lookalike))]


@pytest.fixture(scope="module")
def pgvs(pg_database, docs) -> PGVectorStore:
    return new_pgvectorstore(pg_database(), docs)


def test_the_store_is_looked_up_through_its_public_filter_api(pgvs) -> None:
    assert isinstance(as_lookup(pgvs), PGVectorStoreLookup)


def test_lookups_equal_those_over_the_documents_in_memory(pgvs, docs) -> None:
    lookup, memory = PGVectorStoreLookup(pgvs), DocumentListLookup(docs)
    named = sorted({t for d in docs for t in d.metadata.get("supersedes", [])})
    filters: list[dict[str, Any]] = [{"supersedes": {"$contains": t}} for t in [*named, "oddXidY1", "odd"]]
    filters += [{"$and": [{"package": d.metadata["package"]}, {"doc_type": {"$in": ["patch_release"]}}]} for d in docs[:6]]
    filters.append({"$or": [{"cve_id": docs[0].metadata["cve_id"]}, {"supersedes": {"$contains": ANCHOR}}]})
    for where in filters:
        assert sorted(str(d.id) for d in lookup.get(where)) == sorted(str(d.id) for d in memory.get(where)), where
    # the SQL pattern %"odd_id%1"% also matches "oddAidBB1": the rows are checked against the filter itself
    assert [d.id for d in lookup.get({"supersedes": {"$contains": "odd_id%1"}})] == ["names-odd"]
    assert lookup.get({"supersedes": {"$contains": "oddXidY1"}}) == []
    got = asyncio.run(lookup.aget({"supersedes": {"$contains": "odd_id%1"}}))
    assert [d.id for d in got] == ["names-odd"]


@pytest.mark.parametrize("query", [QUERY, CHAIN_QUERY])
def test_a_wrapped_retriever_resolves_on_pgvectorstore_as_in_memory(pgvs, docs, query) -> None:
    bm25 = BM25Retriever.from_documents(docs, k=3)
    on_pg = CARRetriever(base_retriever=bm25, store=pgvs, policy=POLICY, k=10)
    in_memory = CARRetriever(base_retriever=bm25, store=docs, policy=POLICY, k=10)
    ranked = [(d.id, d.metadata["car_status"]) for d in on_pg.invoke(query)]
    assert ranked == [(d.id, d.metadata["car_status"]) for d in in_memory.invoke(query)]
    assert ranked == [(d.id, d.metadata["car_status"]) for d in asyncio.run(on_pg.ainvoke(query))]


def test_the_core_stage1_runs_on_pgvectorstore(pgvs, docs) -> None:
    memory = InMemoryVectorStore(stores.embeddings())
    memory.add_documents(docs, ids=[str(d.id) for d in docs])
    on_pg = CARRetriever.from_vector_store(pgvs, "security-advisory", k=8)
    in_memory = CARRetriever.from_vector_store(memory, "security-advisory", k=8)
    for query in (QUERY, CHAIN_QUERY):
        got = {d.metadata["doc_id"]: d.metadata["car_status"] for d in on_pg.invoke(query)}
        assert got == {d.metadata["doc_id"]: d.metadata["car_status"] for d in in_memory.invoke(query)}, query
    statuses = {d.metadata["doc_id"]: d.metadata["car_status"] for d in on_pg.invoke(QUERY)}
    assert statuses[SUPERSEDER] == "active" and statuses[ANCHOR] == "superseded"
