"""Per-tenant retrieval statistics: with a caller's mask, every BM25 backend scores as an index
built over the masked records alone would, so records the caller may not read (another
tenant's) change neither its scores nor its ranking. Real indexes, no store."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from car_rag import Record
from car_rag.adapters import AuthorityGraph
from car_rag.channels import LexicalIndex, make_lexical_index
from car_rag.policy import Policy
from car_rag.scope_linking import Link, accepted_links

BACKENDS = ["bm25-incremental", "bm25s", "rank-bm25"]
WORDS = ["heap", "overflow", "patch", "release", "token", "parser", "leak", "the", "proxy", "auth"]
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=8).map(" ".join)
queries = st.lists(st.sampled_from(WORDS + ["unknownword"]), min_size=1, max_size=3).map(" ".join)


def built(backend: str, texts: list[str]) -> LexicalIndex:
    index = make_lexical_index(backend)
    index.build([f"d{i}" for i in range(len(texts))], texts)
    return index


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_scores_are_those_of_an_index_over_the_masked_records(backend):
    @settings(max_examples=40, deadline=None)
    @given(docs=st.lists(texts, min_size=1, max_size=30), query=queries, seed=st.integers(0, 2**16))
    def check(docs, query, seed):
        mask = np.random.default_rng(seed).random(len(docs)) < 0.5
        index = built(backend, docs)
        expected = np.zeros(len(docs), dtype=np.float32)
        if mask.any():
            expected[mask] = built(backend, [t for t, m in zip(docs, mask) if m]).scores(query)
        np.testing.assert_allclose(index.scores(query, mask)[mask], expected[mask], rtol=1e-5, atol=1e-6)
        hits = index.search(query, 10, mask=mask)
        assert all(mask[int(h.doc_id[1:])] for h in hits)
        assert index.document_frequency(query, mask) == built_df(backend, docs, mask, query)

    check()


def built_df(backend: str, docs: list[str], mask: np.ndarray, query: str) -> int:
    return built(backend, [t for t, m in zip(docs, mask) if m]).document_frequency(query) if mask.any() else 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mask_over_every_record_scores_as_no_mask(backend):
    """Single-tenant stores: a caller that may read everything ranks exactly as today."""
    docs = ["heap overflow in the parser", "patch release for the heap overflow", "proxy auth token leak", ""] * 3
    index = built(backend, docs)
    for query in ("heap overflow", "token leak", "patch"):
        assert np.array_equal(index.scores(query, np.ones(len(docs), dtype=bool)), index.scores(query))


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_tenants_records_leave_a_tenants_ranking_unchanged(backend):
    ours = [
        "heap overflow in the parser of acme",
        "patch release fixes the parser overflow",
        "proxy auth bypass",
        "token leak through the proxy",
        "parser crash on a long header",
        "release notes: heap hardening",
    ]
    # Another tenant's records use our query words often: shared statistics would move our scores.
    theirs = ["heap heap heap overflow", "parser parser release", "proxy token token"] * 40
    alone = built(backend, ours)
    mixed = built(backend, ours + theirs)
    readable = np.array([True] * len(ours) + [False] * len(theirs))
    for query in ("heap overflow", "parser release", "proxy token leak"):
        before = [(h.doc_id, h.score) for h in alone.search(query, 5, mask=np.ones(len(ours), dtype=bool))]
        after = [(h.doc_id, h.score) for h in mixed.search(query, 5, mask=readable)]
        assert [d for d, _ in after] == [d for d, _ in before]
        np.testing.assert_allclose([s for _, s in after], [s for _, s in before], rtol=1e-5)
        assert mixed.document_frequency(query.split()[0], readable) == alone.document_frequency(query.split()[0])


def test_streaming_inserts_of_another_tenant_leave_a_tenants_scores_unchanged():
    """The incremental index, caught up one record at a time (pending postings included)."""
    ours = ["heap overflow in the parser", "patch release fixes the overflow", "proxy token leak"]
    index = built("bm25-incremental", ours)
    mask = np.ones(len(ours), dtype=bool)
    before = index.scores("heap overflow patch", mask)
    for i in range(50):
        index.add([f"x{i}"], ["overflow overflow heap patch patch"])
        mask = np.append(mask, False)
        np.testing.assert_allclose(index.scores("heap overflow patch", mask)[: len(ours)], before, rtol=1e-6)


def test_a_mask_reading_nothing_scores_nothing():
    for backend in BACKENDS:
        index = built(backend, ["heap overflow", "patch release"])
        none = np.zeros(2, dtype=bool)
        assert not index.scores("heap", none).any()
        assert index.search("heap", 5, mask=none) == []
        assert index.document_frequency("heap", none) == 0


POLICY = Policy(name="labels", scope_keys=("drug",), rules=())


def test_link_specificity_counts_only_records_the_caller_may_read():
    """Specificity (scope members / records holding the word) over the caller's records: another
    tenant's records holding the value in scope do not make a common word look specific."""
    graph = AuthorityGraph(POLICY)

    def label(doc_id: str, text: str, drug: str, tenant: str) -> Record:
        return Record(doc_id=doc_id, text=text, doc_type="label", scope={"drug": drug}, tenant=tenant)

    ours = [label(f"a{i}", f"express delivery {i}", "other", "acme") for i in range(6)] + [
        label("a-x", "express tablets", "express", "acme")
    ]
    theirs = [label(f"g{i}", "express", "express", "globex") for i in range(6)]
    for r in ours + theirs:
        graph.add(r)
    index = make_lexical_index("bm25-incremental")
    records = list(graph.records.values())
    index.build([r.doc_id for r in records], [r.text for r in records])
    mask = np.array([r.tenant == "acme" for r in records])
    link = Link("drug", "express", "express", "exact")

    def readable(r: Record) -> bool:
        return r.tenant == "acme"

    [ours_view] = accepted_links([link], graph, lambda _k, _v: 1.0, lambda p: index.document_frequency(p, mask), readable)
    assert ours_view.specificity == pytest.approx(1 / 7)  # 1 of acme's 7 records holding "express"
    [everyone] = accepted_links([link], graph, lambda _k, _v: 1.0, index.document_frequency)
    assert everyone.specificity == pytest.approx(7 / 13)
