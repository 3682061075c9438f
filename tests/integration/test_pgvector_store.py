"""A shared store whose vectors live in its own PostgreSQL (``vector_store="pgvector"``): a real
PostgreSQL with pgvector (``car_rag.postgres.fixture``'s fresh databases), real MiniLM,
the demo corpus.

Small stores are searched exactly in memory, as on Chroma; the SQL path (the HNSW index) answers
past the exact limit, which these tests lower."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, Embedder, Policy, Record
from car_rag.cli import main
from car_rag.eligibility import CallerContext
from car_rag.postgres import PgVectorChannel
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag.records import shown_id
from car_rag.store import StoreError
from helpers_records import pgvector_channel, shared_log
from servers import fetch_one

K = 10


@pytest.fixture(scope="module")
def new_database(postgres: ThrowawayPostgres) -> Callable[[], str]:
    """Fresh databases (their ``postgresql://`` URLs) on the session's server."""
    return postgres.new_database


@pytest.fixture(scope="module")
def pg_demo(new_database, tmp_path_factory, demo_policy: Policy, embedder: Embedder, demo_corpus_path: Path) -> Iterator[str]:
    """The demo corpus in a pgvector store (its database's URL)."""
    url = new_database()
    with CARStore.open(
        tmp_path_factory.mktemp("pg-demo"), demo_policy, embedder=embedder, authority_url=url, vector_store="pgvector"
    ) as store:
        report = store.ingest(demo_corpus_path, progress=False)
        assert report.errors == [] and len(report.added) == 45 and report.warnings == []
    yield url


def _past_the_limit(store: CARStore) -> CARStore:
    store.dense.exact_limit = 0
    assert not store.dense.exact and isinstance(store.dense, PgVectorChannel)
    return store


def _top(result, k: int = 5) -> list[tuple[str, str]]:
    return [(r.doc_id, r.status) for r in result.top(k)]


def test_the_store_remembers_pgvector_and_keeps_every_vector_in_the_commit(pg_demo, tmp_path, embedder) -> None:
    with CARStore.open(tmp_path, authority_url=pg_demo, embedder=embedder) as store:
        assert store.config["vector_store"] == "pgvector" and store.config["vector_dimension"] == 384
        assert len(store) == 45 and store.dense.exact and store.drain_outbox() == 0
    with psycopg.connect(pg_demo) as conn:
        rows, embedded, pending = fetch_one(
            conn.execute("SELECT count(*), count(embedding), count(*) FILTER (WHERE vector_pending) FROM car_rag.records")
        )
        dimension = fetch_one(conn.execute("SELECT vector_dims(embedding) FROM car_rag.records LIMIT 1"))[0]
        [index] = fetch_one(conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'records_embedding'"))
    assert (rows, embedded, pending, dimension) == (45, 45, 0, 384)
    assert "hnsw (embedding vector_cosine_ops)" in index and "m='32'" in index and "ef_construction='200'" in index


def test_demo_queries_rank_as_on_an_embedded_chroma_store(pg_demo, tmp_path, demo_store, demo_queries, embedder) -> None:
    """Exact search (45 records) on either engine: the same top 5, statuses included, in hybrid and
    dense-only retrieval."""
    with CARStore.open(tmp_path, authority_url=pg_demo, embedder=embedder) as store:
        assert store.dense.exact
        for anchors in ("hybrid", "dense"):
            ours = ControllingAuthorityRetriever(store, anchors=anchors)
            chroma = ControllingAuthorityRetriever(demo_store, anchors=anchors)
            for q in demo_queries:
                assert _top(ours.retrieve(q["query"])) == _top(chroma.retrieve(q["query"])), (anchors, q["query_id"])


def test_past_the_exact_limit_the_hnsw_index_answers_as_exact_search(pg_demo, tmp_path, demo_queries, embedder) -> None:
    """The SQL path (HNSW at the default ef_search) finds the exact top 10 of every demo query, with
    the same scores, and the retriever over it answers as over exact search."""
    exact = CARStore.open(tmp_path / "exact", authority_url=pg_demo, embedder=embedder, follow=False)
    hnsw = _past_the_limit(CARStore.open(tmp_path / "hnsw", authority_url=pg_demo, embedder=embedder, follow=False))
    try:
        for q in demo_queries:
            vector = embedder.encode([q["query"]])[0]
            want, got = exact.dense.search(vector, K), hnsw.dense.search(vector, K)
            assert [h.doc_id for h in got] == [h.doc_id for h in want], q["query_id"]
            np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
            assert _top(ControllingAuthorityRetriever(hnsw).retrieve(q["query"])) == _top(
                ControllingAuthorityRetriever(exact).retrieve(q["query"])
            )
        assert pgvector_channel(hnsw).exact_scans == 0
    finally:
        exact.close()
        hnsw.close()


def test_a_second_store_sees_an_insert_through_the_feed_and_finds_it_in_sql(pg_demo, tmp_path, embedder) -> None:
    writer = CARStore.open(tmp_path / "writer", authority_url=pg_demo, embedder=embedder)
    reader = _past_the_limit(CARStore.open(tmp_path / "reader", authority_url=pg_demo, embedder=embedder))
    arrived = threading.Event()
    assert reader.feed is not None
    reader.feed.listeners.append(
        lambda changes: arrived.set() if any(c.record.doc_id == "sec-quillmark-note" for c in changes) else None
    )
    text = "quillmark 9.1 renders untrusted markdown footnotes without escaping them (stored XSS)"
    try:
        report = writer.ingest(
            [Record(doc_id="sec-quillmark-note", text=text, doc_type="vulnerability_disclosure", scope={"package": "quillmark"})],
            progress=False,
        )
        assert report.added == ["sec-quillmark-note"] and report.warnings == []
        assert arrived.wait(60), "the reader's feed did not apply the insert"
        assert reader.head == writer.head and "sec-quillmark-note" in reader.records
        vector = embedder.encode(["is quillmark's markdown footnote rendering open to XSS?"])[0]
        assert reader.dense.search(vector, 1)[0].doc_id == "sec-quillmark-note"
        result = ControllingAuthorityRetriever(reader).retrieve("is quillmark's markdown footnote rendering open to XSS?")
        assert result.top(1)[0].doc_id == "sec-quillmark-note"
    finally:
        writer.close()
        reader.close()


# --------------------------------------------------------------------------- the caller gate
def _gated_corpus(demo_records: list[dict]) -> tuple[list[dict], set[str]]:
    """The demo corpus (public) plus records of other readers, the nearest of all to the lodash
    question: 30 acme records for its security team, and 12 of another tenant."""
    secret: list[dict[str, Any]] = [
        {
            "doc_id": f"acme-lodash-note-{i}",
            "doc_type": "note",
            "tenant": "acme",
            "allowed_principals": ["security-team"],
            "text": f"Internal note {i}: is lodash still vulnerable to prototype pollution through merge?",
        }
        for i in range(30)
    ]
    foreign: list[dict[str, Any]] = [
        {
            "doc_id": f"globex-lodash-{i}",
            "doc_type": "note",
            "tenant": "globex",
            "text": f"Globex triage {i}: lodash merge prototype pollution, still vulnerable?",
        }
        for i in range(12)
    ]
    return demo_records + secret + foreign, {r["doc_id"] for r in secret + foreign}


CALLERS = [
    CallerContext(),
    CallerContext("acme"),
    CallerContext("acme", ["analyst"]),
    CallerContext("acme", ["security-team", "analyst"]),
    CallerContext("globex"),
    CallerContext(None, ["security-team"]),
]


def _expected(records: list[dict], vectors: np.ndarray, query: np.ndarray, caller: CallerContext, k: int) -> list[str]:
    """The top ``k`` of the records ``caller`` may read, by cosine (ties by id), computed here."""
    readable = [i for i, r in enumerate(records) if caller.can_read(Record.model_validate(r))]
    scores = vectors[readable] @ (query / np.linalg.norm(query))
    order = sorted(range(len(readable)), key=lambda j: (-scores[j], records[readable[j]]["doc_id"]))
    return [records[readable[j]]["doc_id"] for j in order[:k]]


def test_the_caller_gate_is_inside_the_sql_search(new_database, tmp_path, demo_records, demo_policy, embedder) -> None:
    """With ef_search 10, the nearest 40 records to the question are unreadable to an acme analyst:
    HNSW's first candidates are all filtered out, and the iterative scan walks on until it has the
    readable top 10 (no exact scan needed). Every caller gets exactly the top k of what it may read,
    on the SQL path and on exact search (whose mask the same SQL condition gives)."""
    records, restricted = _gated_corpus(demo_records)
    url = new_database()
    vectors = embedder.encode([r["text"] for r in records])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = embedder.encode(["Is lodash still vulnerable to prototype pollution through merge?"])[0]
    with CARStore.open(
        tmp_path / "a",
        demo_policy,
        embedder=embedder,
        authority_url=url,
        vector_store="pgvector",
        hnsw={"ef_search": 10},
        follow=False,
    ) as store:
        store.ingest(records, progress=False)
        for caller in CALLERS:  # the channel names records by the store's keys; the corpus by doc_ids (unique here)
            assert [shown_id(h.doc_id) for h in store.dense.search(query, K, where=caller.chroma_where())] == _expected(
                records, vectors, query, caller, K
            ), caller
        _past_the_limit(store)
        assert {shown_id(h.doc_id) for h in store.dense.search(query, K)} <= restricted  # the best overall are unreadable
        for caller in CALLERS:
            hits = store.dense.search(query, K, where=caller.chroma_where())
            assert [shown_id(h.doc_id) for h in hits] == _expected(records, vectors, query, caller, K), caller
            assert {shown_id(h.doc_id) for h in store.dense.search(query, len(records), where=caller.chroma_where())} == {
                r["doc_id"] for r in records if caller.can_read(Record.model_validate(r))
            }
        assert pgvector_channel(store).exact_scans == 0
        # A record's readers change with it: the gate's columns are rewritten.
        opened = {**records[45], "allowed_principals": ["analyst"]}
        store.ingest([opened], progress=False)
        analyst = CallerContext("acme", ["analyst"])
        assert shown_id(store.dense.search(query, 1, where=analyst.chroma_where())[0].doc_id) == opened["doc_id"]


def test_a_search_hnsw_leaves_short_is_answered_by_an_exact_scan(
    new_database, tmp_path, demo_records, demo_policy, embedder
) -> None:
    """Without iterative scans HNSW hands over its first ef_search (10) candidates, all unreadable
    to an acme analyst here, and the filter leaves none: the channel sees that more are readable
    and answers with an exact scan, the same top 10."""
    records, _ = _gated_corpus(demo_records)
    url = new_database()
    vectors = embedder.encode([r["text"] for r in records])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = embedder.encode(["Is lodash still vulnerable to prototype pollution through merge?"])[0]
    with CARStore.open(
        tmp_path, demo_policy, embedder=embedder, authority_url=url, vector_store="pgvector", hnsw={"ef_search": 10}, follow=False
    ) as store:
        store.ingest(records, progress=False)
        channel = PgVectorChannel(shared_log(store), ef_search=10, iterative_scan="off", exact_limit=0)
        try:
            analyst = CallerContext("acme", ["analyst"])
            with channel._connection() as conn:  # what HNSW alone gives under the gate
                condition, params = channel._condition(analyst.chroma_where())
                alone = conn.execute(
                    channel._sql.SQL(
                        "SELECT doc_id FROM {records} WHERE {condition} ORDER BY embedding <=> %s::vector LIMIT %s"
                    ).format(records=channel._records, condition=condition),
                    [*params, query.tolist(), K],
                ).fetchall()
            assert len(alone) < K
            hits = channel.search(query, K, where=analyst.chroma_where())
            assert [h.doc_id for h in hits] == _expected(records, vectors, query, analyst, K)
            assert channel.exact_scans == 1
            assert len(channel.search(query, K)) == K and channel.exact_scans == 1  # unfiltered: HNSW fills k
        finally:
            channel.close()


def test_a_gate_operator_the_sql_cannot_compile_is_refused_by_name(pg_demo, tmp_path, embedder) -> None:
    """Scope and metadata fields are filters now (issue 35, compiled into the SQL); an operator
    the caller gate never makes is still refused, named."""
    with _past_the_limit(CARStore.open(tmp_path, authority_url=pg_demo, embedder=embedder, follow=False)) as store:
        vector = embedder.encode(["lodash"])[0]
        with pytest.raises(ValueError, match=r"filters 'car_tenant' with \$eq or \$in"):
            store.dense.search(vector, 3, where={"car_tenant": {"$nin": ["acme"]}})


# --------------------------------------------------------------------------- options
def test_a_contradicting_vector_store_is_refused(pg_demo, new_database, tmp_path, demo_policy, embedder) -> None:
    with pytest.raises(StoreError, match="uses pgvector beside its records, not chroma: a store keeps the vector store"):
        CARStore.open(tmp_path, authority_url=pg_demo, embedder=embedder, vector_store="chroma")
    with pytest.raises(StoreError, match="uses pgvector beside its records, not Chroma at http://127.0.0.1:9"):
        CARStore.open(tmp_path, authority_url=pg_demo, embedder=embedder, chroma_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="pass authority_url .* and no chroma_url"):
        CARStore.open(tmp_path / "folder", demo_policy, embedder=embedder, vector_store="pgvector")
    with pytest.raises(ValueError, match="vector_store must be one of chroma, pgvector, got 'qdrant'"):
        CARStore.open(tmp_path, authority_url=pg_demo, vector_store="qdrant")
    fresh = new_database()
    with pytest.raises(StoreError, match="pgvector's HNSW index takes .* with space 'cosine'"):
        CARStore.open(
            tmp_path, demo_policy, embedder=embedder, authority_url=fresh, vector_store="pgvector", hnsw={"space": "l2"}
        )
    with pytest.raises(StoreError, match="no car-rag store"):  # nothing was stored by the refusal
        CARStore.open(tmp_path, authority_url=fresh)


def test_car_rag_ingest_vector_store_pgvector(new_database, tmp_path, demo_corpus_path, capsys) -> None:
    url = new_database()
    assert main(["ingest", str(demo_corpus_path), "--store", str(tmp_path / "cache"), "--vector-store", "pgvector"]) == 2
    assert "--vector-store pgvector keeps the vectors in the store's PostgreSQL: give --authority-url" in capsys.readouterr().err
    policy = str(Path(demo_corpus_path).parent / "policy.toml")
    assert (
        main(
            [
                "ingest",
                str(demo_corpus_path),
                "--store",
                str(tmp_path / "cache"),
                "--policy",
                policy,
                "--authority-url",
                url,
                "--vector-store",
                "pgvector",
                "--quiet",
            ]
        )
        == 0
    )
    assert "45 added" in capsys.readouterr().out
    with psycopg.connect(url) as conn:
        config, embedded = fetch_one(
            conn.execute("SELECT config, (SELECT count(embedding) FROM car_rag.records) FROM car_rag.store")
        )
    assert config["vector_store"] == "pgvector" and embedded == 45
