"""``as_of`` and ``filters`` on ``CARRetriever.from_vector_store`` (car-rag's own Stage 1): translated
once at construction, compiled into every channel and Stage 2 by the core. Real MiniLM
(``CAREmbeddings``), ``InMemoryVectorStore`` and Chroma, over the packaged demo corpus."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from car_rag.eligibility import RecordFilter
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_car import CARRetriever, CARVectorStoreRetriever
from tests.integration_tests import stores

QUESTION = "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?"
DISCLOSURE, PATCH = "sec-lodash-cve-2099-10001-disclosure", "sec-lodash-4.17.12-release"  # the patch: 2024-03-19
K = 5


@cache
def _store(kind: str) -> Any:
    """The demo corpus in a store of that kind, built once (no test here writes to it)."""
    if kind == "chroma":
        return stores.demo_chroma()
    docs = stores.demo_docs()
    memory = InMemoryVectorStore(stores.embeddings())
    memory.add_documents(docs, ids=[str(d.id) for d in docs])
    return memory


def _retriever(store: Any, **kwargs: Any) -> CARVectorStoreRetriever:
    return CARRetriever.from_vector_store(store, stores.demo_policy(), k=K, **kwargs)


def _status(retriever: CARVectorStoreRetriever, doc_id: str) -> str | None:
    found = retriever.retrieve(QUESTION).get(doc_id)
    return None if found is None else found.status


def _ids(docs: list[Document]) -> list[str]:
    return list(dict.fromkeys(d.metadata["doc_id"] for d in docs))


@pytest.mark.parametrize("kind", ["memory", "chroma"])
def test_as_of_before_the_patch_finds_the_disclosure_in_force(kind: str) -> None:
    store = _store(kind)
    now = _retriever(store)
    assert (_status(now, DISCLOSURE), _status(now, PATCH)) == ("superseded", "active")
    then = _retriever(store, as_of="2024-03-18")
    assert (_status(then, DISCLOSURE), _status(then, PATCH)) == ("active", None)
    first = then.invoke(QUESTION)[0]
    assert (first.metadata["doc_id"], first.metadata["car_status"]) == (DISCLOSURE, "active")
    result = then.retrieve(QUESTION)
    assert result.to_dict()["as_of"] == "2024-03-18"
    assert all(r.record.time is None or r.record.time.date().isoformat() <= "2024-03-18" for r in result)
    assert all(h.doc_id != PATCH for hits in then.core.channel_runs(QUESTION, as_of="2024-03-18").values() for h in hits)
    assert _status(_retriever(store, as_of="2024-03-19"), DISCLOSURE) == "superseded"  # a day counts to its end


@pytest.mark.parametrize("kind", ["memory", "chroma"])
def test_a_doc_types_filter_excluding_every_top_hit_still_returns_k_records(kind: str) -> None:
    store = _store(kind)
    unfiltered = _retriever(store)
    top = set(unfiltered.retrieve(QUESTION).doc_ids(K)) | {
        h.doc_id for hits in unfiltered.core.channel_runs(QUESTION).values() for h in hits[:K]
    }
    types = {d.metadata["doc_id"]: d.metadata["doc_type"] for d in stores.demo_docs()}
    others = sorted(set(types.values()) - {types[d] for d in top})
    assert others and sum(t in others for t in types.values()) >= K
    for filters in ({"doc_type": {"$in": others}}, RecordFilter(doc_types=others)):
        retriever = _retriever(store, filters=filters)
        runs = retriever.core.channel_runs(QUESTION, filters=RecordFilter(doc_types=others))
        assert all(not {h.doc_id for h in hits} & top for hits in runs.values())
        assert len(runs["dense"]) >= K  # pre-filtered, never a top k cut (BM25 finds no word of the question there)
        docs = retriever.invoke(QUESTION)
        assert len(_ids(docs)) == K and not set(_ids(docs)) & top
        assert all(d.metadata["doc_type"] in others for d in docs)
        assert retriever.retrieve(QUESTION).to_dict()["filters"] == {"doc_types": others}


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        ({"filters": {"$or": [{"source": "nvd"}, {"package": "lodash"}]}}, "filter operator '$or' cannot be compiled"),
        ({"filters": {"source": {"$ne": "nvd"}}}, "filter on 'source': operator '$ne' cannot be compiled"),
        (
            {"filters": {"published_at": {"$gte": "2024-05-01", "$lte": "2024-04-01"}}},
            "date_range: from 2024-05-01 is after to 2024-04-01",
        ),
        ({"as_of": "2024-13-01"}, "as_of: cannot read '2024-13-01' as a date"),
    ],
)
def test_a_filter_or_date_that_cannot_be_compiled_is_refused_at_construction(asked: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError) as raised:
        _retriever(_store("memory"), **asked)
    assert says in str(raised.value)
