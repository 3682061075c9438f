"""Streaming supersession: records arrive one at a time into a live store.

Checked against from-scratch rebuilds: the incremental BM25 index scores as a freshly
built bm25s index does, and after every insert the store's graph, frontier and channels
equal what rebuilding from the same records gives. Queries running during inserts never
see half an insert.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from car_rag.channels import make_lexical_index
from car_rag.graph import AuthorityGraph
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore
from helpers_records import chroma_collection, day, edge_set

WORDS = [
    "overflow",
    "heap",
    "patch",
    "release",
    "token",
    "parser",
    "remote",
    "crash",
    "fix",
    "the",
    "a",
    "cache",
    "session",
    "leak",
    "header",
    "proxy",
    "bypass",
    "auth",
    "upgrade",
    "notes",
]
texts = st.lists(st.sampled_from(WORDS + ["CVE-2024-0001", "x1", "ünïcode", ""]), min_size=0, max_size=12).map(" ".join)


def _bm25s_scores(ids: list[str], docs: list[str], query: str) -> np.ndarray:
    fresh = make_lexical_index("bm25s")
    fresh.build(ids, docs)
    return fresh.scores(query)


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(texts, min_size=1, max_size=30),
    split=st.integers(0, 30),
    step=st.integers(1, 5),
    query=st.lists(st.sampled_from(WORDS + ["unknownword"]), min_size=1, max_size=4).map(" ".join),
)
def test_incremental_bm25_scores_as_a_fresh_bm25s_build(docs: list[str], split: int, step: int, query: str) -> None:
    ids = [f"d{i}" for i in range(len(docs))]
    index = make_lexical_index("bm25-incremental")
    split = min(split, len(docs))
    index.build(ids[:split], docs[:split])
    for start in range(split, len(docs), step):
        index.add(ids[start : start + step], docs[start : start + step])
    assert index.doc_ids == ids
    np.testing.assert_allclose(index.scores(query), _bm25s_scores(ids, docs, query), rtol=1e-5, atol=1e-6)


def test_incremental_bm25_survives_save_and_load_and_keeps_growing(tmp_path) -> None:
    from car_rag.channels import load_lexical_index

    docs = [f"heap overflow in parser {i}" if i % 3 else f"session token leak {i}" for i in range(50)]
    ids = [f"d{i}" for i in range(50)]
    index = make_lexical_index("bm25-incremental")
    for i in range(0, 40, 4):
        index.add(ids[i : i + 4], docs[i : i + 4])
    index.save(tmp_path)
    loaded = load_lexical_index(tmp_path)
    loaded.add(ids[40:], docs[40:])
    np.testing.assert_allclose(loaded.scores("heap token leak"), _bm25s_scores(ids, docs, "heap token leak"), rtol=1e-5)
    assert [h.doc_id for h in loaded.search("session token", 5)] == [h.doc_id for h in _search_fresh(ids, docs, "session token")]


def _search_fresh(ids, docs, query):
    fresh = make_lexical_index("bm25s")
    fresh.build(ids, docs)
    return fresh.search(query, 5)


# --------------------------------------------------------------------------- live store


def _record(i: int, kind: str, package: str, cve: str, at: int, supersedes: list[str] | None = None) -> dict:
    text = {
        "vulnerability_disclosure": f"{cve}: remote heap overflow in {package} lets attackers crash the parser",
        "patch_release": f"Release notes {at}: performance work, refreshed docs and dependency upgrades",
    }[kind]
    return {
        "doc_id": f"{package}:{kind}:{i}",
        "text": text,
        "doc_type": kind,
        "published_at": day(at).isoformat(),
        "scope": {"package": package, "cve_id": cve},
        **({"supersedes": supersedes} if supersedes else {}),
    }


def _live_store(tmp_path_factory, security_policy, embedder) -> CARStore:
    return CARStore.open(tmp_path_factory.mktemp("live"), security_policy, embedder=embedder)


def test_single_inserts_report_what_they_void_and_queries_see_the_new_frontier(
    tmp_path_factory, security_policy, embedder
) -> None:
    store = _live_store(tmp_path_factory, security_policy, embedder)
    retriever = ControllingAuthorityRetriever(store, anchors="bm25", k1=5, depth=20)
    disclosure = _record(0, "vulnerability_disclosure", "libfoo", "CVE-2024-1111", 1)
    assert store.ingest([disclosure], progress=False).newly_superseded == []
    assert [r.status for r in retriever.retrieve("libfoo heap overflow")] == ["active"]

    patch1 = _record(1, "patch_release", "libfoo", "CVE-2024-1111", 5)
    report = store.ingest([patch1], progress=False)
    assert report.newly_superseded == [disclosure["doc_id"]]
    assert set(report.timings_s) >= {"embed", "graph", "chroma", "records", "bm25"}
    result = retriever.retrieve("libfoo heap overflow")
    assert [(r.doc_id, r.status) for r in result] == [(patch1["doc_id"], "active"), (disclosure["doc_id"], "superseded")]

    patch2 = _record(2, "patch_release", "libfoo", "CVE-2024-1111", 9)
    report = store.ingest([patch2], progress=False)
    assert report.newly_superseded == sorted([disclosure["doc_id"], patch1["doc_id"]])
    assert [r.doc_id for r in retriever.retrieve("libfoo heap overflow").active] == [patch2["doc_id"]]
    assert store.lexical.backend == "bm25-incremental" and len(store.lexical.doc_ids) == 3


def test_a_store_reopened_after_unsaved_inserts_catches_its_index_up(tmp_path, security_policy, embedder) -> None:
    store = CARStore.open(tmp_path, security_policy, embedder=embedder)
    first = [_record(i, "vulnerability_disclosure", f"pkg{i}", f"CVE-2024-{1000 + i}", i) for i in range(20)]
    store.ingest(first, progress=False)  # saved: the whole index is new
    late = _record(99, "patch_release", "pkg3", "CVE-2024-1003", 50)
    store.ingest([late], progress=False)  # 1 of 21: not saved yet
    assert store.indexes.unsaved == 1
    # No close(): as if the process died. The records table is the log the index catches up from.
    reopened = CARStore.open(tmp_path, embedder=embedder)
    assert reopened.lexical.doc_ids == [r["doc_id"] for r in first] + [late["doc_id"]]
    ids = reopened.lexical.doc_ids
    texts = [reopened.records[d].text for d in ids]
    np.testing.assert_allclose(
        reopened.lexical.scores("pkg3 release notes"), _bm25s_scores(ids, texts, "pkg3 release notes"), rtol=1e-5
    )
    assert reopened.graph.is_superseded(first[3]["doc_id"])
    reopened.close()
    store.close()


class Killed(BaseException):
    """The process dying at this point (SIGKILL cannot be caught; the test stops the save here)."""


def test_a_store_killed_while_saving_its_index_reopens_with_a_right_one(tmp_path, security_policy, embedder) -> None:
    store = CARStore.open(tmp_path, security_policy, embedder=embedder)
    first = [_record(i, "vulnerability_disclosure", f"pkg{i}", f"CVE-2024-{1000 + i}", i) for i in range(20)]
    store.ingest(first, progress=False)
    more = [_record(50 + i, "patch_release", f"pkg{i}", f"CVE-2024-{1000 + i}", 40 + i) for i in range(5)]
    save_body = store.lexical._save_body

    def dies_after_the_body(folder) -> None:
        save_body(folder)  # the postings of all 25 records are on disk; what names them is not yet
        raise Killed

    store.lexical._save_body = dies_after_the_body  # type: ignore[method-assign]  # a fault, in this store only
    with pytest.raises(Killed):
        store.ingest(more, progress=False)  # 5 of 25: the index is saved after the records commit
    reopened = CARStore.open(tmp_path, embedder=embedder)
    ids = [r["doc_id"] for r in first + more]
    assert reopened.lexical.doc_ids == ids
    texts = [reopened.records[d].text for d in ids]
    np.testing.assert_allclose(
        reopened.lexical.scores("pkg3 release notes"), _bm25s_scores(ids, texts, "pkg3 release notes"), rtol=1e-5
    )
    reopened.close()


# One operation per step: insert the next record of a shuffled pool, or query a package.
POOL = (
    [_record(i, "vulnerability_disclosure", f"p{i % 3}", f"CVE-2024-{i % 4}", i) for i in range(6)]
    + [_record(10 + i, "patch_release", f"p{i % 3}", f"CVE-2024-{i % 4}", 20 + 3 * i) for i in range(6)]
    + [_record(30, "patch_release", "p0", "CVE-2024-9", 40, supersedes=["p1:vulnerability_disclosure:1"])]
)


@pytest.fixture(scope="module")
def pool_vectors(embedder) -> dict[str, np.ndarray]:
    """The pool's MiniLM vectors, encoded once: each example then pays for Chroma, not the model."""
    return dict(zip([r["doc_id"] for r in POOL], embedder.encode([r["text"] for r in POOL])))


