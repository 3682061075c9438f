"""Documents that keep their own metadata names: the policy's ``record_scope.metadata_fields``
maps them to scope keys, for Stage 1's documents and for Stage 2's ``where`` lookups alike."""

from __future__ import annotations

from car_rag import load_policy
from langchain_core.documents import Document

from langchain_car import CARRetriever, DocumentListLookup
from tests.corpus import doc_id
from tests.unit_tests.test_retriever import KeywordRetriever

QUESTION = "Is the heap overflow in zlibber inflate still exploitable?"
DOCS = [  # as a LangChain user writes them: their own names ("component", "advisory"), no car_* keys
    Document(
        id="disclosure",
        page_content="CVE-2099-31337: heap overflow in zlibber inflate, still exploitable.",
        metadata={
            "doc_id": "disclosure",
            "doc_type": "vulnerability_disclosure",
            "published_at": "2099-01-02",
            "component": "zlibber",
            "advisory": "CVE-2099-31337",
        },
    ),
    Document(
        id="release",
        page_content="Version 1.3.2 checks window bounds before every copy.",
        metadata={
            "doc_id": "release",
            "doc_type": "patch_release",
            "published_at": "2099-01-20",
            "component": "zlibber",
            "advisory": "CVE-2099-31337",
        },
    ),
]


def policy(tmp_path, mapped: bool):
    path = tmp_path / "policy.toml"
    tables = '\n[record_scope.metadata_fields]\ncomponent = "package"\nadvisory = "cve_id"\n' if mapped else ""
    path.write_text(
        'name = "sec"\nscope_keys = ["package", "cve_id"]\n'
        'rules = [{name = "patch_fixes_disclosure", trigger = "patch_release", '
        'target = "vulnerability_disclosure", within = ["package", "cve_id"]}]\n' + tables
    )
    return load_policy(path)


def statuses(retriever: CARRetriever) -> list[tuple[str, str]]:
    return [(doc_id(d), d.metadata["car_status"]) for d in retriever.invoke(QUESTION)]


def test_the_fix_is_found_under_the_documents_own_metadata_names(tmp_path) -> None:
    stage1 = KeywordRetriever(documents=DOCS, k=1)
    assert [d.id for d in stage1.invoke(QUESTION)] == ["disclosure"]
    mapped = CARRetriever(base_retriever=stage1, store=DocumentListLookup(DOCS), policy=policy(tmp_path, True))
    assert statuses(mapped) == [("release", "active"), ("disclosure", "superseded")]
    # Without the mapping the documents carry no scope: nothing can void the disclosure.
    plain = CARRetriever(base_retriever=stage1, store=DocumentListLookup(DOCS), policy=policy(tmp_path, False))
    assert statuses(plain) == [("disclosure", "active")]
