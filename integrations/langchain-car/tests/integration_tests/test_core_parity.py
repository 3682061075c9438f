"""Same Stage 1, same answer: CARRetriever over LangChain objects vs car-rag's own retriever
on the packaged demo corpus (45 records, ten questions, chains of one to three hops)."""

from __future__ import annotations

import json
import re

import pytest
from car_rag import CARStore, ControllingAuthorityRetriever, Embedder
from car_rag.channels.rank_bm25_index import tokenize as rank_bm25_tokens
from car_rag.evidence import render_audit, render_plain, render_reader
from langchain_community.retrievers import BM25Retriever

from langchain_car import CARRetriever
from tests.integration_tests import stores


@pytest.fixture(scope="module")
def core_store(tmp_path_factory):
    embedder: Embedder = stores.embeddings().embedder
    store = CARStore.open(tmp_path_factory.mktemp("core"), stores.demo_policy(), embedder=embedder, bm25_backend="rank-bm25")
    report = store.ingest(stores.DEMO / "corpus.jsonl", progress=False)
    assert report.errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    return [json.loads(line) for line in (stores.DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]


def _no_rationale(xml: str) -> str:
    return re.sub(r"\n *<rationale[^>]*/>|\n *<rationale[^>]*>.*?</rationale>", "", xml, flags=re.S)


def test_bm25_stage1_gives_the_same_records_and_the_same_evidence(core_store, queries) -> None:
    policy = stores.demo_policy()
    bm25 = BM25Retriever.from_documents(stores.demo_docs(), k=5, preprocess_func=rank_bm25_tokens)
    wrapped = CARRetriever(base_retriever=bm25, store=stores.demo_chroma(), policy=policy, k=5)
    core = ControllingAuthorityRetriever(core_store, anchors="bm25", k1=5, fusion="rrf", latent_scope=False)
    for q in queries:
        expected = core.retrieve(q["query"])
        docs = wrapped.invoke(q["query"])
        assert [d.id for d in docs] == expected.doc_ids(5), q["query_id"]
        assert [d.metadata["car_status"] for d in docs] == [r.status for r in expected.top(5)], q["query_id"]
        assert wrapped.evidence_formatter().invoke(docs) == render_plain(expected, k=5), q["query_id"]
        reader = wrapped.evidence_formatter(form="reader").invoke(docs)
        assert reader == render_reader(expected, policy=policy, k=5, provenance=False), q["query_id"]
        # BM25Retriever puts no score in its documents: Stage 1 is rank only, so the audit form's
        # Stage-1 rationale (channel scores) differs from the core's; everything else is equal.
        audit = wrapped.evidence_formatter(form="audit").invoke(docs)
        assert _no_rationale(audit) == _no_rationale(render_audit(expected, policy=policy, k=5, provenance=False)), q["query_id"]
        assert q["gold_doc_ids"][0] in [d.id for d in docs], q["query_id"]


def test_dense_stage1_gives_the_same_records(core_store, queries) -> None:
    chroma = stores.demo_chroma()
    wrapped = CARRetriever(
        base_retriever=chroma.as_retriever(search_kwargs={"k": 10}), store=chroma, policy=stores.demo_policy(), k=5
    )
    core = ControllingAuthorityRetriever(core_store, anchors="dense", k1=10, fusion="rrf", latent_scope=False)
    for q in queries:
        expected = core.retrieve(q["query"])
        full = wrapped.retrieve(q["query"])
        assert [h.doc_id for h in full.anchors] == [h.doc_id for h in expected.anchors], q["query_id"]
        assert [d.id for d in wrapped.invoke(q["query"])] == expected.doc_ids(5), q["query_id"]
        assert [h.rank for h in full.anchors] == [h.rank for h in expected.anchors], q["query_id"]
