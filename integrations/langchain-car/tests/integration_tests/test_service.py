"""CARServiceRetriever against a real `car-rag serve` on loopback (the packaged demo corpus,
MiniLM, an API key): its documents equal the in-process CARRetriever's, given the same Stage 1
(the core's anchors), but for what only the core's Stage 1 knows; sync and async; the evidence
formatter reads them; a wrong key and a server that is down are the client's clear errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from car_rag import CallerContext, CARStore, ControllingAuthorityRetriever
from car_rag.client import CARAuthError, CARServiceUnavailable
from car_rag.evidence import render_plain
from car_rag.layout import CAR_AMBIGUITY, CAR_SCOPE_PROBABILITY, CAR_STAGE1_CHANNEL, CAR_STATUS
from car_rag.serve.keys import hash_key, load_api_keys
from car_rag.serve.service import Service
from car_rag_evals.servers import HOST, free_port, serving
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_car import CARRetriever, CARServiceRetriever, evidence_formatter
from tests.integration_tests import stores

KEY = "k-app"
READER = CallerContext()
"""Whom the key reads as: no tenant, no principal."""
CORE_STAGE1_ONLY = {CAR_STAGE1_CHANNEL, CAR_SCOPE_PROBABILITY, CAR_AMBIGUITY, "score"}
"""What differs between a served document and the in-process one given the core's anchors: the
channel that found a record (the wrapper names its retriever's class), the latent-scope step's
scope probability and ambiguity, which a CARRetriever wrapping another retriever does not run,
and the ``score`` metadata through which that Stage 1 hands the wrapper its scores."""


class CoreAnchors(BaseRetriever):
    """The core's Stage-1 anchors, as the demo documents with their fused scores (``score``)."""

    core: Any
    documents: dict[str, Document]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [
            Document(
                id=h.doc_id,
                page_content=self.documents[h.doc_id].page_content,
                metadata={**self.documents[h.doc_id].metadata, "score": h.score},
            )
            for h in self.core.stage1(query, READER)
        ]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Iterator[CARStore]:
    store = CARStore.open(tmp_path_factory.mktemp("service"), stores.demo_policy(), embedder=stores.embeddings().embedder)
    assert store.ingest(stores.DEMO / "corpus.jsonl", progress=False).errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def url(store: CARStore, tmp_path_factory) -> Iterator[str]:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "app", "sha256": hash_key(KEY)}]}))
    keys.chmod(0o600)
    with serving(Service(store, api_keys=load_api_keys(keys), timeout_ms=30_000)) as base:
        yield base


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    return [json.loads(line) for line in (stores.DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]


async def test_documents_equal_the_in_process_retrievers_on_the_same_stage1(store, url, queries) -> None:
    docs = stores.demo_docs()
    anchors = CoreAnchors(core=ControllingAuthorityRetriever(store), documents={str(d.id): d for d in docs})
    local = CARRetriever(base_retriever=anchors, store=docs, policy=stores.demo_policy(), k=8, caller=READER)
    remote = CARServiceRetriever(url=url, api_key=KEY, k=8)
    statuses = set()
    for q in queries[:5]:
        served, expected = remote.invoke(q["query"]), local.invoke(q["query"])
        assert [d.id for d in served] == [d.id for d in expected], q["query_id"]
        for got, want in zip(served, expected):
            assert got.page_content == want.page_content
            meta, other = got.metadata, want.metadata
            assert {k for k in meta.keys() | other.keys() if meta.get(k) != other.get(k)} <= CORE_STAGE1_ONLY, q["query_id"]
            statuses.add(meta[CAR_STATUS])
        assert await remote.ainvoke(q["query"]) == served
    assert statuses == {"active", "superseded"}


def test_the_evidence_formatter_reads_served_documents(store, url, queries) -> None:
    query = queries[0]["query"]
    served = CARServiceRetriever(url=url, api_key=KEY, k=8).invoke(query)
    expected = ControllingAuthorityRetriever(store).retrieve(query, READER)
    assert evidence_formatter(policy=stores.demo_policy()).invoke(served) == render_plain(expected, k=8)


def test_a_wrong_key_and_a_server_that_is_down_are_clear_errors(url, queries) -> None:
    with pytest.raises(CARAuthError, match="401"):
        CARServiceRetriever(url=url, api_key="wrong").invoke(queries[0]["query"])
    down = f"http://{HOST}:{free_port()}"
    with pytest.raises(CARServiceUnavailable, match=f"cannot reach car-rag serve at {down}"):
        CARServiceRetriever(url=down, retries=0).invoke(queries[0]["query"])
    assert "wrong" not in repr(CARServiceRetriever(url=url, api_key="wrong"))  # the key is a secret


async def test_async_down_is_unavailable(queries) -> None:
    down = f"http://{HOST}:{free_port()}"
    with pytest.raises(CARServiceUnavailable, match=f"cannot reach car-rag serve at {down}"):
        await CARServiceRetriever(url=down, retries=0).ainvoke(queries[0]["query"])
