"""The LlamaIndex and LangChain hybrid retrievers as bench systems, and what the audit finds in them."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("llama_index.retrievers.bm25")
pytest.importorskip("llama_index.vector_stores.chroma")
pytest.importorskip("langchain_classic.retrievers")
pytest.importorskip("langchain_community.retrievers")
pytest.importorskip("langchain_chroma")

from car_rag.eval.audit import audit_retriever  # noqa: E402
from car_rag_evals.bench import DEFAULT_SYSTEMS  # noqa: E402
from car_rag_evals.framework_systems import available  # noqa: E402
from car_rag_evals.systems import FRAMEWORK_SYSTEMS, SYSTEMS, System, build_system  # noqa: E402

FRAMEWORKS = ("llamaindex-fusion", "langchain-ensemble")


@pytest.fixture(scope="module")
def framework_systems(demo_store):
    return {name: build_system(name, demo_store, depth=20) for name in FRAMEWORKS}


def test_registered_and_default_when_importable():
    assert available()
    for name in FRAMEWORKS:
        assert name in SYSTEMS and name in FRAMEWORK_SYSTEMS and name in DEFAULT_SYSTEMS


def test_framework_systems_return_demo_ids(framework_systems, demo_store, demo_queries):
    known = set(demo_store.records)
    for name, system in framework_systems.items():
        assert system.label
        for query in demo_queries:
            out = system.run(query["query"])
            assert out.anchors is None
            assert out.doc_ids, (name, query["query_id"])
            assert len(out.doc_ids) == len(set(out.doc_ids)) <= 20
            assert set(out.doc_ids) <= known, (name, set(out.doc_ids) - known)
        # the anchor of an easy question is found: they rank the corpus, not noise
        hits = sum(q["anchor_doc_ids"][0] in system.run(q["query"]).doc_ids[:5] for q in demo_queries if q.get("anchor_doc_ids"))
        assert hits >= len(demo_queries) // 2, (name, hits)


def _doc_ids(system: System, query: str) -> list[str]:
    return system.run(query).doc_ids


def test_audit_finds_stale_sets_in_frameworks_not_in_car(framework_systems, demo_store, demo_queries):
    queries = [(q["query"], (q.get("anchor_doc_ids") or [None])[0]) for q in demo_queries]
    for name, system in framework_systems.items():
        audit = audit_retriever(functools.partial(_doc_ids, system), queries, demo_store.graph, k=5)
        assert audit.queries == len(demo_queries)
        assert audit.sets_with_violations > 0, name  # superseded records handed over without their superseders
        assert audit.violations >= audit.sets_with_violations
        assert audit.examples and audit.examples[0]["violations"]
    car = build_system("car-hybrid", demo_store, depth=20)
    audit = audit_retriever(lambda q: car.run(q).doc_ids, queries, demo_store.graph, k=5)
    assert audit.sets_with_violations == 0 and audit.violations == 0
