"""Raw documents -> IngestionPipeline (default splitter + CARAuthorityExtractor) -> VectorStoreIndex
-> CARRetriever.from_index: car-rag resolves authority on documents that carried no car-rag field.

    python examples/extract_llamaindex.py

Needs car-rag[store,llama-index] and ./integrations/llama-index-retrievers-car (see the README).
"""

from __future__ import annotations

import json
from pathlib import Path

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.retrievers.car import CAR_STATUS, CARAuthorityExtractor, CAREmbedding, CARRetriever

from car_rag import load_policy

DATA = Path(__file__).resolve().parent / "data"


def main() -> None:
    # What a reader gives you: text and metadata (here from a JSONL file; SimpleDirectoryReader works the same).
    lines = [json.loads(line) for line in (DATA / "memos.jsonl").read_text(encoding="utf-8").splitlines()]
    documents = [
        Document(id_=d["doc_id"], text=d["text"], metadata={"title": d["title"], "department": d["department"]}) for d in lines
    ]
    policy = load_policy(DATA / "memos.policy.toml")
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(), CARAuthorityExtractor(policy=policy)])
    nodes = pipeline.run(documents=documents)
    print(f"{len(documents)} documents -> {len(nodes)} nodes, each carrying its document's record")
    index = VectorStoreIndex(nodes, embed_model=CAREmbedding())
    retriever = CARRetriever.from_index(index, policy, similarity_top_k=3)
    for found in retriever.retrieve("May I fly business class on a long flight?"):
        meta = found.node.metadata
        print(f"  {meta[CAR_STATUS]:<10} {meta['doc_id']:<8} {meta['doc_type']}")


if __name__ == "__main__":
    main()
