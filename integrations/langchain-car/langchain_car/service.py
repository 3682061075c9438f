"""CARServiceRetriever: car-rag's ranking from a ``car-rag serve`` over HTTP, as LangChain documents.

N LangChain apps then share one store (a PostgreSQL-backed one, ``car-rag serve --workers N``)
without holding it in process. The HTTP client, its key, timeouts and retries, and its errors
are the core's (:mod:`car_rag.client`); this module only lays the records out as documents, with
the metadata :class:`~langchain_car.CARRetriever` writes.
"""

from __future__ import annotations

from typing import Any

from car_rag.adapters import checked_k
from car_rag.client import CARServiceClient, ServedRecord
from car_rag.layout import CAR_STAGE1_RANK, CAR_STAGE1_SCORE
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_validator

from langchain_car.documents import document_metadata

__all__ = ["CARServiceRetriever", "served_document"]


def served_document(served: ServedRecord) -> Document:
    """One ranked record as the document :class:`CARRetriever` returns for it: the record's
    metadata in the LangChain layout, then its ``car_*`` annotations, the Stage-1 score being the
    score the server's Stage 1 gave it (its fused score), as CARRetriever writes its Stage 1's."""
    record, car = served.record, dict(served.annotations)
    if car.get(CAR_STAGE1_RANK) is not None:
        car[CAR_STAGE1_SCORE] = served.score
    return Document(id=record.doc_id, page_content=record.text, metadata={**document_metadata(record), **car})


class CARServiceRetriever(BaseRetriever):
    """Controlling-authority retrieval from a ``car-rag serve``: the server runs all three
    stages on its store; the documents carry their status as :class:`CARRetriever`'s do.

    >>> retriever = CARServiceRetriever(url="http://127.0.0.1:8000", api_key=KEY)  # doctest: +SKIP

    ``client_options`` are :class:`~car_rag.client.CARServiceClient`'s (``connect_timeout_s``,
    ``backoff_s``, ``caller``). Errors are the client's:
    :class:`~car_rag.client.CARServiceUnavailable` (down, timed out),
    :class:`~car_rag.client.CARAuthError` (401/403), :class:`~car_rag.client.CARRequestError`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str = Field(description="the server's base URL")
    api_key: SecretStr | str | None = Field(
        default=None, description="the key the server's --api-keys file holds for this app (kept as a SecretStr)"
    )
    k: int = Field(default=5, ge=1, description="the most records returned (as car-rag query --k)")
    timeout_s: float = Field(default=30.0, gt=0, description="how long the server may keep the retriever waiting")
    retries: int = Field(default=2, ge=0, description="further attempts after a refused connection or a 503 with Retry-After")
    as_of: str | None = Field(default=None, description="sent with every request where given (the point in time asked)")
    filters: dict[str, Any] | None = Field(default=None, description="sent with every request where given (/retrieve's filters)")
    client_options: dict[str, Any] = Field(default_factory=dict)
    _client: CARServiceClient = PrivateAttr()

    @field_validator("api_key", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        return SecretStr(value) if isinstance(value, str) else value  # never shown by repr or a trace

    def model_post_init(self, context: Any, /) -> None:
        key = self.api_key.get_secret_value() if isinstance(self.api_key, SecretStr) else self.api_key
        self._client = CARServiceClient(
            self.url, api_key=key, timeout_s=self.timeout_s, retries=self.retries, **self.client_options
        )

    @property
    def client(self) -> CARServiceClient:
        return self._client

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return [served_document(s) for s in self._client.retrieve(query, self._k(k), as_of=self.as_of, filters=self.filters)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return [
            served_document(s) for s in await self._client.aretrieve(query, self._k(k), as_of=self.as_of, filters=self.filters)
        ]

    def _k(self, k: int | None) -> int:
        return self.k if k is None else checked_k(k)
