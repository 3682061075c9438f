"""CARStore: persistence, idempotent ingest, replacement, rejection, Chroma batching and
scope metadata — against real Chroma (embedded) and the real MiniLM embedder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from car_rag import CARStore, Record, StoreError
from car_rag.adapters import Edge
from car_rag.channels import DenseChannel, VectorChannel
from car_rag.store import chroma_metadata
from helpers_records import chroma_collection

LODASH_PATCH = "sec-lodash-4.17.12-release"
LODASH_DISCLOSURE = "sec-lodash-cve-2099-10001-disclosure"
AXIOS_PATCH = "sec-axios-1.7.4-release"
AXIOS_DISCLOSURE = "sec-axios-cve-2099-10003-disclosure"
ZIP_FIRST_FIX = "sec-zipcraft-2.3.1-release"
ZIP_FINAL_FIX = "sec-zipcraft-2.3.4-release"


def edge_set(store: CARStore) -> set[tuple[str, str, str]]:
    return {(e.superseder, e.target, e.rule) for e in store.graph.edges()}


def chroma_ids(store: CARStore, ids: list[str]) -> list[str]:
    return chroma_collection(store).get(ids=ids, include=[])["ids"]


@pytest.fixture
def fresh_store(tmp_path, demo_policy, embedder, demo_corpus_path):
    """A private store holding the demo corpus, for tests that write to it."""
    store = CARStore.open(tmp_path / "store", demo_policy, embedder=embedder)
    report = store.ingest(demo_corpus_path, progress=False)
    assert report.errors == []
    yield store
    store.close()


# --------------------------------------------------------------------------- open / reopen
def test_reopened_store_keeps_records_edges_and_indexes(tmp_path, demo_policy, embedder, demo_corpus_path, demo_records):
    path = tmp_path / "store"
    store = CARStore.open(path, demo_policy, embedder=embedder)
    report = store.ingest(demo_corpus_path, progress=False)
    assert len(report.added) == len(demo_records) == 45
    assert (path / "car-store.json").is_file() and (path / "records.sqlite").is_file()
    assert (path / "bm25" / "index.json").is_file() and (path / "chroma").is_dir()

    records = dict(store.records)
    edges = edge_set(store)
    assert (LODASH_PATCH, LODASH_DISCLOSURE, "patch_fixes_disclosure") in edges
    assert (AXIOS_PATCH, AXIOS_DISCLOSURE, "explicit") in edges
    assert (ZIP_FINAL_FIX, ZIP_FIRST_FIX, "explicit") in edges
    query = "zipcraft archive extraction path traversal"
    bm25_before = [(h.doc_id, h.rank) for h in store.lexical.search(query, 10)]
    assert bm25_before[0][0] == "sec-zipcraft-cve-2099-10005-disclosure"
    vector = embedder.encode([query])[0]
    dense_before = [h.doc_id for h in store.dense.search(vector, 10)]
    store.close()

    # Reopened without a policy: everything comes back from disk.
    reopened = CARStore.open(path, embedder=embedder)
    try:
        assert reopened.policy == demo_policy
        assert len(reopened) == 45
        assert reopened.records == records
        assert list(reopened.records) == [r["doc_id"] for r in demo_records]  # ingest order kept
        assert edge_set(reopened) == edges
        assert reopened.graph.is_superseded(LODASH_DISCLOSURE)
        assert not reopened.graph.is_superseded(LODASH_PATCH)
        assert reopened.lexical.doc_ids == [r["doc_id"] for r in demo_records]
        assert [(h.doc_id, h.rank) for h in reopened.lexical.search(query, 10)] == bm25_before
        assert chroma_collection(reopened).count() == 45
        assert [h.doc_id for h in reopened.dense.search(vector, 10)] == dense_before
    finally:
        reopened.close()

    # Reopened with the very same policy: accepted.
    CARStore.open(path, demo_policy, embedder=embedder).close()


def test_reopen_with_a_different_policy_raises(tmp_path, demo_policy, legal_policy, embedder):
    path = tmp_path / "store"
    CARStore.open(path, demo_policy, embedder=embedder).close()
    with pytest.raises(StoreError, match=r"resolves differently \(its name, scope_keys, .*rules differ\)"):
        CARStore.open(path, legal_policy, embedder=embedder)
    with pytest.raises(StoreError, match="resolves differently"):
        CARStore.open(path, "security-advisory", embedder=embedder)
    same_edges_other_rules = demo_policy.model_copy(update={"rules": demo_policy.rules[:-1]})
    with pytest.raises(StoreError, match=r"\(its rules differ\)"):
        CARStore.open(path, same_edges_other_rules, embedder=embedder)
    # The refused open left the configuration alone.
    config = json.loads((path / "car-store.json").read_text())
    assert config["policy"]["name"] == "demo"


def test_reopen_with_other_words_for_the_same_policy_answers_in_them(tmp_path, demo_policy, embedder):
    """States, descriptions and verbs decide no edge: a store opens under a policy whose words
    changed (a vocabulary fix) and uses them, and leaves the stored policy as built."""
    path = tmp_path / "store"
    CARStore.open(path, demo_policy, embedder=embedder).close()
    reworded = demo_policy.model_copy(update={"description": "reworded", "states": {}})
    store = CARStore.open(path, reworded, embedder=embedder)
    try:
        assert store.policy.description == "reworded" and store.policy.states == {}
    finally:
        store.close()
    assert json.loads((path / "car-store.json").read_text())["policy"]["description"] == demo_policy.description


def test_opening_a_missing_store_without_policy_raises(tmp_path, embedder):
    missing = tmp_path / "nowhere"
    with pytest.raises(StoreError, match="no car-rag store"):
        CARStore.open(missing, embedder=embedder)
    assert not missing.exists()


# --------------------------------------------------------------------------- idempotence
def test_reingesting_the_same_file_changes_nothing(fresh_store, demo_corpus_path):
    store = fresh_store
    records = dict(store.records)
    edges = edge_set(store)
    lexical_ids = list(store.lexical.doc_ids)
    assert len(edges) == 18

    report = store.ingest(demo_corpus_path, progress=False)

    assert report.added == []
    assert report.updated == []
    assert report.unchanged == 45
    assert report.errors == []
    assert report.new_edges == []
    assert report.newly_superseded == []
    assert chroma_collection(store).count() == 45
    assert len(store) == 45
    assert store.records == records
    assert edge_set(store) == edges
    assert store.lexical.doc_ids == lexical_ids
    persisted = sorted((e.superseder, e.target, e.rule) for e in store.log.load().edges)
    assert set(persisted) == edges and len(persisted) == 18


# --------------------------------------------------------------------------- replacement
def test_changed_record_replaces_the_old_one(fresh_store, demo_records, embedder):
    store = fresh_store
    edges = edge_set(store)
    old = next(r for r in demo_records if r["doc_id"] == LODASH_PATCH)
    assert "isEqual" in old["text"]
    new_text = (
        "Release 4.17.12 (re-issued). Hardened merge against quokka-style constructor keys "
        "so deep merges can no longer reach the shared object prototype."
    )
    changed = {**old, "text": new_text}

    report = store.ingest([changed], progress=False)

    assert report.updated == [LODASH_PATCH]
    assert report.added == []
    assert report.unchanged == 0
    assert report.errors == []
    assert len(store) == 45
    assert chroma_collection(store).count() == 45
    assert store.get(LODASH_PATCH).text == new_text
    # Chroma holds the new document and its new vector.
    got = chroma_collection(store).get(ids=[LODASH_PATCH], include=["documents", "embeddings", "metadatas"])
    assert got["documents"] == [new_text]
    np.testing.assert_allclose(got["embeddings"][0], embedder.encode([new_text])[0], atol=1e-5)
    assert got["metadatas"][0]["cve_id"] == "CVE-2099-10001"
    # BM25 was rebuilt: the new wording is found, the old one is gone.
    assert store.lexical.search("quokka", 5)[0].doc_id == LODASH_PATCH
    assert LODASH_PATCH not in [h.doc_id for h in store.lexical.search("isEqual toolchain", 45)]
    # Its authority edge was re-derived, nothing else moved.
    assert edge_set(store) == edges
    assert store.graph.superseders(LODASH_DISCLOSURE) == [Edge(LODASH_PATCH, LODASH_DISCLOSURE, "patch_fixes_disclosure")]

    # And all of that is what a reopened store sees.
    path = store.path
    store.close()
    reopened = CARStore.open(path, embedder=store.embedder)
    try:
        assert reopened.get(LODASH_PATCH).text == new_text
        assert edge_set(reopened) == edges
        assert reopened.lexical.search("quokka", 5)[0].doc_id == LODASH_PATCH
        assert list(reopened.records).index(LODASH_PATCH) == 1  # kept its place in ingest order
    finally:
        reopened.close()


def test_replaced_record_leaves_no_stale_chroma_metadata(fresh_store):
    store = fresh_store
    old = store.get(LODASH_PATCH)
    # Correction: this release note was filed under the wrong CVE; it now names only its package.
    corrected = {**old.model_dump(mode="json"), "scope": {"package": "lodash"}, "version": None}

    report = store.ingest([corrected], progress=False)

    assert report.updated == [LODASH_PATCH]
    # The authority graph and entity index follow the correction ...
    assert [r.doc_id for r in store.graph.lookup({"cve_id": "CVE-2099-10001"})] == [LODASH_DISCLOSURE]
    assert not store.graph.is_superseded(LODASH_DISCLOSURE)
    # ... and so must the vector store's metadata, which integrations query for Stage 2.
    meta = chroma_collection(store).get(ids=[LODASH_PATCH], include=["metadatas"])["metadatas"][0]
    assert meta == chroma_metadata(store.get(LODASH_PATCH))
    assert chroma_collection(store).get(where={"cve_id": "CVE-2099-10001"}, include=[])["ids"] == [LODASH_DISCLOSURE]


def test_explicit_edge_to_a_record_ingested_later_survives_reopen(tmp_path, security_policy, embedder):
    path = tmp_path / "store"
    newer = {
        "doc_id": "advisory-v2",
        "text": "Revised advisory: the flaw also affects the streaming parser.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "parsekit", "cve_id": "CVE-2099-30001"},
        "supersedes": ["advisory-v1"],
    }
    older = {
        "doc_id": "advisory-v1",
        "text": "Initial advisory: heap overflow in the parsekit tokenizer.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "parsekit", "cve_id": "CVE-2099-30001"},
    }
    store = CARStore.open(path, security_policy, embedder=embedder)
    assert store.ingest([newer], progress=False).new_edges == []
    store.close()

    store = CARStore.open(path, embedder=embedder)
    report = store.ingest([older], progress=False)
    assert report.new_edges == [Edge("advisory-v2", "advisory-v1", "explicit")]
    assert report.newly_superseded == ["advisory-v1"]
    store.close()

    store = CARStore.open(path, embedder=embedder)
    try:
        assert edge_set(store) == {("advisory-v2", "advisory-v1", "explicit")}
        assert store.graph.frontier(["advisory-v1", "advisory-v2"]) == {"advisory-v2"}
    finally:
        store.close()


# --------------------------------------------------------------------------- rejection
def _write_jsonl(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def test_bad_records_are_reported_and_the_rest_ingested(fresh_store, tmp_path):
    store = fresh_store
    before = dict(store.records)
    edges = edge_set(store)
    good_disclosure: dict[str, Any] = {
        "doc_id": "sec-inkwell-cve-2099-20001-disclosure",
        "text": "CVE-2099-20001: stored cross-site scripting in inkwell comment rendering.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "inkwell", "cve_id": "CVE-2099-20001"},
        "published_at": "2024-11-02",
    }
    no_type = {"doc_id": "bad-no-type", "text": "a record without a type", "scope": {"package": "inkwell"}}
    ill_typed = {
        "doc_id": "bad-authority",
        "text": "authority must be a number",
        "doc_type": "vulnerability_disclosure",
        "authority": "very high",
    }
    reserved = {
        "doc_id": "bad-tenant-scope",
        "text": "tenant is reserved car-rag metadata",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "inkwell", "tenant": "acme"},
    }
    good_patch: dict[str, Any] = {
        "doc_id": "sec-inkwell-5.0.1-release",
        "text": "5.0.1: comment bodies are escaped before rendering.",
        "doc_type": "patch_release",
        "scope": {"package": "inkwell", "cve_id": "CVE-2099-20001"},
        "published_at": "2024-11-20",
    }
    path = _write_jsonl(tmp_path / "mixed.jsonl", [good_disclosure, no_type, ill_typed, reserved, good_patch])

    report = store.ingest(path, progress=False)

    errors = {(e.doc_id, e.field) for e in report.errors}
    assert errors == {("bad-no-type", "doc_type"), ("bad-authority", "authority"), ("bad-tenant-scope", "scope.tenant")}
    lines = {e.doc_id: e.line for e in report.errors}
    assert lines["bad-no-type"] == 2 and lines["bad-authority"] == 3
    assert all(e.source == str(path) for e in report.errors)
    assert "reserved" in next(e.message for e in report.errors if e.doc_id == "bad-tenant-scope")
    assert report.added == [good_disclosure["doc_id"], good_patch["doc_id"]]
    assert report.updated == [] and report.unchanged == 0
    assert report.new_edges == [Edge(good_patch["doc_id"], good_disclosure["doc_id"], "patch_fixes_disclosure")]

    # Everything stored earlier is still there, unchanged.
    assert len(store) == 47
    assert {d: store.get(d) for d in before} == before
    assert edge_set(store) - edges == {(good_patch["doc_id"], good_disclosure["doc_id"], "patch_fixes_disclosure")}
    assert chroma_collection(store).count() == 47
    rejected = ["bad-no-type", "bad-authority", "bad-tenant-scope"]
    assert chroma_ids(store, rejected) == []
    assert not set(rejected) & set(store.lexical.doc_ids)
    assert not set(rejected) & set(store.records)


def test_record_closing_a_supersession_cycle_is_rejected(fresh_store):
    store = fresh_store
    edges = edge_set(store)
    before = dict(store.records)
    first = {
        "doc_id": "sec-axios-cve-2099-10111-disclosure",
        "text": "CVE-2099-10111: axios leaks proxy credentials on redirect.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "axios", "cve_id": "CVE-2099-10111"},
    }
    # A disclosure claiming to void the patch that (by rule) voids it: a cycle.
    cyclic: dict[str, Any] = {
        "doc_id": "sec-axios-cve-2099-10003-reopened",
        "text": "CVE-2099-10003 reopened: the 1.7.4 fix is incomplete.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "axios", "cve_id": "CVE-2099-10003"},
        "supersedes": [AXIOS_PATCH],
    }
    last = {
        "doc_id": "sec-axios-1.7.9-release",
        "text": "v1.7.9: proxy authorization is dropped on cross-origin redirects.",
        "doc_type": "patch_release",
        "scope": {"package": "axios", "cve_id": "CVE-2099-10111"},
    }

    report = store.ingest([first, cyclic, last], progress=False)

    assert [(e.doc_id, e.field) for e in report.errors] == [(cyclic["doc_id"], "supersedes")]
    assert "cycle" in report.errors[0].message
    assert report.added == [first["doc_id"], last["doc_id"]]
    assert cyclic["doc_id"] not in store.records
    assert chroma_ids(store, [cyclic["doc_id"]]) == []
    assert cyclic["doc_id"] not in store.lexical.doc_ids
    assert not store.graph.is_superseded(AXIOS_PATCH)
    assert edge_set(store) == edges | {(last["doc_id"], first["doc_id"], "patch_fixes_disclosure")}
    assert {d: store.get(d) for d in before} == before
    assert chroma_collection(store).count() == 47


def test_replacement_closing_a_cycle_keeps_the_previous_version(fresh_store):
    store = fresh_store
    edges = edge_set(store)
    old = store.get(ZIP_FIRST_FIX)
    changed = {**old.model_dump(mode="json"), "text": "2.3.1 (amended)", "supersedes": [ZIP_FINAL_FIX]}

    report = store.ingest([changed], progress=False)

    assert [(e.doc_id, e.field) for e in report.errors] == [(ZIP_FIRST_FIX, "supersedes")]
    assert report.updated == [] and report.added == []
    assert store.get(ZIP_FIRST_FIX) == old
    assert edge_set(store) == edges
    assert store.graph.superseders(ZIP_FIRST_FIX) == [Edge(ZIP_FINAL_FIX, ZIP_FIRST_FIX, "explicit")]
    assert chroma_collection(store).get(ids=[ZIP_FIRST_FIX], include=["documents"])["documents"] == [old.text]
    # Re-ingesting the old version is a no-op: the graph was restored to exactly it.
    again = store.ingest([old], progress=False)
    assert again.unchanged == 1 and again.updated == [] and again.new_edges == []


def test_an_atomic_batch_with_a_rejected_record_stores_none_of_it(fresh_store):
    store = fresh_store
    edges, before, vectors = edge_set(store), dict(store.records), chroma_collection(store).count()
    amended = {**store.get(ZIP_FIRST_FIX).model_dump(mode="json"), "text": "2.3.1 (amended notes)"}
    fresh = {
        "doc_id": "sec-axios-cve-2099-10111-disclosure",
        "text": "CVE-2099-10111: axios leaks proxy credentials.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "axios", "cve_id": "CVE-2099-10111"},
    }
    cyclic: dict[str, Any] = {
        "doc_id": "sec-axios-cve-2099-10003-reopened",
        "text": "CVE-2099-10003 reopened: the 1.7.4 fix is incomplete.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "axios", "cve_id": "CVE-2099-10003"},
        "supersedes": [AXIOS_PATCH],
    }
    bad_field = {**fresh, "doc_id": "sec-bad-date", "published_at": 2024}

    for batch, field in (([amended, fresh, cyclic], "supersedes"), ([fresh, bad_field, amended], "published_at")):
        report = store.ingest(batch, progress=False, atomic=True)
        assert [e.field for e in report.errors] == [field]
        assert report.added == report.updated == report.new_edges == []
        assert dict(store.records) == before and edge_set(store) == edges
        assert chroma_collection(store).count() == vectors and fresh["doc_id"] not in store.lexical.doc_ids

    report = store.ingest([amended, fresh], progress=False, atomic=True)  # without the bad record: all of it
    assert report.errors == [] and report.updated == [ZIP_FIRST_FIX] and report.added == [fresh["doc_id"]]


# --------------------------------------------------------------------------- Chroma batches
def _generated(n_pairs: int, offset: int = 0) -> list[dict]:
    out = []
    for i in range(offset, offset + n_pairs):
        scope = {"package": f"genpkg{i}", "cve_id": f"CVE-2098-{10000 + i}"}
        out.append(
            {
                "doc_id": f"gen-{i}-disclosure",
                "text": f"CVE-2098-{10000 + i}: buffer overflow in genpkg{i} header parser number {i}.",
                "doc_type": "vulnerability_disclosure",
                "scope": scope,
                "published_at": "2024-01-01",
            }
        )
        out.append(
            {
                "doc_id": f"gen-{i}-release",
                "text": f"genpkg{i} 1.0.{i}: bounds checks added to the header parser.",
                "doc_type": "patch_release",
                "scope": scope,
                "published_at": "2024-02-01",
                "version": f"1.0.{i}",
            }
        )
    return out


class RecordingCollection:
    """The real Chroma collection, noting the size of every upsert sent to it."""

    def __init__(self, collection):
        self.collection = collection
        self.batch_sizes: list[int] = []

    def upsert(self, **kwargs):
        self.batch_sizes.append(len(kwargs["ids"]))
        return self.collection.upsert(**kwargs)

    def get(self, **kwargs):
        return self.collection.get(**kwargs)


def test_generated_records_and_small_upsert_batches(tmp_path, security_policy, embedder, monkeypatch):
    store = CARStore.open(tmp_path / "store", security_policy, embedder=embedder)
    try:
        records = _generated(60)
        report = store.ingest(records, progress=False)
        assert len(report.added) == 120 and report.errors == []
        assert len(report.new_edges) == 60
        assert chroma_collection(store).count() == 120
        assert len(store.lexical.doc_ids) == 120
        hit = chroma_collection(store).get(where={"cve_id": "CVE-2098-10042"}, include=[])
        assert sorted(hit["ids"]) == ["gen-42-disclosure", "gen-42-release"]

        # An ingest never sends Chroma more records at once than its client accepts.
        collection = chroma_collection(store)
        recorder = RecordingCollection(collection)
        monkeypatch.setattr(store.dense, "collection", recorder)
        monkeypatch.setattr(store._client, "get_max_batch_size", lambda: 7)
        extra = _generated(15, offset=1000)
        ids = [r["doc_id"] for r in extra]
        assert store.ingest(extra, progress=False).added == ids
        assert recorder.batch_sizes == [7, 7, 7, 7, 2]
        assert collection.count() == 150
        got = collection.get(ids=ids, include=["documents", "metadatas"])
        assert sorted(got["ids"]) == sorted(ids)
        by_id = dict(zip(got["ids"], zip(got["documents"], got["metadatas"])))
        for rec in extra:
            document, meta = by_id[rec["doc_id"]]
            assert document == rec["text"]
            assert meta["cve_id"] == rec["scope"]["cve_id"] and meta["doc_type"] == rec["doc_type"]
    finally:
        store.close()


# --------------------------------------------------------------------------- dense search
def test_two_builds_of_one_corpus_rank_dense_queries_identically(tmp_path, security_policy, embedder):
    """Chroma's HNSW builds of one corpus differ; up to EXACT_SEARCH_LIMIT records the dense
    channel searches exactly, so a build in one batch, a build streamed in small batches and
    either reopened all rank alike. On this coarse HNSW (ef 8, M 4) two builds searched by
    Chroma ranked 21 of the 22 queries differently."""
    records = _generated(150)
    vectors = dict(zip([r["doc_id"] for r in records], embedder.encode([r["text"] for r in records])))
    queries = embedder.encode([f"buffer overflow in the header parser of genpkg{i}" for i in range(0, 150, 7)])
    coarse = {"ef_construction": 8, "ef_search": 8, "max_neighbors": 4}

    def rankings(store: CARStore) -> list[list[tuple[str, float]]]:
        assert store.dense.exact
        return [[(h.doc_id, round(h.score, 5)) for h in store.dense.search(q, 30)] for q in queries]

    whole = CARStore.open(tmp_path / "whole", security_policy, embedder=embedder, hnsw=coarse)
    streamed = CARStore.open(tmp_path / "streamed", security_policy, embedder=embedder, hnsw=coarse)
    try:
        whole.ingest(records, progress=False, embeddings=vectors)
        for start in range(0, len(records), 60):
            streamed.ingest(records[start : start + 60], progress=False, embeddings=vectors)
        expected = rankings(whole)
        assert rankings(streamed) == expected
    finally:
        whole.close()
        streamed.close()
    for path in (tmp_path / "whole", tmp_path / "streamed"):
        with CARStore.open(path, embedder=embedder) as reopened:
            assert rankings(reopened) == expected


def test_exact_search_answers_as_chroma_and_gives_way_to_hnsw_past_its_limit(fresh_store, embedder):
    """Same hits and scores as Chroma's HNSW (exact on 45 records at ef 200), with and without
    a metadata filter; a collection grown past the limit is searched by HNSW again."""
    vectors = embedder.encode(["zipcraft archive path traversal", "lodash prototype pollution merge", "court overruled"])
    hnsw = DenseChannel(chroma_collection(fresh_store))  # never loaded: Chroma answers
    for where in (None, {"doc_type": "patch_release"}, {"$or": [{"package": "lodash"}, {"package": "zipcraft"}]}):
        for vector in vectors:
            exact = fresh_store.dense.search(vector, 12, where=where)
            approx = hnsw.search(vector, 12, where=where)
            assert [h.doc_id for h in exact] == [h.doc_id for h in approx]
            np.testing.assert_allclose([h.score for h in exact], [h.score for h in approx], atol=1e-5)
    fresh_store.dense.exact_limit = len(fresh_store) + 1
    fresh_store.ingest(_generated(1), progress=False)
    assert not fresh_store.dense.exact and len(fresh_store) == 47
    assert fresh_store.dense.search(embedder.encode(["genpkg0 header parser bounds checks"])[0], 1)[0].doc_id == "gen-0-release"


def test_the_kept_copy_of_the_vectors_is_chromas_and_a_stale_one_is_not_used(fresh_store, embedder):
    """A reopened store reads its exact-search vectors from dense-exact.npz (reading them from
    Chroma costs ~1 s at 10k), bit for bit what Chroma holds; a copy saved before a record
    changed is ignored and written again."""
    path = fresh_store.path

    def exact_rows(channel: VectorChannel) -> np.ndarray:
        assert channel._exact is not None, "the channel searches exactly"
        return channel._exact.rows_in_use()

    def from_chroma(store: CARStore) -> np.ndarray:
        channel = DenseChannel(chroma_collection(store))
        channel.load([r.doc_id for r in store.records.values()])
        return exact_rows(channel)

    fresh_store.flush()
    before = (path / "dense-exact.npz").read_bytes()
    with CARStore.open(path, embedder=embedder) as reopened:
        assert reopened.dense.exact and np.array_equal(exact_rows(reopened.dense), from_chroma(reopened))
        changed = reopened.get(LODASH_PATCH).model_dump()
        reopened.ingest([{**changed, "text": "lodash 4.17.12 ships a rewritten merge"}], progress=False)
    (path / "dense-exact.npz").write_bytes(before)  # as if the process had died before saving
    with CARStore.open(path, embedder=embedder) as reopened:
        assert np.array_equal(exact_rows(reopened.dense), from_chroma(reopened))
        vector = embedder.encode(["lodash 4.17.12 ships a rewritten merge"])[0]
        assert reopened.dense.search(vector, 1)[0].doc_id == LODASH_PATCH
    assert (path / "dense-exact.npz").read_bytes() != before


# --------------------------------------------------------------------------- scope metadata
def test_scope_keys_are_chroma_metadata_for_stage2_lookups(demo_store):
    collection = chroma_collection(demo_store)
    got = collection.get(where={"cve_id": "CVE-2099-10001"}, include=["metadatas"])
    assert sorted(got["ids"]) == sorted([LODASH_DISCLOSURE, LODASH_PATCH])
    meta = dict(zip(got["ids"], got["metadatas"]))
    assert meta[LODASH_PATCH]["package"] == "lodash"
    assert meta[LODASH_PATCH]["doc_type"] == "patch_release"
    assert meta[LODASH_PATCH]["version"] == "4.17.12"
    assert meta[LODASH_PATCH]["published_at"].startswith("2024-03-19")
    assert meta[LODASH_DISCLOSURE]["doc_type"] == "vulnerability_disclosure"

    patches = collection.get(where={"$and": [{"cve_id": "CVE-2099-10005"}, {"doc_type": "patch_release"}]}, include=[])
    assert sorted(patches["ids"]) == [ZIP_FIRST_FIX, ZIP_FINAL_FIX]

    case = collection.get(where={"case": "dalton_v_northgate_bank_702f3d88"}, include=[])
    assert sorted(case["ids"]) == sorted(
        [
            "law-dalton-v-northgate-standing-ruling",
            "law-dalton-v-northgate-classcert-ruling",
            "law-scotus-2018-concrete-harm-overruling",
            "law-ca7-en-banc-2020-overruling",
        ]
    )
    both = collection.get(
        where={"$and": [{"case": "dalton_v_northgate_bank_702f3d88"}, {"question_id": "Q-standing"}]}, include=[]
    )
    assert sorted(both["ids"]) == ["law-dalton-v-northgate-standing-ruling", "law-scotus-2018-concrete-harm-overruling"]
    # The entity index of the graph agrees with the vector store.
    assert sorted(r.doc_id for r in demo_store.graph.lookup({"cve_id": "CVE-2099-10001"})) == sorted(got["ids"])


def test_lexical_ties_are_broken_by_corpus_order():
    from car_rag.channels import make_lexical_index

    index = make_lexical_index("bm25s")
    texts = ["alpha beta"] * 40 + ["alpha alpha alpha beta"]
    index.build([f"d{i}" for i in range(41)], texts)
    assert [h.doc_id for h in index.search("alpha", 5)] == ["d40", "d0", "d1", "d2", "d3"]


@pytest.mark.parametrize("backend", ["bm25s", "bm25-incremental"])
def test_lexical_search_equals_a_full_sort_of_positive_scores(backend):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from car_rag.channels import make_lexical_index

    words = ["alpha", "beta", "gamma", "delta", "the"]

    @settings(max_examples=80, deadline=None)
    @given(
        texts=st.lists(st.lists(st.sampled_from(words), max_size=6).map(" ".join), min_size=1, max_size=40),
        query=st.lists(st.sampled_from(words + ["zeta"]), min_size=1, max_size=3).map(" ".join),
        k=st.integers(1, 12),
        seed=st.integers(0, 2**16),
    )
    def check(texts, query, k, seed):
        index = make_lexical_index(backend)
        index.build([f"d{i}" for i in range(len(texts))], texts)
        mask = np.random.default_rng(seed).random(len(texts)) < 0.7
        for m in (None, mask):
            scores = index.scores(query) if m is None else np.where(m, index.scores(query, m), 0.0)
            expected = sorted((i for i in range(len(texts)) if scores[i] > 0), key=lambda i: (-scores[i], i))[:k]
            assert [h.doc_id for h in index.search(query, k, mask=m)] == [f"d{i}" for i in expected]

    check()


def test_reingest_after_a_crash_between_vectors_and_records_clears_stale_metadata(tmp_path, security_policy, embedder):
    path = tmp_path / "store"
    store = CARStore.open(path, security_policy, embedder=embedder)
    record: dict[str, Any] = {
        "doc_id": "adv-1",
        "text": "Heap overflow in the parser.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "parsekit", "cve_id": "CVE-2099-40001"},
    }
    # The vectors of a first version were written, then the process died before the records
    # table was: Chroma holds the id with scope keys the record (as re-sent) no longer has.
    stale = {**chroma_metadata(Record(**record)), "cve_id": "CVE-2099-49999", "component": "lexer"}
    chroma_collection(store).add(ids=["adv-1"], embeddings=embedder.encode(["x"]), documents=["x"], metadatas=[stale])
    store.close()

    reopened = CARStore.open(path, embedder=embedder)
    assert reopened.ingest([record], progress=False).added == ["adv-1"]
    meta = chroma_collection(reopened).get(ids=["adv-1"], include=["metadatas"])["metadatas"][0]
    assert meta == chroma_metadata(reopened.get("adv-1"))
    assert chroma_collection(reopened).get(where={"component": "lexer"}, include=[])["ids"] == []
    reopened.close()


def test_an_empty_store_reopened_takes_its_first_ingest(tmp_path, demo_policy, embedder, demo_records):
    """A store closed (or killed) before any record was stored kept an exact-search copy of no
    vectors; the next process must search exactly over what it ingests."""
    path = tmp_path / "store"
    CARStore.open(path, demo_policy, embedder=embedder).close()
    store = CARStore.open(path, embedder=embedder)
    try:
        assert store.dense.exact
        assert len(store.ingest(demo_records, progress=False).added) == 45
        zip_fix = store.get(ZIP_FINAL_FIX)
        assert store.dense.exact and store.dense.search(embedder.encode([zip_fix.text])[0], 1)[0].doc_id == ZIP_FINAL_FIX
    finally:
        store.close()


def test_a_stored_record_that_no_longer_validates_is_named_on_open(tmp_path, security_policy, embedder):
    import sqlite3

    store = CARStore.open(tmp_path / "s", security_policy, embedder=embedder)
    store.ingest(
        [{"doc_id": "old", "text": "x", "doc_type": "vulnerability_disclosure", "scope": {"package": "p", "cve_id": "CVE-1"}}],
        progress=False,
    )
    store.close()
    # As if written before empty scope values were rejected.
    db = sqlite3.connect(tmp_path / "s" / "records.sqlite")
    body = json.loads(db.execute("SELECT body FROM records").fetchone()[0])
    body["scope"]["package"] = ""
    db.execute("UPDATE records SET body = ?", (json.dumps(body),))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=r"stored record 'old' no longer validates \(scope"):
        CARStore.open(tmp_path / "s", security_policy, embedder=embedder)


# --------------------------------------------------------------------------- edge confidence
WEAK: list[dict[str, Any]] = [
    {"doc_id": "memo-1", "text": "The first travel memo.", "doc_type": "memo"},
    {
        "doc_id": "memo-2",
        "text": "A later travel memo.",
        "doc_type": "memo",
        "supersedes": [{"id": "memo-1", "confidence": 0.35}],
    },
]


def test_edge_confidence_is_persisted_and_read_back(tmp_path, demo_policy, embedder):
    path = tmp_path / "store"
    with CARStore.open(path, demo_policy, embedder=embedder) as store:
        report = store.ingest(WEAK, progress=False)
        assert report.new_edges == [Edge("memo-2", "memo-1", "explicit", 0.35)]
    with CARStore.open(path, embedder=embedder) as reopened:
        assert reopened.graph.superseders("memo-1") == [Edge("memo-2", "memo-1", "explicit", 0.35)]
        assert reopened.records["memo-2"].supersedes_confidence == {"memo-1": 0.35}


def test_a_store_from_before_edge_confidence_opens_with_certain_edges(tmp_path, demo_policy, embedder):
    """Its edges table has no confidence column: the store adds it, every old edge certain."""
    import sqlite3

    path = tmp_path / "store"
    certain = [WEAK[0], {**WEAK[1], "supersedes": ["memo-1"]}]
    with CARStore.open(path, demo_policy, embedder=embedder) as store:
        store.ingest(certain, progress=False)
    db = sqlite3.connect(path / "records.sqlite")
    with db:
        db.executescript(
            """
            CREATE TABLE old_edges (superseder TEXT NOT NULL, target TEXT NOT NULL, rule TEXT NOT NULL,
                                    PRIMARY KEY (superseder, target));
            INSERT INTO old_edges SELECT superseder, target, rule FROM edges;
            DROP TABLE edges;
            ALTER TABLE old_edges RENAME TO edges;
            """
        )
    db.close()
    with CARStore.open(path, embedder=embedder) as reopened:
        assert reopened.graph.superseders("memo-1") == [Edge("memo-2", "memo-1", "explicit", 1.0)]
        reopened.ingest([{**WEAK[1], "text": "A later travel memo, revised."}], progress=False)
        assert reopened.graph.superseders("memo-1") == [Edge("memo-2", "memo-1", "explicit", 0.35)]


def test_disputed_pairs_are_persisted_and_read_back(tmp_path, embedder):
    from car_rag.policy import load_policy

    policy = load_policy("legal-precedent")
    rulings = [
        {
            "doc_id": "supreme-2001",
            "text": "The supreme court holds X.",
            "doc_type": "ruling",
            "published_at": "2001-01-01",
            "scope": {"case": "c1", "question_id": "Q1"},
            "metadata": {"court_level": "supreme"},
        },
        {
            "doc_id": "district-2010",
            "text": "The district court overrules X.",
            "doc_type": "overruling",
            "published_at": "2010-01-01",
            "scope": {"case": "c1", "question_id": "Q1"},
            "metadata": {"court_level": "district"},
        },
    ]
    with CARStore.open(tmp_path / "store", policy, embedder=embedder) as store:
        store.ingest(rulings, progress=False)
        disputed = sorted(store.graph.disputed_edges(), key=lambda e: e.superseder)
        assert [(e.superseder, e.target) for e in disputed] == [
            ("district-2010", "supreme-2001"),
            ("supreme-2001", "district-2010"),
        ]
    with CARStore.open(tmp_path / "store", embedder=embedder) as reopened:
        assert sorted(reopened.graph.disputed_edges(), key=lambda e: e.superseder) == disputed
        assert reopened.graph.edges() == []


def test_a_store_built_before_the_court_hierarchy_opens_under_the_upgraded_policy(tmp_path, embedder):
    """Adding hierarchy rules changes no edge among records without levels: the store takes the
    new policy; one whose records carry a level must be rebuilt."""
    from car_rag.policy import load_policy

    upgraded = load_policy("legal-precedent")
    before = upgraded.model_copy(update={"rules": upgraded.rules[:-1], "hierarchies": {}})
    ruling = {"doc_id": "r1", "text": "A ruling.", "doc_type": "ruling", "scope": {"case": "c1", "question_id": "Q1"}}
    with CARStore.open(tmp_path / "plain", before, embedder=embedder) as store:
        store.ingest([ruling], progress=False)
    with CARStore.open(tmp_path / "plain", upgraded, embedder=embedder) as store:
        assert store.policy == upgraded and len(store) == 1
    assert json.loads((tmp_path / "plain" / "car-store.json").read_text())["policy"]["hierarchies"]
    with CARStore.open(tmp_path / "levels", before, embedder=embedder) as store:
        store.ingest([{**ruling, "metadata": {"court_level": "district"}}], progress=False)
    with pytest.raises(StoreError, match=r"holds records with levels or types that the rules \[.higher_court_binds.\]"):
        CARStore.open(tmp_path / "levels", upgraded, embedder=embedder)


def test_a_store_built_before_the_blackout_exception_opens_under_the_upgraded_policy(tmp_path, embedder):
    """An added exception rule pairs no stored record of other types: the store takes the new
    policy; one holding a record of the exception's type must be rebuilt."""
    from car_rag.policy import Policy, load_policy

    upgraded = load_policy("sec-204a1")
    before = Policy.model_validate({**upgraded.model_dump(), "rules": [r.model_dump() for r in upgraded.rules[:-1]]})
    scope = {"employee": "E1", "ticker": "ACME"}
    blackout = {"doc_id": "b1", "text": "Blackout on ACME.", "doc_type": "blackout_announced", "scope": scope}
    with CARStore.open(tmp_path / "plain", before, embedder=embedder) as store:
        store.ingest([blackout], progress=False)
    with CARStore.open(tmp_path / "plain", upgraded, embedder=embedder) as store:
        assert store.policy == upgraded and len(store) == 1
    grant = {"doc_id": "g1", "text": "Exception granted.", "doc_type": "trading_exception_granted", "scope": scope}
    with CARStore.open(tmp_path / "typed", before, embedder=embedder) as store:
        store.ingest([blackout, grant], progress=False)
    with pytest.raises(StoreError, match=r"the rules \['blackout_exception'\] of the policy 'sec-204a1'"):
        CARStore.open(tmp_path / "typed", upgraded, embedder=embedder)
