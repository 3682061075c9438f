"""The bulk loader (``car_rag_evals.perf.bulk_load``) against ``car-rag ingest`` on a real PostgreSQL
with pgvector and real MiniLM: the rows it writes are ingest's, from the whole graph or per run, and
it refuses a bad record, naming it, and a store that holds records, with the store untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from car_rag import CARStore, Embedder, Policy
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag_evals.perf.bulk_load import BulkLoader, create_store, edges_agree, stored_rows
from car_rag_evals.perf.corpus import generate, gist_vectors

SIZE = 1_500


@pytest.fixture(scope="module")
def new_database(postgres: ThrowawayPostgres) -> Callable[[], str]:
    """Fresh databases (their ``postgresql://`` URLs) on the session's server."""
    return postgres.new_database


def _indexes(url: str, schema: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY 1", (schema,)).fetchall()


def test_bulk_load_writes_the_rows_ingest_writes(
    new_database, tmp_path: Path, security_policy: Policy, embedder: Embedder
) -> None:
    corpus = generate(SIZE)
    vectors = gist_vectors(corpus, embedder)
    url = new_database()
    with CARStore.open(
        tmp_path / "ingested",
        security_policy,
        authority_url=url,
        authority_schema="ingested",
        vector_store="pgvector",
        embedder=embedder,
        follow=False,
    ) as store:
        given = {r["doc_id"]: vectors[i] for i, r in enumerate(corpus.records)}
        assert not store.ingest(corpus.records, progress=False, embeddings=given, chunk_size=400).errors
    want = stored_rows(url, "ingested")
    assert len(want["records"]) == SIZE and want["edges"]
    for edges in ("graph", "runs"):
        schema = f"loaded_{edges}"
        create_store(url, schema, security_policy, tmp_path / schema, embedder)
        report = BulkLoader(url, schema, security_policy, edges=edges).load(corpus.records, vectors, batch=700)
        assert (report.records, report.edges) == (SIZE, len(want["edges"]))
        assert stored_rows(url, schema) == want, edges


def test_bulk_load_refuses_a_bad_record_and_a_store_with_records(
    new_database, tmp_path: Path, security_policy: Policy, embedder: Embedder
) -> None:
    corpus = generate(300)
    vectors = gist_vectors(corpus, embedder)
    url = new_database()
    create_store(url, "bad", security_policy, tmp_path / "bad", embedder)
    indexes = _indexes(url, "bad")
    broken = [dict(r) for r in corpus.records]
    del broken[250]["text"]
    with pytest.raises(ValueError, match=rf"{broken[250]['doc_id']}.*text"):
        BulkLoader(url, "bad", security_policy).load(broken, vectors, batch=200)
    assert stored_rows(url, "bad")["records"] == [] and _indexes(url, "bad") == indexes  # one transaction: nothing, indexes kept
    BulkLoader(url, "bad", security_policy).load(corpus.records, vectors)
    before = stored_rows(url, "bad")
    with pytest.raises(ValueError, match="holds records"):
        BulkLoader(url, "bad", security_policy).load(corpus.records, vectors)
    assert stored_rows(url, "bad") == before


def test_runs_refuse_a_bucket_that_comes_back(security_policy: Policy) -> None:
    records = generate(2_000).records
    assert edges_agree(records, security_policy)
    chained = next(i for i, r in enumerate(records) if r["doc_id"].startswith("fix:"))
    moved = records[:chained] + records[chained + 1 :] + [records[chained]]  # a patch after its chain's run ended
    with pytest.raises(ValueError, match=rf"{records[chained]['doc_id']}.*came back"):
        edges_agree(moved, security_policy)
