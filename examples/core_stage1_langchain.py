"""car-rag's own Stage 1 inside LangChain: ``CARRetriever.from_vector_store(store, policy)`` over an
ordinary ``InMemoryVectorStore`` of the packaged demo corpus. The store's dense search and BM25
over its documents are fused, the question's scope is read (``car_scope_probability``), authority
is resolved, and a question that names several scopes it does not tell apart says so
(``car_ambiguity``) instead of picking one.

    python examples/core_stage1_langchain.py

Needs car-rag[store,langchain] and ./integrations/langchain-car (see the README). Runs offline
(the packaged MiniLM).
"""

from __future__ import annotations

from langchain_car import CAREmbeddings, CARRetriever, load_documents
from langchain_core.vectorstores import InMemoryVectorStore

from car_rag.demo import demo_files

QUESTIONS = ("Is lodash still vulnerable to CVE-2099-10001?", "Has the prototype pollution been fixed?")


def main() -> None:
    corpus, _, policy = demo_files()
    store = InMemoryVectorStore.from_documents(load_documents(corpus), CAREmbeddings())
    retriever = CARRetriever.from_vector_store(store, policy, k=7)  # k=7: room for a superseded record after the frontier
    for question in QUESTIONS:
        docs = retriever.invoke(question)
        print(f"Q: {question}")
        for doc in docs:
            print(f"  {doc.metadata['car_status']:<10} p(scope)={doc.metadata['car_scope_probability']:<6} {doc.id}")
        ambiguity = docs[0].metadata["car_ambiguity"] if docs else None
        if ambiguity:
            print(f"  ambiguous: {ambiguity['scopes']} scopes, by state {ambiguity['states']}")


if __name__ == "__main__":
    main()
