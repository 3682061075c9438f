"""CARRetriever without a vector store or a model: a keyword Stage 1 and an in-memory lookup."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from car_rag import CallerContext, Record, load_policy
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_car import CARRetriever, DocumentListLookup, record_to_document
from tests.corpus import ANCHOR, CHAIN_QUERY, QUERY, SUPERSEDER, content_words, records

POLICY = load_policy("security-advisory")
DOCS = [record_to_document(r) for r in records()]


class KeywordRetriever(BaseRetriever):
    """A tiny Stage 1: documents ranked by the content words they share with the query."""

    documents: list[Document]
    k: int = 3

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = content_words(query)
        scored = [(len(words & content_words(d.page_content)), i) for i, d in enumerate(self.documents)]
        top = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[: self.k]
        return [self.documents[i] for _, i in top]


def make(k: int = 5, docs: list[Document] = DOCS, **kwargs: Any) -> CARRetriever:
    return CARRetriever(
        base_retriever=KeywordRetriever(documents=docs), store=DocumentListLookup(docs), policy=POLICY, k=k, **kwargs
    )


def test_superseder_with_no_shared_word_is_brought_in_and_put_first() -> None:
    superseder = next(d for d in DOCS if d.id == SUPERSEDER)
    assert not content_words(QUERY) & content_words(superseder.page_content)
    stage1 = KeywordRetriever(documents=DOCS).invoke(QUERY)
    assert SUPERSEDER not in [d.id for d in stage1]

    docs = make().invoke(QUERY)
    by_id = {d.id: d.metadata for d in docs}
    assert docs[0].id == SUPERSEDER
    assert by_id[SUPERSEDER]["car_status"] == "active"
    assert by_id[SUPERSEDER]["car_role"] == "superseder"
    assert by_id[SUPERSEDER]["car_anchor_id"] == ANCHOR
    assert by_id[SUPERSEDER]["car_voids"] == [
        {
            "doc_id": ANCHOR,
            "rule": "patch_fixes_disclosure",
            "doc_type": "vulnerability_disclosure",
            "version": None,
            "scope": {"package": "lodash", "cve_id": "CVE-2099-20001"},
            "status": "superseded",
        }
    ]
    assert by_id[SUPERSEDER]["car_stage1_rank"] is None
    anchor = by_id[ANCHOR]
    assert anchor["car_status"] == "superseded"
    assert anchor["car_superseded_by"] == [SUPERSEDER]
    assert anchor["car_rule"] == "patch_fixes_disclosure"
    assert anchor["car_stage1_rank"] == 1 and anchor["car_stage1_channel"] == "keyword"
    assert anchor["package"] == "lodash"  # the store's own metadata is kept
    # Frontier first, superseded provenance last.
    statuses = [d.metadata["car_status"] for d in docs]
    assert statuses == sorted(statuses)  # "active" < "superseded"


def test_three_record_chain_through_an_explicit_edge() -> None:
    docs = make(k=10).invoke(CHAIN_QUERY)
    by_id = {d.id: d.metadata for d in docs}
    assert docs[0].id == "zipcraft-2.3.4-release"
    assert by_id["zipcraft-2.3.1-release"]["car_status"] == "superseded"
    assert by_id["zipcraft-2.3.1-release"]["car_rule"] == "explicit"
    assert by_id["zipcraft-disclosure"]["car_superseded_by"] == ["zipcraft-2.3.4-release"]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_caps_the_output_in_the_constructor_and_per_invoke(k: int) -> None:
    assert len(make(k=k).invoke(QUERY)) == k
    assert len(make(k=5).invoke(QUERY, k=k)) == k


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_invalid_k_per_invoke(k: Any) -> None:
    with pytest.raises(ValueError, match="k must be"):
        make().invoke(QUERY, k=k)


def test_invalid_k_in_the_constructor() -> None:
    with pytest.raises(ValueError):
        make(k=0)


def test_k1_keeps_the_first_stage1_documents_only() -> None:
    docs = make(k=10, k1=1).invoke(QUERY)
    assert {d.id for d in docs} == {ANCHOR, SUPERSEDER}


def test_policy_by_name() -> None:
    retriever = CARRetriever(
        base_retriever=KeywordRetriever(documents=DOCS),
        store=DOCS,
        policy="security-advisory",  # type: ignore[arg-type]  # a name, which the field's validator loads
    )
    assert retriever.policy == POLICY and isinstance(retriever.lookup, DocumentListLookup)


def test_scope_id_named_in_the_query_pulls_its_records() -> None:
    docs = make(k=10).invoke("What happened with CVE-2099-20003?")
    by_id = {d.id: d.metadata for d in docs}
    assert by_id["axios-1.7.4-release"]["car_status"] == "active"
    assert by_id["axios-disclosure"]["car_role"] == "scope_match"
    assert by_id["axios-disclosure"]["car_status"] == "superseded"


def test_lookup_filter_is_anded_into_stage2() -> None:
    docs = make(lookup_filter={"source": "GitHub Advisory Database"}).invoke(QUERY)
    assert SUPERSEDER not in [d.id for d in docs]  # the release note's source does not pass the filter


def test_stage1_document_without_car_metadata_is_passed_through_unresolved() -> None:
    plain = Document(id="x", page_content="prototype pollution lodash merge", metadata={"source": "wiki"})
    docs = make(k=10, docs=[plain, *DOCS]).invoke(QUERY)
    by_id = {d.id: d.metadata for d in docs}
    assert by_id["x"]["car_status"] == "unresolved" and by_id["x"]["source"] == "wiki"
    stage1 = [d.id for d in KeywordRetriever(documents=[plain, *DOCS]).invoke(QUERY)]
    assert by_id["x"]["car_stage1_rank"] == stage1.index("x") + 1 and by_id["x"]["car_superseded_by"] == []
    assert by_id[ANCHOR]["car_status"] == "superseded" and docs[0].id == SUPERSEDER
    # It keeps its Stage-1 place among the records nothing displaced: after the fix, before the stale one.
    assert [d.id for d in docs].index("x") < [d.id for d in docs].index(ANCHOR)


def test_stage1_document_with_no_metadata_and_no_id_is_passed_through_unresolved() -> None:
    """A Document as a bare text splitter makes it: no id, metadata {}. Never a status car-rag did not decide."""
    bare = Document(page_content="prototype pollution lodash merge")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: it simply is not a car-rag record
        docs = make(k=10, docs=[bare, *DOCS]).invoke(QUERY)
    [passed] = [d for d in docs if d.page_content == bare.page_content]
    assert passed.metadata["car_status"] == "unresolved" and passed.metadata["car_superseded_by"] == []
    assert {d.id: d.metadata for d in docs}[ANCHOR]["car_status"] == "superseded" and docs[0].id == SUPERSEDER


def test_stage1_document_with_bad_car_metadata_is_passed_through_with_a_warning() -> None:
    bad = Document(id="y", page_content="prototype pollution lodash merge", metadata={"doc_type": "note", "authority": 7.0})
    with pytest.warns(UserWarning, match="authority"):
        docs = make(k=10, docs=[bad, *DOCS]).invoke(QUERY)
    assert {d.id: d.metadata for d in docs}["y"]["car_status"] == "unresolved"


def test_caller_gate() -> None:
    disclosure = Record.model_validate(
        dict(
            doc_id="d",
            text="timing side channel token recovery vaultkit",
            doc_type="vulnerability_disclosure",
            scope={"package": "vaultkit", "cve_id": "CVE-2099-1"},
            published_at="2024-01-01",
        )
    )
    fix = Record.model_validate(
        dict(
            doc_id="f",
            text="release 3.1.0 constant time compare",
            doc_type="patch_release",
            version="3.1.0",
            scope={"package": "vaultkit", "cve_id": "CVE-2099-1"},
            published_at="2024-02-01",
            allowed_principals=["security-team"],  # public, as what it voids (car_rag.trust), but embargoed
        )
    )
    docs = [record_to_document(disclosure), record_to_document(fix)]
    stage1 = KeywordRetriever(documents=docs[:1])
    query = "vaultkit timing side channel token recovery"
    outsider = CARRetriever(base_retriever=stage1, store=docs, policy=POLICY, caller=CallerContext("other-co", {"dev"}))
    out = outsider.invoke(query)
    assert [d.id for d in out] == ["d"]
    assert out[0].metadata["car_hidden_superseder"] is True and out[0].metadata["car_superseded_by"] == []
    insider = CARRetriever(base_retriever=stage1, store=docs, policy=POLICY, caller=CallerContext("acme", {"security-team"}))
    assert [d.id for d in insider.invoke(query)] == ["f", "d"]


def test_doc_id_key_and_its_deprecated_alias() -> None:
    docs = [Document(id=None, page_content=d.page_content, metadata={**d.metadata, "rid": d.id}) for d in DOCS]
    retriever = CARRetriever(base_retriever=KeywordRetriever(documents=docs), store=docs, policy=POLICY, doc_id_key="rid")
    assert retriever.invoke(QUERY)[0].id == SUPERSEDER
    with pytest.warns(DeprecationWarning, match="use doc_id_key="):
        old = CARRetriever(  # type: ignore[call-arg]  # the deprecated name, not in the signature
            base_retriever=KeywordRetriever(documents=docs), store=docs, policy=POLICY, id_key="rid"
        )
    assert old.doc_id_key == "rid"


def test_unusable_stage2_documents_are_skipped_with_a_warning() -> None:
    broken = Document(
        id="junk",
        page_content="?",
        metadata={"package": "lodash", "cve_id": "CVE-2099-20001", "doc_type": "patch_release", "authority": 7.0},
    )
    docs = DOCS + [broken]
    retriever = CARRetriever(base_retriever=KeywordRetriever(documents=DOCS), store=DocumentListLookup(docs), policy=POLICY)
    with pytest.warns(UserWarning, match="unusable document"):
        out = retriever.invoke(QUERY)
    assert out[0].id == SUPERSEDER


def test_a_cycle_in_store_metadata_is_skipped_with_a_warning() -> None:
    a = Record(doc_id="a", text="prototype pollution lodash merge", doc_type="note", supersedes=["b"])
    b = Record(doc_id="b", text="unrelated", doc_type="note", supersedes=["a"])
    docs = [record_to_document(a), record_to_document(b)]
    with pytest.warns(UserWarning, match="cycle"):
        out = make(docs=docs).invoke(QUERY)
    assert [d.id for d in out] == ["a"]


def test_full_result_is_available_for_diagnostics() -> None:
    result = make(k=1).retrieve(QUERY)
    assert len(result) > 1 and result.ranked[0].doc_id == SUPERSEDER


async def test_async_matches_sync() -> None:
    retriever = make()
    assert await retriever.ainvoke(QUERY) == retriever.invoke(QUERY)
    assert len(await retriever.ainvoke(QUERY, k=2)) == 2


class _Starts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.names.append(kwargs.get("name") or "")


def test_stage1_runs_as_a_child_of_the_car_run() -> None:
    handler = _Starts()
    make().invoke(QUERY, config={"callbacks": [handler]})
    assert handler.names == ["CARRetriever", "KeywordRetriever"]


def test_no_warnings_on_a_clean_run() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make().invoke(QUERY)


class ScoringRetriever(KeywordRetriever):
    """Stage 1 that reports its scores in document metadata, as many LangChain retrievers do."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        docs = super()._get_relevant_documents(query, run_manager=run_manager)
        return [
            Document(id=d.id, page_content=d.page_content, metadata={**d.metadata, "score": 1.0 / i})
            for i, d in enumerate(docs, 1)
        ]


