"""A store whose vectors live in a real `chroma run` server on loopback."""

from __future__ import annotations

import json

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, StoreError
from car_rag_evals.servers import HOST, chroma_http_client, free_port
from helpers_records import chroma_collection, retrieved
from servers import chroma_run

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    """`chroma run` on a free loopback port; yields (url, port)."""
    with chroma_run(tmp_path_factory.mktemp("chroma-server")) as (url, port, _):
        yield url, port


@pytest.fixture(scope="module")
def server_store_path(chroma_server, tmp_path_factory, demo_policy, embedder, demo_corpus_path):
    url, _ = chroma_server
    path = tmp_path_factory.mktemp("server-store")
    store = CARStore.open(path, demo_policy, chroma_url=url, embedder=embedder)
    try:
        report = store.ingest(demo_corpus_path, progress=False)
        assert report.errors == [] and len(report.added) == 45
    finally:
        store.close()
    return path


def test_server_store_ranks_like_the_embedded_store(server_store_path, chroma_server, demo_store, demo_queries, embedder):
    url, _ = chroma_server
    store = CARStore.open(server_store_path, chroma_url=url, embedder=embedder)
    try:
        assert not (server_store_path / "chroma").exists()  # no embedded database was created
        assert json.loads((server_store_path / "car-store.json").read_text())["chroma_url"] == url
        assert chroma_collection(store).count() == 45
        served = ControllingAuthorityRetriever(store, anchors="hybrid")
        embedded = ControllingAuthorityRetriever(demo_store, anchors="hybrid")
        for q in demo_queries:
            a, b = served.retrieve(q["query"]), embedded.retrieve(q["query"])
            assert a.doc_ids(5) == b.doc_ids(5), q["query_id"]
            assert [h.doc_id for h in a.anchors] == [h.doc_id for h in b.anchors], q["query_id"]
            assert a.anchors[0].channel_scores["dense"] == pytest.approx(b.anchors[0].channel_scores["dense"], abs=1e-5)
            assert q["gold_doc_ids"][0] in a.doc_ids(5)
    finally:
        store.close()


def test_reopening_without_url_reuses_the_server(server_store_path, chroma_server, embedder):
    url, port = chroma_server
    store = CARStore.open(server_store_path, embedder=embedder)
    try:
        assert store.config["chroma_url"] == url
        settings = store._client.get_settings()
        assert settings.chroma_api_impl == "chromadb.api.fastapi.FastAPI"
        assert (settings.chroma_server_host, int(settings.chroma_server_http_port)) == (HOST, port)
        assert not (server_store_path / "chroma").exists()
        assert len(store) == 45 and chroma_collection(store).count() == 45
        result = ControllingAuthorityRetriever(store, anchors="dense").retrieve(
            "Can an attacker still abuse a protocol-relative URL with an axios baseURL to perform SSRF?"
        )
        assert result.ranked[0].doc_id == "sec-axios-1.7.4-release"
        assert retrieved(result, "sec-axios-cve-2099-10003-disclosure").status == "superseded"
    finally:
        store.close()
    with pytest.raises(StoreError, match="uses Chroma at"):
        CARStore.open(server_store_path, chroma_url="http://127.0.0.1:1", embedder=embedder)


def test_records_are_visible_through_a_fresh_http_client(server_store_path, chroma_server, demo_records):
    _, port = chroma_server
    name = json.loads((server_store_path / "car-store.json").read_text())["collection"]
    client = chroma_http_client(port)
    assert name in [c.name for c in client.list_collections()]
    collection = client.get_collection(name)
    assert collection.count() == 45
    got = collection.get(ids=[r["doc_id"] for r in demo_records], include=["documents"])
    assert dict(zip(got["ids"], got["documents"])) == {r["doc_id"]: r["text"] for r in demo_records}
    scoped = collection.get(where={"cve_id": "CVE-2099-10005"}, include=["metadatas"])
    assert sorted(scoped["ids"]) == [
        "sec-zipcraft-2.3.1-release",
        "sec-zipcraft-2.3.4-release",
        "sec-zipcraft-cve-2099-10005-disclosure",
    ]
    assert {m["package"] for m in scoped["metadatas"]} == {"zipcraft"}


def test_failed_create_against_an_unreachable_server_can_be_retried(chroma_server, tmp_path, demo_policy, embedder):
    url, _ = chroma_server
    path = tmp_path / "store"
    dead = f"http://{HOST}:{free_port()}"
    with pytest.raises((StoreError, ValueError), match="(?i)connect"):
        CARStore.open(path, demo_policy, chroma_url=dead, embedder=embedder)
    store = CARStore.open(path, demo_policy, chroma_url=url, embedder=embedder)
    try:
        assert store.config["chroma_url"] == url
        assert json.loads((path / "car-store.json").read_text())["chroma_url"] == url
    finally:
        store.close()
