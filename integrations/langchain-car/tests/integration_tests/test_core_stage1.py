"""``CARRetriever.from_vector_store`` with car-rag's own Stage 1 (``CARVectorStoreRetriever``): the
store's dense search and BM25 over its documents, calibrated fusion, the scope posterior, then the
core's Stages 2 and 3. Real MiniLM, ``InMemoryVectorStore`` and Chroma, compared with the core
retriever at its defaults over a ``CARStore`` of the packaged demo corpus."""

from __future__ import annotations

import json

import pytest
from car_rag import CallerContext, CARStore, ControllingAuthorityRetriever, Embedder
from car_rag.adapters import MissingAuthorityMetadata
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_car import CARRetriever, CARVectorStoreRetriever, record_to_document
from tests.corpus import ANCHOR, QUERY, SUPERSEDER, records
from tests.integration_tests import stores


@pytest.fixture(scope="module")
def core_store(tmp_path_factory):
    embedder: Embedder = stores.embeddings().embedder
    store = CARStore.open(tmp_path_factory.mktemp("core"), stores.demo_policy(), embedder=embedder)
    report = store.ingest(stores.DEMO / "corpus.jsonl", progress=False)
    assert report.errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def queries() -> list[str]:
    lines = (stores.DEMO / "queries.jsonl").read_text().splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()]


def _memory(docs: list[Document]) -> InMemoryVectorStore:
    store = InMemoryVectorStore(stores.embeddings())
    store.add_documents(docs, ids=[str(d.id) for d in docs])
    return store


def _ranking(docs: list[Document]) -> list[tuple[str, str]]:
    return [(d.metadata["doc_id"], d.metadata["car_status"]) for d in docs]


@pytest.mark.parametrize("store_kind", ["memory", "chroma"])
def test_from_vector_store_defaults_to_the_core_stage1_and_ranks_as_the_core(store_kind, core_store, queries) -> None:
    store = _memory(stores.demo_docs()) if store_kind == "memory" else stores.demo_chroma()
    retriever = CARRetriever.from_vector_store(store, stores.demo_policy())
    assert isinstance(retriever, CARVectorStoreRetriever)
    core = ControllingAuthorityRetriever(core_store)
    for query in queries:
        expected = core.retrieve(query)
        assert _ranking(retriever.invoke(query)) == [(r.doc_id, r.status) for r in expected.top(5)], query
        ours = retriever.retrieve(query)
        assert [h.doc_id for h in ours.anchors] == [h.doc_id for h in expected.anchors], query
        assert [round(r.scope_probability or 0, 5) for r in ours] == [round(r.scope_probability or 0, 5) for r in expected]


def test_documents_carry_status_and_the_scope_posterior() -> None:
    retriever = CARRetriever.from_vector_store(_memory(stores.corpus_docs()), "security-advisory", k=10)
    meta = {d.metadata["doc_id"]: d.metadata for d in retriever.invoke(QUERY)}
    assert meta[SUPERSEDER]["car_status"] == "active"
    assert meta[ANCHOR]["car_status"] == "superseded" and meta[ANCHOR]["car_superseded_by"] == [SUPERSEDER]
    assert all("car_scope_probability" in m for m in meta.values())


def test_options_min_confidence_and_the_caller_reach_the_core() -> None:
    store = _memory(stores.corpus_docs())
    retriever = CARRetriever.from_vector_store(
        store, "security-advisory", min_confidence=0.8, options={"k1": 3, "depth": 20}, caller=CallerContext(tenant="t1")
    )
    assert (retriever.core.min_confidence, retriever.core.k1, retriever.core.depth) == (0.8, 3, 20)
    assert retriever.caller == CallerContext(tenant="t1")


def test_the_caller_never_reads_a_record_they_may_not() -> None:
    base = records()[1].model_copy(
        update={"doc_id": "lodash-internal-note", "allowed_principals": ["security-team"], "text": records()[1].text}
    )
    docs = [*stores.corpus_docs(), record_to_document(base)]
    store = _memory(docs)
    outsider = CARRetriever.from_vector_store(store, "security-advisory", k=20, caller=CallerContext(principals=["x"]))
    insider = CARRetriever.from_vector_store(store, "security-advisory", k=20, caller=CallerContext(principals=["security-team"]))
    assert "lodash-internal-note" not in [d for d, _ in _ranking(outsider.invoke(QUERY))]
    assert "lodash-internal-note" in [d for d, _ in _ranking(insider.invoke(QUERY))]


def test_documents_added_and_deleted_are_followed() -> None:
    docs = stores.corpus_docs()
    without = [d for d in docs if d.id != SUPERSEDER]
    store = _memory(without)
    retriever = CARRetriever.from_vector_store(store, "security-advisory", k=10)
    assert dict(_ranking(retriever.invoke(QUERY)))[ANCHOR] == "active"
    store.add_documents([d for d in docs if d.id == SUPERSEDER], ids=[SUPERSEDER])  # straight into the store
    assert dict(_ranking(retriever.invoke(QUERY)))[ANCHOR] == "superseded"
    retriever.delete([SUPERSEDER])
    statuses = dict(_ranking(retriever.invoke(QUERY)))
    assert statuses[ANCHOR] == "active" and SUPERSEDER not in statuses
    assert len(retriever.corpus) == len(without)
    # a store that is not followed: through the retriever, into the store and Stage 1 together
    chroma = stores.new_chroma(without, prefix="follow")
    on_chroma = CARRetriever.from_vector_store(chroma, "security-advisory", k=10)
    on_chroma.add_documents([d for d in docs if d.id == SUPERSEDER], ids=[SUPERSEDER])
    assert dict(_ranking(on_chroma.invoke(QUERY)))[ANCHOR] == "superseded"


def test_a_store_without_car_rag_metadata_is_refused_naming_the_keys_and_the_extraction_route() -> None:
    store = _memory([Document(id="blog-1", page_content="lodash 4.17.21 fixes prototype pollution", metadata={"source": "blog"})])
    with pytest.raises(MissingAuthorityMetadata, match="doc_type") as caught:
        CARRetriever.from_vector_store(store, "security-advisory")
    assert "CARAuthorityTransformer" in str(caught.value) and "car-rag extract" in str(caught.value)
    wrapped = CARRetriever.from_vector_store(store, "security-advisory", retriever=store.as_retriever(search_kwargs={"k": 1}))
    assert isinstance(wrapped, CARRetriever)
    assert wrapped.invoke("lodash")[0].metadata["car_status"] == "unresolved"