def test_stage1_scores_come_from_document_metadata_else_rank_only() -> None:
    scored = CARRetriever(base_retriever=ScoringRetriever(documents=DOCS), store=DOCS, policy=POLICY).invoke(QUERY)
    assert next(d for d in scored if d.id == ANCHOR).metadata["car_stage1_score"] == 1.0
    plain = make().invoke(QUERY)
    anchor = next(d for d in plain if d.id == ANCHOR).metadata
    assert anchor["car_stage1_rank"] == 1 and anchor["car_stage1_score"] is None


class _Runs(BaseCallbackHandler):
    def __init__(self) -> None:
        self.runs: dict[Any, tuple[str, Any]] = {}

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any) -> None:
        self.runs[run_id] = (kwargs.get("name") or "", parent_run_id)


def test_the_wrapped_retriever_is_a_child_run_of_the_car_run() -> None:
    handler = _Runs()
    make().invoke(QUERY, config={"callbacks": [handler]})
    by_name = {name: (run_id, parent) for run_id, (name, parent) in handler.runs.items()}
    assert by_name["KeywordRetriever"][1] == by_name["CARRetriever"][0]


@pytest.mark.parametrize("store", [object(), {"a": 1}, "docs"])
def test_a_store_that_cannot_filter_by_metadata_is_named(store: Any) -> None:
    with pytest.raises(TypeError, match=rf"{type(store).__name__} cannot be filtered by metadata.*get\(where="):
        CARRetriever(base_retriever=KeywordRetriever(documents=DOCS), store=store, policy=POLICY)


