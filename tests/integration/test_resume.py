"""Chunked ingest: each chunk is committed before the next is embedded, a SIGKILL keeps the
committed chunks in a store that opens consistent, and the same command run again resumes,
embedding only what was not committed. Real MiniLM, real embedded Chroma, the real CLI in a
child process; the corpus is the scale benchmark's seeded generator (chains, shared scopes,
explicit ``supersedes``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

import car_rag
from car_rag import CARStore, ControllingAuthorityRetriever, Embedder
from car_rag.adapters import AuthorityGraph
from car_rag.channels import make_lexical_index
from car_rag_evals.perf.corpus import generate
from helpers_records import chroma_collection, edge_set

ROOT = Path(car_rag.__file__).resolve().parents[1]
"""The checkout whose car_rag the tests import: the child CLI runs the same one."""
QUERIES = [
    "remote code execution in the object loader",
    "path traversal when extracting archives",
    "which release fixes the SQL injection in the query builder",
]


def committed(store: Path) -> int:
    """Records the store's SQLite file holds, read as another process would (0 until it has a records table)."""
    try:
        with closing(sqlite3.connect(store / "records.sqlite")) as db:
            return int(db.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:  # the child is still creating it
        return 0


def vector_ids(store: CARStore) -> set[str]:
    return set(chroma_collection(store).get(include=[])["ids"])


def bm25_matches_a_fresh_build(store: CARStore) -> None:
    """BM25 indexes every record once and scores as an index built afresh over them in its order."""
    ids = store.lexical.doc_ids
    assert sorted(ids) == sorted(store.records)
    fresh = make_lexical_index("bm25-incremental")
    fresh.build(ids, [store.records[d].text for d in ids])
    for query in QUERIES:
        np.testing.assert_allclose(store.lexical.scores(query), fresh.scores(query), rtol=1e-5, atol=1e-6)


def edges_match_a_rebuild(store: CARStore) -> None:
    """The store's edges (read back from its edges table on open) equal a graph built afresh."""
    rebuilt = AuthorityGraph(store.policy)
    for record in store.records.values():
        rebuilt.add(record)
    assert edge_set(store.graph) == edge_set(rebuilt)


def write_jsonl(path: Path, records: Sequence[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- a SIGKILL, then the same command
@pytest.mark.timeout(900)  # 600 records embedded by a CLI run and its resumption, stored again by an uninterrupted build
def test_a_killed_ingest_keeps_whole_chunks_and_the_same_command_resumes(tmp_path, security_policy, embedder):
    # Eight chunks: the kill comes at the first commit, seven chunks (over a CPU second each) still to
    # embed; more records would only embed more (20 ms of CPU each).
    records = generate(600, seed=19, queries=1).records
    ids = [r["doc_id"] for r in records]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    chunk = 75
    store = tmp_path / "store"
    command = [
        sys.executable,
        "-m",
        "car_rag",
        "ingest",
        str(corpus),
        "--store",
        str(store),
        "--policy",
        "security-advisory",
        "--quiet",
        "--chunk-size",
        str(chunk),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None and not (store / "records.sqlite").is_file():
        time.sleep(0.02)
    while time.monotonic() < deadline and child.poll() is None and not committed(store):
        time.sleep(0.02)
    assert child.poll() is None, f"the ingest ended before it was killed: {child.communicate()}"
    os.kill(child.pid, signal.SIGKILL)
    child.communicate(timeout=60)
    kept = committed(store)
    assert kept % chunk == 0 and chunk <= kept < len(records), kept  # whole chunks, one transaction each

    # What the kill left, opened by a copy (the store itself goes to the re-run as the kill left it).
    crashed = CARStore.open(shutil.copytree(store, tmp_path / "crashed"), embedder=embedder)
    try:
        assert list(crashed.records) == ids[:kept]
        vectors = vector_ids(crashed)
        assert set(ids[:kept]) <= vectors  # every record has its vector ...
        assert vectors - set(ids[:kept]) <= set(ids[kept : kept + chunk])  # ... and no more than the cut chunk's are orphans
        bm25_matches_a_fresh_build(crashed)
        edges_match_a_rebuild(crashed)
        retriever = ControllingAuthorityRetriever(crashed, anchors="hybrid")
        assert {r.doc_id for q in QUERIES for r in retriever.retrieve(q)} <= set(ids[:kept])
    finally:
        crashed.close()

    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    # Only what was not committed was embedded: the committed records were skipped before encoding.
    assert f"{kept} records were already stored: skipped, not embedded again" in again.stdout
    assert f"{len(records) - kept} added, 0 updated, {kept} unchanged, 0 rejected" in again.stdout

    resumed = CARStore.open(store, embedder=embedder)
    uninterrupted = CARStore.open(tmp_path / "uninterrupted", security_policy, embedder=embedder)
    try:
        assert vector_ids(resumed) == set(ids)  # the cut chunk's orphans were written over
        vectors = chroma_collection(resumed).get(ids=ids, include=["embeddings"])
        sample = vectors["ids"][::15]
        np.testing.assert_allclose(
            [vectors["embeddings"][i] for i in range(0, len(ids), 15)],
            embedder.encode([resumed.get(d).text for d in sample]),
            atol=1e-5,
        )
        # An ingest that nothing interrupted, given the same vectors (the model's work is checked above).
        report = uninterrupted.ingest(
            corpus, progress=False, chunk_size=chunk, embeddings=dict(zip(vectors["ids"], vectors["embeddings"]))
        )
        assert report.errors == [] and len(report.added) == len(records)
        assert resumed.records == uninterrupted.records and list(resumed.records) == ids
        assert edge_set(resumed.graph) == edge_set(uninterrupted.graph)
        assert resumed.lexical.doc_ids == uninterrupted.lexical.doc_ids == ids  # the input's order, kill or not
        bm25_matches_a_fresh_build(resumed)
    finally:
        resumed.close()
        uninterrupted.close()


# --------------------------------------------------------------------------- chunks change nothing stored
CORPUS = generate(520, seed=21, queries=1).records
"""The first 400 are a corpus; the other 120 arrive later, in :func:`second_batch`."""


def cyclic(records: list[dict]) -> dict:
    """A disclosure claiming to void the first patch release that (by rule) voids it: it closes a cycle."""
    patch = next(r for r in records if r["doc_type"] == "patch_release")
    return {
        "doc_id": "cyclic-disclosure",
        "text": "The fix is incomplete: the flaw is back.",
        "doc_type": "vulnerability_disclosure",
        "scope": patch["scope"],
        "supersedes": [patch["doc_id"]],
    }


def second_batch() -> list[dict]:
    """New records, unchanged ones, replaced ones and one closing a cycle, mixed."""
    records, more = CORPUS[:400], CORPUS[400:]
    replaced = [{**r, "text": r["text"] + " (amended)"} for r in records[50:400:35]]
    return more[:60] + records[:30] + replaced[:5] + [cyclic(records)] + replaced[5:] + more[60:]


@pytest.fixture(scope="module")
def vector_of(embedder) -> dict[str, np.ndarray]:
    """Every text's vector, by text, encoded once."""
    texts = sorted({r["text"] for r in CORPUS + second_batch()})
    return dict(zip(texts, embedder.encode(texts)))


def test_chunked_ingest_stores_what_one_chunk_stores(tmp_path, security_policy, embedder, vector_of):
    by_chunks = CARStore.open(tmp_path / "chunks", security_policy, embedder=embedder)
    whole = CARStore.open(tmp_path / "whole", security_policy, embedder=embedder)
    try:
        for batch in (CORPUS[:400], second_batch()):
            given = {r["doc_id"]: vector_of[r["text"]] for r in batch}  # the same vectors for both stores
            chunked_report = by_chunks.ingest(batch, progress=False, embeddings=given, chunk_size=37)
            whole_report = whole.ingest(batch, progress=False, embeddings=given, chunk_size=10**6)
            for report in (chunked_report, whole_report):
                assert set(report.timings_s) >= {"parse", "scope", "embed", "graph", "chroma", "records", "bm25"}
            assert chunked_report.added == whole_report.added and chunked_report.updated == whole_report.updated
            assert chunked_report.unchanged == whole_report.unchanged
            assert [(e.doc_id, e.field) for e in chunked_report.errors] == [(e.doc_id, e.field) for e in whole_report.errors]
            assert chunked_report.new_edges == whole_report.new_edges
        # The second batch exercised what it was built for.
        assert (chunked_report.unchanged, len(chunked_report.updated), len(chunked_report.added)) == (30, 10, 120)
        assert [(e.doc_id, e.field) for e in chunked_report.errors] == [("cyclic-disclosure", "supersedes")]

        assert by_chunks.records == whole.records and list(by_chunks.records) == list(whole.records)
        assert edge_set(by_chunks.graph) == edge_set(whole.graph)
        assert by_chunks.lexical.doc_ids == whole.lexical.doc_ids
        bm25_matches_a_fresh_build(by_chunks)
        retrievers = [ControllingAuthorityRetriever(s, anchors="hybrid") for s in (by_chunks, whole)]
        for query in QUERIES:
            chunked, one = ([(r.doc_id, r.status) for r in retriever.retrieve(query)] for retriever in retrievers)
            assert chunked == one and chunked
    finally:
        by_chunks.close()
        whole.close()


# --------------------------------------------------------------------------- one chunk's vectors at a time
class CountingEmbedder(Embedder):
    """The real MiniLM, noting for each encode call how many texts it got and how many records
    the store had committed to SQLite by then."""

    def __init__(self, store: Path):
        super().__init__()
        self.store = store
        self.calls: list[tuple[int, int]] = []

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.calls.append((len(texts), committed(self.store)))
        return super().encode(texts, show_progress=show_progress)


def test_each_chunk_is_embedded_after_the_one_before_is_committed(tmp_path, security_policy, vector_of):
    records = CORPUS[:300]
    path = tmp_path / "store"
    counting = CountingEmbedder(path)
    store = CARStore.open(path, security_policy, embedder=counting)
    try:
        given = {r["doc_id"]: vector_of[r["text"]] for r in records[::3]}  # a third come with their vectors
        report = store.ingest(records, progress=False, embeddings=given, chunk_size=100)
        assert report.added == [r["doc_id"] for r in records]
        # One call per chunk, with the chunk's records that need a vector, after the chunk before was committed.
        assert counting.calls == [(sum(r["doc_id"] not in given for r in records[s : s + 100]), s) for s in (0, 100, 200)]
        stored = chroma_collection(store).get(ids=list(given)[:20], include=["embeddings"])
        np.testing.assert_allclose(stored["embeddings"], [given[d] for d in stored["ids"]], atol=1e-5)

        # An atomic batch is one chunk, whatever chunk_size says: the cycle in its last record keeps all of it out.
        counting.calls.clear()
        batch = CORPUS[300:310] + [cyclic(records)]
        report = store.ingest(batch, progress=False, atomic=True, chunk_size=2)
        assert [(e.doc_id, e.field) for e in report.errors] == [("cyclic-disclosure", "supersedes")] and report.added == []
        assert counting.calls == [(len(batch), 300)] and committed(path) == len(store) == 300

        # strict refuses the whole input before embedding or writing any of it.
        counting.calls.clear()
        unscoped = {**batch[0], "doc_id": "unscoped-release", "doc_type": "patch_release", "scope": {"package": "x"}}
        report = store.ingest(batch[:-1] + [unscoped], progress=False, strict=True, chunk_size=2)
        assert report.strict_refused and report.added == []
        assert counting.calls == [] and committed(path) == len(store) == 300
    finally:
        store.close()
