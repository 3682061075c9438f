"""CARRetriever on ``langchain_postgres.PGVector``: a real PostgreSQL + pgvector (started by
the ``pg_database`` fixture), metadata in its JSONB column, the real MiniLM. Stage 2 is a
filter-only SELECT in PGVector's filter syntax; on the packaged demo corpus it gives the
core's records and statuses given the same anchors."""

from __future__ import annotations

import json
import uuid
import warnings

import pytest
from car_rag import CARStore, ControllingAuthorityRetriever, Embedder, Record, load_policy
from car_rag.channels.rank_bm25_index import tokenize as rank_bm25_tokens
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document
from langchain_postgres import PGVector

from langchain_car import CARRetriever, PGVectorLookup, record_to_document
from langchain_car.lookup import WhereStore, as_lookup
from tests.corpus import ANCHOR, CHAIN_QUERY, QUERY, SUPERSEDER, doc_id
from tests.integration_tests import stores

POLICY = load_policy("security-advisory")


def new_pgvector(uri: str, docs: list[Document], prefix: str) -> PGVector:
    store = PGVector(
        embeddings=stores.embeddings(), collection_name=f"{prefix}-{uuid.uuid4().hex[:12]}", connection=uri, use_jsonb=True
    )
    store.add_documents(docs, ids=[d.id for d in docs])
    return store


@pytest.fixture(scope="module")
def corpus_uri(pg_database) -> str:
    return pg_database()


@pytest.fixture(scope="module")
def corpus_pg(corpus_uri) -> PGVector:
    return new_pgvector(corpus_uri, stores.corpus_docs(), "corpus")


@pytest.fixture(scope="module")
def demo_pg(pg_database) -> PGVector:
    return new_pgvector(pg_database(), stores.demo_docs(), "demo")


