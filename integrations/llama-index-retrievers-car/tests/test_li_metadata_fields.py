"""Nodes that keep their own metadata names (a LlamaIndex ``Document``'s metadata, inherited by
its chunks): the policy's ``record_scope.metadata_fields`` maps them to scope keys, for the
anchors read from Stage 1 and for Stage 2's filters, in memory and on real Chroma."""

from __future__ import annotations

from car_rag import load_policy
from car_rag.store import DEFAULT_HNSW
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeWithScore
from llama_index.vector_stores.chroma import ChromaVectorStore

from llama_index.retrievers.car import CAR_STATUS, CARRetriever

QUESTION = "Is the heap overflow in zlibber inflate still exploitable?"
DOCUMENTS = [  # as a LlamaIndex user writes them: their own names ("component", "advisory"), no car_* keys
    Document(
        id_="disclosure",
        text="CVE-2099-31337: heap overflow in zlibber inflate, still exploitable.",
        metadata={
            "doc_id": "disclosure",
            "doc_type": "vulnerability_disclosure",
            "published_at": "2099-01-02",
            "component": "zlibber",
            "advisory": "CVE-2099-31337",
        },
    ),
    Document(
        id_="release",
        text="Version 1.3.2 checks window bounds before every copy.",
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


def resolved(retriever: CARRetriever, anchor) -> list[tuple[str, str]]:
    nodes = retriever.resolve(QUESTION, [NodeWithScore(node=anchor, score=1.0)]).nodes
    return [(n.node.metadata["doc_id"], n.node.metadata[CAR_STATUS]) for n in nodes]


def test_chunks_keep_their_documents_names_and_the_fix_is_found(tmp_path, chroma_client, embed_model):
    chunks = SentenceSplitter().get_nodes_from_documents(DOCUMENTS)
    anchor = next(n for n in chunks if n.metadata["doc_id"] == "disclosure")
    collection = chroma_client.create_collection("user-names", embedding_function=None, configuration={"hnsw": DEFAULT_HNSW})
    index = VectorStoreIndex(
        chunks,
        storage_context=StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection)),
        embed_model=embed_model,
    )
    for store in (chunks, index.vector_store):  # in memory, and Chroma's own metadata filters
        mapped = CARRetriever(index.as_retriever(similarity_top_k=1), store, policy(tmp_path, True))
        assert resolved(mapped, anchor) == [("release", "active"), ("disclosure", "superseded")]
        plain = CARRetriever(index.as_retriever(similarity_top_k=1), store, policy(tmp_path, False))
        assert resolved(plain, anchor) == [("disclosure", "active")]