def test_vectorstore_is_a_deprecated_alias_of_store() -> None:
    with pytest.warns(DeprecationWarning, match="use store="):
        retriever = CARRetriever(  # type: ignore[call-arg]  # the deprecated name, not in the signature
            base_retriever=KeywordRetriever(documents=DOCS), vectorstore=DOCS, policy=POLICY
        )
    assert retriever.invoke(QUERY)[0].id == SUPERSEDER


class _Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any, Any]] = []
        self.car_run: Any = None

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: Any, **kwargs: Any) -> None:
        if kwargs.get("name") == "CARRetriever":
            self.car_run = run_id

    def on_custom_event(self, name: str, data: Any, *, run_id: Any, **kwargs: Any) -> None:
        self.events.append((name, data, run_id))


def test_the_resolution_is_a_custom_event_on_the_car_run() -> None:
    handler = _Events()
    make().invoke(QUERY, config={"callbacks": [handler]})
    [(name, data, run_id)] = handler.events
    assert name == "car_resolution" and run_id == handler.car_run
    assert data["anchors"][0] == ANCHOR and SUPERSEDER in data["active"]
    assert data["superseded"][ANCHOR] == [SUPERSEDER] and data["lookups"] >= 1 and data["rounds"] >= 1


async def test_the_resolution_event_in_astream_events() -> None:
    events = [e async for e in make().astream_events(QUERY, version="v2") if e["event"] == "on_custom_event"]
    data: Any = events[0]["data"]  # a custom event's data is ours, not a runnable's EventData
    assert [e["name"] for e in events] == ["car_resolution"] and data["anchors"][0] == ANCHOR
