"""as_of and filters on a pgvector store (a real PostgreSQL, real MiniLM, the demo corpus): past
the exact-search limit the HNSW search itself takes the date and the filter as SQL conditions,
so a filter still gives k records of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag.eligibility import RecordFilter
from car_rag.postgres import PgVectorChannel
from car_rag.postgres.fixture import ThrowawayPostgres
from helpers_records import retrieved

QUESTION = "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?"
DISCLOSURE, PATCH = "sec-lodash-cve-2099-10001-disclosure", "sec-lodash-4.17.12-release"
K = 5


@pytest.fixture(scope="module")
def store(postgres: ThrowawayPostgres, tmp_path_factory, demo_policy, embedder, demo_corpus_path) -> Iterator[CARStore]:
    with CARStore.open(
        tmp_path_factory.mktemp("pg-asof"),
        demo_policy,
        embedder=embedder,
        authority_url=postgres.new_database(),
        vector_store="pgvector",
    ) as store:
        assert store.ingest(demo_corpus_path, progress=False).errors == []
        store.dense.exact_limit = 0  # the SQL path answers
        assert not store.dense.exact and isinstance(store.dense, PgVectorChannel)
        yield store


def test_as_of_is_a_condition_of_the_hnsw_search(store):
    retriever = ControllingAuthorityRetriever(store, k1=3, depth=10)
    dense = retriever.channel_runs(QUESTION, channels=["dense"], as_of="2024-03-18")["dense"]
    assert len(dense) == 10
    assert all(
        store.records[h.doc_id].time is None or store.records[h.doc_id].time.date().isoformat() <= "2024-03-18" for h in dense
    )
    then = retriever.retrieve(QUESTION, as_of="2024-03-18")
    assert then.get(PATCH) is None and retrieved(then, DISCLOSURE).status == "active"
    assert retrieved(retriever.retrieve(QUESTION), DISCLOSURE).status == "superseded"


@pytest.mark.parametrize(
    ("filters", "keeps"),
    [
        (RecordFilter(doc_types=["patch_release"]), lambda r: r.doc_type == "patch_release"),
        (RecordFilter(subjects={"package": ["lodash", "zipcraft"]}), lambda r: r.scope.get("package") in ("lodash", "zipcraft")),
        (
            RecordFilter(since="2024-06-01", until="2024-12-31"),
            lambda r: r.time is not None and "2024-06-01" <= r.time.date().isoformat() <= "2024-12-31",
        ),
        (RecordFilter(sources=["NVD"]), lambda r: r.source == "NVD"),
    ],
)
def test_a_filter_is_a_condition_of_the_hnsw_search(store, filters, keeps):
    eligible = [r for r in store.records.values() if keeps(r)]
    assert eligible and len(eligible) < len(store.records)
    retriever = ControllingAuthorityRetriever(store, k1=K, depth=K)
    dense = retriever.channel_runs(QUESTION, channels=["dense"], filters=filters)["dense"]
    assert len(dense) == min(K, len(eligible))  # never a top k with the others removed
    assert all(keeps(store.records[h.doc_id]) for h in dense)
    assert all(keeps(r.record) for r in retriever.retrieve(QUESTION, filters=filters))
