"""car-rag's own Stage 1 inside LlamaIndex: ``CARRetriever.from_index(index, policy)`` over an
ordinary in-memory ``VectorStoreIndex`` of the packaged demo corpus. The index's dense search and
BM25 over its nodes are fused, the question's scope is read (``car_scope_probability``), authority
is resolved, and a question that names several scopes it does not tell apart says so
(``car_ambiguity``) instead of picking one.

    python examples/core_stage1_llamaindex.py

Needs car-rag[store,llama-index] and ./integrations/llama-index-retrievers-car (see the README).
Runs offline (the packaged MiniLM).
"""

from __future__ import annotations

from llama_index.core import VectorStoreIndex
from llama_index.retrievers.car import CAR_AMBIGUITY, CAR_SCOPE_PROBABILITY, CAR_STATUS, CAREmbedding, CARRetriever, load_nodes

from car_rag.demo import demo_files

QUESTIONS = ("Is lodash still vulnerable to CVE-2099-10001?", "Has the prototype pollution been fixed?")


def main() -> None:
    corpus, _, policy = demo_files()
    index = VectorStoreIndex(load_nodes(corpus), embed_model=CAREmbedding())
    retriever = CARRetriever.from_index(index, policy, k=7)  # k=7: room for a superseded record after the frontier
    for question in QUESTIONS:
        nodes = retriever.retrieve(question)
        print(f"Q: {question}")
        for found in nodes:
            meta = found.node.metadata
            print(f"  {meta[CAR_STATUS]:<10} p(scope)={meta[CAR_SCOPE_PROBABILITY]:<6} {meta['doc_id']}")
        ambiguity = nodes[0].node.metadata[CAR_AMBIGUITY] if nodes else None
        if ambiguity:
            print(f"  ambiguous: {ambiguity['scopes']} scopes, by state {ambiguity['states']}")


if __name__ == "__main__":
    main()