@pytest.fixture(scope="module")
def core_store(tmp_path_factory):
    embedder: Embedder = stores.embeddings().embedder
    store = CARStore.open(tmp_path_factory.mktemp("core"), stores.demo_policy(), embedder=embedder, bm25_backend="rank-bm25")
    assert store.ingest(stores.DEMO / "corpus.jsonl", progress=False).errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    return [json.loads(line) for line in (stores.DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]


def test_pgvector_is_looked_up_in_its_own_filter_syntax(corpus_pg) -> None:
    lookup = as_lookup(corpus_pg)
    assert isinstance(lookup, PGVectorLookup)
    where = {
        "$or": [
            {"$and": [{"package": "lodash"}, {"doc_type": {"$in": ["patch_release", "x"]}}]},
            {"supersedes": {"$contains": "zipcraft-2.3.1-release"}},
        ]
    }
    assert lookup.pg_filter(where) == {
        "$or": [
            {"$and": [{"package": {"$eq": "lodash"}}, {"doc_type": {"$in": ["patch_release", "x"]}}]},
            {"supersedes": {"$eq": "zipcraft-2.3.1-release"}},
        ]
    }
    assert sorted(doc_id(d) for d in lookup.get(where)) == [SUPERSEDER, "zipcraft-2.3.4-release"]


def test_pgvector_as_stage1_and_stage2(corpus_pg) -> None:
    stage1 = corpus_pg.as_retriever(search_kwargs={"k": 3})
    assert SUPERSEDER not in [d.metadata["doc_id"] for d in stage1.invoke(QUERY)]
    docs = CARRetriever(base_retriever=stage1, store=corpus_pg, policy=POLICY).invoke(QUERY)
    by_id = {d.id: d.metadata for d in docs}
    assert docs[0].id == SUPERSEDER and by_id[ANCHOR]["car_status"] == "superseded"
    chain = CARRetriever(base_retriever=stage1, store=corpus_pg, policy=POLICY, k=10).invoke(CHAIN_QUERY)
    assert chain[0].id == "zipcraft-2.3.4-release"
    assert {d.id: d.metadata for d in chain}["zipcraft-2.3.1-release"]["car_status"] == "superseded"


async def test_pgvector_async_path(corpus_pg, corpus_uri) -> None:
    # PGVector answers async calls only in async_mode (its own async engine): the same collection, opened so.
    store = PGVector(
        embeddings=stores.embeddings(),
        collection_name=corpus_pg.collection_name,
        connection=corpus_uri,
        use_jsonb=True,
        async_mode=True,
    )
    docs = await CARRetriever(base_retriever=store.as_retriever(search_kwargs={"k": 3}), store=store, policy=POLICY).ainvoke(
        QUERY
    )
    assert docs[0].id == SUPERSEDER and {d.id: d.metadata for d in docs}[ANCHOR]["car_status"] == "superseded"
    with pytest.raises(RuntimeError, match="async_mode"):
        CARRetriever(base_retriever=BM25Retriever.from_documents(stores.corpus_docs(), k=3), store=store, policy=POLICY).invoke(
            QUERY
        )


def test_explicit_edge_from_another_scope_is_found_on_jsonb_lists(pg_database) -> None:
    bulletin = Record.model_validate(
        dict(
            doc_id="vendor-bulletin",
            text="Vendor bulletin 12.",
            doc_type="vendor_bulletin",
            scope={"package": "elsewhere"},
            published_at="2030-01-01",
            supersedes=[ANCHOR],
        )
    )
    store = new_pgvector(pg_database(), [*stores.corpus_docs(), record_to_document(bulletin)], "edge")
    anchor = [d for d in stores.corpus_docs() if d.id == ANCHOR]
    result = CARRetriever(base_retriever=BM25Retriever.from_documents(anchor, k=1), store=store, policy=POLICY, k=10).retrieve(
        QUERY
    )
    by_id = {r.doc_id: r for r in result.ranked}
    assert by_id[ANCHOR].status == "superseded" and "vendor-bulletin" in by_id[ANCHOR].superseded_by


def test_same_records_and_statuses_as_the_core_given_the_same_anchors(demo_pg, core_store, queries) -> None:
    """BM25 Stage 1 (the core's tokenizer): the same anchors by construction; Stage 2 on PGVector."""
    policy = stores.demo_policy()
    bm25 = BM25Retriever.from_documents(stores.demo_docs(), k=5, preprocess_func=rank_bm25_tokens)
    wrapped = CARRetriever(base_retriever=bm25, store=demo_pg, policy=policy, k=5)
    core = ControllingAuthorityRetriever(core_store, anchors="bm25", k1=5, fusion="rrf", latent_scope=False)
    for q in queries:
        expected = core.retrieve(q["query"])
        assert [h.doc_id for h in wrapped.retrieve(q["query"]).anchors] == [h.doc_id for h in expected.anchors]
        docs = wrapped.invoke(q["query"])
        assert [d.id for d in docs] == expected.doc_ids(5), q["query_id"]
        assert [d.metadata["car_status"] for d in docs] == [r.status for r in expected.top(5)], q["query_id"]


def test_dense_stage1_on_pgvector_gives_the_core_records(demo_pg, core_store, queries) -> None:
    """PGVector's exact (unindexed) cosine search vs the core's exact dense channel."""
    wrapped = CARRetriever(
        base_retriever=demo_pg.as_retriever(search_kwargs={"k": 10}), store=demo_pg, policy=stores.demo_policy(), k=5
    )
    core = ControllingAuthorityRetriever(core_store, anchors="dense", k1=10, fusion="rrf", latent_scope=False)
    for q in queries:
        expected = core.retrieve(q["query"])
        assert [h.doc_id for h in wrapped.retrieve(q["query"]).anchors] == [h.doc_id for h in expected.anchors], q["query_id"]
        docs = wrapped.invoke(q["query"])
        assert [d.id for d in docs] == expected.doc_ids(5), q["query_id"]
        assert [d.metadata["car_status"] for d in docs] == [r.status for r in expected.top(5)], q["query_id"]


def test_a_table_without_car_rag_keys_is_passed_through_unresolved(pg_database) -> None:
    """Plain documents (no doc_id / doc_type / car_layout): never a status car-rag did not decide."""
    plain = [
        Document(id=f"plain-{i}", page_content=text, metadata={"source": "wiki", "package": "lodash"})
        for i, text in enumerate(["lodash merge prototype pollution", "lodash release notes", "unrelated text"])
    ]
    store = new_pgvector(pg_database(), plain, "plain")
    docs = CARRetriever(base_retriever=store.as_retriever(search_kwargs={"k": 3}), store=store, policy=POLICY).invoke(QUERY)
    assert len(docs) == 3
    assert {d.metadata["car_status"] for d in docs} == {"unresolved"}
    assert all(d.metadata["source"] == "wiki" for d in docs)


def test_foreign_rows_found_by_stage2_are_skipped_with_a_warning(pg_database) -> None:
    """A row in an anchor's scope without car-rag's keys: Stage 2 says so and never ranks it."""
    foreign = Document(id="foreign", page_content="lodash 5 notes", metadata={"package": "lodash", "cve_id": "CVE-2099-20001"})
    store = new_pgvector(pg_database(), [*stores.corpus_docs(), foreign], "foreign")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = CARRetriever(base_retriever=store.as_retriever(search_kwargs={"k": 3}), store=store, policy=POLICY, k=10).invoke(
            QUERY
        )
    messages = [str(w.message) for w in caught]
    assert any("unusable document" in m and "'foreign' has no 'doc_type'" in m for m in messages), messages
    assert docs[0].id == SUPERSEDER and "foreign" not in [d.id for d in docs if d.metadata["car_status"] != "unresolved"]


def test_lookup_filter_is_anded_in_pgvector_syntax(corpus_pg) -> None:
    store = WhereStore(as_lookup(corpus_pg), {"package": {"$ne": "lodash"}})
    from car_rag.adapters import ScopeQuery

    items = store.fetch([ScopeQuery.make({"cve_id": "CVE-2099-20001"})])
    assert items == []
