"""Loader Documents -> text splitter -> CARAuthorityTransformer -> index() with a RecordManager ->
CARRetriever: car-rag resolves authority on documents that carried no car-rag field, and
re-indexing a changed document leaves none of its stale chunks.

    python examples/extract_langchain.py

Needs car-rag[store,langchain] and ./integrations/langchain-car (see the README).
"""

from __future__ import annotations

import json
from pathlib import Path

from langchain_car import CARAuthorityTransformer, CAREmbeddings, CARRetriever
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

DATA = Path(__file__).resolve().parent / "data"
QUESTION = "May I fly business class on a long flight?"


def main() -> None:
    # What a loader gives you: page content and metadata with a source (here from a JSONL file).
    lines = [json.loads(line) for line in (DATA / "memos.jsonl").read_text(encoding="utf-8").splitlines()]
    loaded = [
        Document(page_content=d["text"], metadata={"source": d["doc_id"], "title": d["title"], "department": d["department"]})
        for d in lines
    ]
    transformer = CARAuthorityTransformer(str(DATA / "memos.policy.toml"))
    chunks = transformer.transform_documents(RecursiveCharacterTextSplitter().split_documents(loaded))
    vectors = InMemoryVectorStore(embedding=CAREmbeddings())
    manager = InMemoryRecordManager(namespace="memos")
    manager.create_schema()
    # source_id_key="doc_id": the chunks of one document share it, so cleanup removes a changed document's old chunks.
    done = index(chunks, manager, vectors, cleanup="incremental", source_id_key="doc_id", key_encoder="sha256")
    print(f"{len(loaded)} documents -> {len(chunks)} chunks indexed ({done['num_added']} added)")
    retriever = CARRetriever(
        base_retriever=vectors.as_retriever(search_kwargs={"k": 3}), store=vectors, policy=transformer.policy
    )
    show(retriever)
    # POL-12 is edited: it no longer replaces POL-7. Re-index it; its old chunks (and its edge) go.
    loaded[1].page_content = loaded[1].page_content.replace("This policy replaces POL-7. ", "")
    changed = transformer.transform_documents(RecursiveCharacterTextSplitter().split_documents(loaded))
    again = index(changed, manager, vectors, cleanup="incremental", source_id_key="doc_id", key_encoder="sha256")
    print(f"re-indexed: {again['num_added']} added, {again['num_deleted']} stale chunks deleted")
    show(retriever)


def show(retriever: CARRetriever) -> None:
    for doc in retriever.invoke(QUESTION):
        print(f"  {doc.metadata['car_status']:<10} {doc.metadata['doc_id']:<8} {doc.metadata['doc_type']}")


if __name__ == "__main__":
    main()