# Each example streams a random sub-corpus of the pool (up to all of it) in random order and
# queries after every insert: small stores keep a hundred examples cheap.
STEPS = st.lists(
    st.tuples(st.integers(0, len(POOL) - 1), st.integers(0, 2)), min_size=1, max_size=len(POOL), unique_by=lambda s: s[0]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_interleaved_inserts_and_queries_match_a_rebuild_after_every_step(
    steps, tmp_path_factory, security_policy, embedder, pool_vectors
) -> None:
    with _live_store(tmp_path_factory, security_policy, embedder) as store:
        retriever = ControllingAuthorityRetriever(store, anchors="hybrid", k1=20, depth=20)
        inserted: list[dict] = []
        for position, package in steps:
            record = POOL[position]
            before = {d for d in store.records if store.graph.is_superseded(d)}
            report = store.ingest([record], progress=False, embeddings=pool_vectors)
            inserted.append(record)
            after = {d for d in store.records if store.graph.is_superseded(d)}
            assert after - before <= set(report.newly_superseded) <= after

            rebuilt = AuthorityGraph(security_policy)
            for r in sorted(inserted, key=lambda r: r["doc_id"]):
                rebuilt.add(store.records[r["doc_id"]])
            assert edge_set(store.graph) == edge_set(rebuilt)
            assert store.graph.frontier(store.records) == rebuilt.frontier(rebuilt.records)
            ids = [r["doc_id"] for r in inserted]
            assert store.lexical.doc_ids == ids and chroma_collection(store).count() == len(ids)
            query = f"p{package} heap overflow release notes"
            texts = [store.records[d].text for d in ids]
            np.testing.assert_allclose(store.lexical.scores(query), _bm25s_scores(ids, texts, query), rtol=1e-5, atol=1e-6)
            # The query after the insert sees the new frontier: every record it returns has the
            # status a rebuild gives it among what it returned, and nothing superseded is active.
            result = retriever.retrieve(query)
            returned = [r.doc_id for r in result]
            expected_active = rebuilt.frontier(returned)
            assert {r.doc_id for r in result.active} == expected_active
            for item in result:
                assert rebuilt.ancestors(item.doc_id) <= set(returned)  # the closure came along


def test_queries_during_inserts_never_see_half_an_insert(tmp_path_factory, security_policy, embedder) -> None:
    store = _live_store(tmp_path_factory, security_policy, embedder)
    chains = 6
    store.ingest(
        [_record(c, "vulnerability_disclosure", f"lib{c}", f"CVE-2024-{2000 + c}", c) for c in range(chains)], progress=False
    )
    retriever = ControllingAuthorityRetriever(store, anchors="hybrid", k1=10, depth=30)
    stop = threading.Event()
    problems: list[str] = []
    crashes: list[BaseException] = []
    checks = {"during": 0}
    writing = threading.Event()

    def reader() -> None:
        try:
            read_until_stopped()
        except BaseException as exc:  # pytest would only warn about a dead thread
            crashes.append(exc)

    def read_until_stopped() -> None:
        while not stop.is_set():
            with store.lock.read():
                sizes = (len(store.graph), len(store.lexical.doc_ids), chroma_collection(store).count())
                if writing.is_set():
                    checks["during"] += 1
            if len(set(sizes)) != 1:
                problems.append(f"channels disagree: graph/bm25/chroma = {sizes}")
            result = retriever.retrieve("remote heap overflow crash release notes")
            by_scope: dict[tuple, list] = {}
            for r in result:
                by_scope.setdefault(tuple(sorted(r.record.scope.items())), []).append(r)
            for scope, members in by_scope.items():
                active = [m.doc_id for m in members if m.status == "active"]
                if len(active) != 1:  # every chain is linear: exactly one record controls
                    problems.append(f"{scope}: active {active}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    writing.set()
    for step in range(1, 5):
        for c in range(chains):
            store.ingest(
                [_record(10 * step + c, "patch_release", f"lib{c}", f"CVE-2024-{2000 + c}", 10 * step + c)], progress=False
            )
    writing.clear()
    stop.set()
    for t in threads:
        t.join()
    assert not crashes, crashes
    assert not problems, problems[:5]
    assert checks["during"] > 0, "no query overlapped the inserts: the test proved nothing"
    final = retriever.retrieve("remote heap overflow crash release notes")
    assert {r.doc_id for r in final.active} <= {f"lib{c}:patch_release:{40 + c}" for c in range(chains)}


def test_concurrent_ingests_of_the_same_record_store_it_once(tmp_path_factory, security_policy, embedder) -> None:
    store = _live_store(tmp_path_factory, security_policy, embedder)
    store.ingest([_record(0, "vulnerability_disclosure", "libdup", "CVE-2024-7000", 1)], progress=False)
    patch = _record(1, "patch_release", "libdup", "CVE-2024-7000", 5)
    vector = {patch["doc_id"]: embedder.encode([patch["text"]])[0]}
    # Every thread has read the stored fingerprints (none for the patch) before any writes.
    all_read = threading.Barrier(4, timeout=120)  # a thread that never arrives breaks it: the test fails, it does not hang
    encode = store._ingest.vectors
    store._ingest.vectors = lambda *a, **kw: (all_read.wait(), encode(*a, **kw))[1]  # type: ignore[method-assign]
    reports = []

    def ingest() -> None:
        reports.append(store.ingest([patch], progress=False, embeddings=vector))

    threads = [threading.Thread(target=ingest) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert sorted(len(r.added) for r in reports) == [0, 0, 0, 1]  # one insert, three no-ops
    assert sum(r.unchanged for r in reports) == 3
    assert store.lexical.doc_ids.count(patch["doc_id"]) == 1 and chroma_collection(store).count() == 2
    assert [r.newly_superseded for r in reports if r.added] == [["libdup:vulnerability_disclosure:0"]]
