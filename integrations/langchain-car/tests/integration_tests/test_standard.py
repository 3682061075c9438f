"""langchain-tests' standard suites, on real Chroma and the real MiniLM."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import EmbeddingsIntegrationTests, RetrieversIntegrationTests

from langchain_car import CAREmbeddings, CARRetriever
from tests.corpus import QUERY
from tests.integration_tests import stores


class TestCARRetrieverStandard(RetrieversIntegrationTests):
    """Stage 1: a Chroma vector store retriever; Stage 2: the same Chroma collection."""

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return CARRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        chroma = stores.corpus_chroma()
        return {
            "base_retriever": chroma.as_retriever(search_kwargs={"k": 4}),
            "store": chroma,
            "policy": "security-advisory",
            "k": 2,
        }

    @property
    def retriever_query_example(self) -> str:
        return QUERY


class TestCAREmbeddingsStandard(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return CAREmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {}
