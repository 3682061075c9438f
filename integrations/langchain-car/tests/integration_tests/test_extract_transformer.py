"""CARAuthorityTransformer on loader-style Documents (no car-rag keys), split by LangChain's default
RecursiveCharacterTextSplitter, indexed with index() and a RecordManager into InMemoryVectorStore
with the real MiniLM, and resolved by CARRetriever; re-indexing a changed document leaves none of
its stale chunks behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from car_rag import load_policy
from car_rag.policy import Policy
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from langchain_car import CARAuthorityTransformer, CARRetriever
from tests.integration_tests import stores

POLICY = """
name = "hr"
scope_keys = ["department"]
rules = []
[record_scope]
metadata_fields = {department = "department"}
[extract]
default_doc_type = "policy"
[[extract.identifiers]]
pattern = 'POL-(\\d+)'
doc_id = "pol-{1}"
"""

FILLER = " ".join(f"Clause {i}: receipts are kept for seven years and submitted within thirty days." for i in range(150))
QUESTION = "Which class do staff fly on a business trip?"


def _loaded(
    new_text: str = "This policy replaces POL-7. Staff may fly business class on flights over six hours.",
) -> list[Document]:
    """What a loader returns: text and a source, nothing car-rag needs."""
    return [
        Document(
            page_content=f"POL-7. Staff fly economy class on every business trip. {FILLER}",
            metadata={"source": "pol-7", "department": "finance"},
        ),
        Document(page_content=f"POL-12. {new_text} {FILLER}", metadata={"source": "pol-12", "department": "finance"}),
    ]


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    path = tmp_path / "hr.toml"
    path.write_text(POLICY, encoding="utf-8")
    return load_policy(path)


def _statuses(vectors: InMemoryVectorStore, policy: Policy) -> dict[str, str]:
    retriever = CARRetriever(base_retriever=vectors.as_retriever(search_kwargs={"k": 4}), store=vectors, policy=policy)
    return {d.metadata["doc_id"]: d.metadata["car_status"] for d in retriever.invoke(QUESTION)}


def test_chunks_share_their_documents_record_and_reindexing_a_change_leaves_no_stale_chunk(policy: Policy) -> None:
    transformer = CARAuthorityTransformer(policy)
    splitter = RecursiveCharacterTextSplitter()
    chunks = transformer.transform_documents(splitter.split_documents(_loaded()))
    of_12 = [c for c in chunks if c.metadata["doc_id"] == "pol-12"]
    assert len(of_12) > 1 and all(c.metadata["supersedes"] == ["pol-7"] for c in of_12)
    assert {c.metadata["doc_type"] for c in chunks} == {"policy"} and {c.metadata["department"] for c in chunks} == {"finance"}

    vectors = InMemoryVectorStore(embedding=stores.embeddings())
    manager = InMemoryRecordManager(namespace="hr")
    manager.create_schema()
    first = index(chunks, manager, vectors, cleanup="incremental", source_id_key="doc_id", key_encoder="sha256")
    assert first["num_added"] == len(chunks)
    assert _statuses(vectors, policy) == {"pol-12": "active", "pol-7": "superseded"}

    changed = transformer.transform_documents(
        splitter.split_documents(_loaded("Staff may fly business class, as POL-7 allows for executives."))
    )
    again = index(changed, manager, vectors, cleanup="incremental", source_id_key="doc_id", key_encoder="sha256")
    assert again["num_deleted"] >= 1
    stored = list(vectors.store.values())
    assert not any("replaces POL-7" in s["text"] for s in stored)
    assert all(s["metadata"].get("supersedes") in (None, []) for s in stored if s["metadata"]["doc_id"] == "pol-12")
    assert _statuses(vectors, policy).get("pol-7") == "active"


def test_a_document_it_cannot_read_is_named(policy: Policy) -> None:
    with pytest.raises(ValueError, match="record 'blank' field 'text'"):
        CARAuthorityTransformer(policy).transform_documents(
            [*_loaded(), Document(page_content=" ", metadata={"source": "blank"})]
        )
