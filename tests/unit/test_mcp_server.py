"""What car-rag mcp's tools return, without the MCP transport (tests/integration/test_mcp.py runs
them through the SDK): the authority chain of a record two hops from the record that controls it,
of one voided only below min_confidence, of an active one; retrieve's status beside each document."""

from __future__ import annotations

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag.evidence import render
from car_rag.mcp_server import authority_chain, evidence_with_status

DISCLOSURE, FIRST_FIX, LAST_FIX = (
    "sec-zipcraft-cve-2099-10005-disclosure",
    "sec-zipcraft-2.3.1-release",
    "sec-zipcraft-2.3.4-release",
)
DOUBT = {  # voids the lodash release only as a guess (0.3 < the default min_confidence)
    "doc_id": "sec-lodash-doubtful-note",
    "doc_type": "patch_release",
    "text": "Someone thinks a later lodash build replaced 4.17.21.",
    "scope": {"package": "lodash"},
    "published_at": "2025-09-01",
    "supersedes": [{"id": "sec-lodash-4.17.21-release", "confidence": 0.3}],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory, demo_policy, embedder, demo_corpus_path):
    store = CARStore.open(tmp_path_factory.mktemp("mcp-unit"), demo_policy, embedder=embedder)
    assert store.ingest(demo_corpus_path, progress=False).errors == []
    assert store.ingest([DOUBT], progress=False).errors == []
    yield store
    store.close()


def test_a_two_hop_chain_up_to_the_record_that_controls(store):
    chain = authority_chain(store, DISCLOSURE)
    assert chain["status"] == "superseded" and not chain["hidden_superseder"]
    assert [c["doc_id"] for c in chain["controlling"]] == [LAST_FIX]
    edges = {(e["superseder"], e["target"]): e for e in chain["chain"]}
    assert {(FIRST_FIX, DISCLOSURE), (LAST_FIX, FIRST_FIX)} <= set(edges)
    assert edges[(FIRST_FIX, DISCLOSURE)]["superseder_status"] == "superseded"
    assert edges[(LAST_FIX, FIRST_FIX)]["superseder_status"] == "active"
    assert all(e["rule_description"] for e in edges.values() if e["rule"] != "explicit")


def test_an_active_record_and_one_voided_only_below_min_confidence(store):
    active = authority_chain(store, LAST_FIX)
    assert active["status"] == "active" and active["controlling"] == active["voided_by"] == active["chain"] == []
    doubted = authority_chain(store, "sec-lodash-4.17.21-release")
    assert doubted["status"] == "active" and doubted["voided_by"] == []
    assert doubted["possibly_superseded_by"] == [{"doc_id": DOUBT["doc_id"], "rule": "explicit", "confidence": 0.3}]
    assert doubted["chain"][0]["confidence"] == 0.3
    assert authority_chain(store, "sec-lodash-4.17.21-release", min_confidence=0.2)["status"] == "superseded"


def test_an_unknown_record_is_missing(store):
    with pytest.raises(KeyError, match="no record 'nope'"):
        authority_chain(store, "nope")


def test_retrieve_gives_each_document_its_status(store, demo_queries):
    result = ControllingAuthorityRetriever(store).retrieve(demo_queries[2]["query"])
    shown = result.top(8)
    got = evidence_with_status("q", render(result, "plain", policy=store.policy, k=8), [r.to_dict() for r in shown])
    assert [r["doc_id"] for r in got["records"]] == [r.doc_id for r in shown]
    assert got["evidence"].count("[Document ") == len(shown)
    voided = {r["doc_id"]: r for r in got["records"] if r["status"] == "superseded"}
    assert DISCLOSURE in voided and voided[DISCLOSURE]["superseded_by"] == [LAST_FIX]
