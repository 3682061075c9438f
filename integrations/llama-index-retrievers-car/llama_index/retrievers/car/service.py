"""CARServiceRetriever: car-rag's ranking from a ``car-rag serve`` over HTTP, as LlamaIndex nodes.

N LlamaIndex apps then share one store (a PostgreSQL-backed one, ``car-rag serve --workers N``)
without holding it in process. The HTTP client, its key, timeouts and retries, and its errors
are the core's (:mod:`car_rag.client`); this module only lays the records out as nodes, with the
metadata :class:`~llama_index.retrievers.car.CARRetriever` writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from car_rag.adapters import checked_k
from car_rag.client import CARServiceClient, ServedRecord
from car_rag.layout import CAR_STAGE1_RANK
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index.retrievers.car.base import DEFAULT_K
from llama_index.retrievers.car.layout import MetadataLayout, record_to_node
from llama_index.retrievers.car.resolver import annotate

__all__ = ["CARServiceRetriever", "served_node"]


def served_node(served: ServedRecord, layout: MetadataLayout | None = None) -> NodeWithScore:
    """One ranked record as the node :class:`CARRetriever` returns for it: the record in the
    ``layout``, its ``car_*`` annotations, its Stage-1 score (or its anchor's)."""
    rank = served.annotations.get(CAR_STAGE1_RANK)
    own = NodeWithScore(node=record_to_node(served.record, layout), score=served.score if rank is not None else None)
    return annotate(own, served.annotations, served.score, rank)


class CARServiceRetriever(BaseRetriever):
    """Controlling-authority retrieval from a ``car-rag serve``: the server runs all three
    stages on its store; the nodes carry their status as :class:`CARRetriever`'s do
    (``car_status``, ``car_superseded_by``, ``car_rule``, ``car_voided_by``, …).

    Args:
        url: the server's base URL, or a :class:`car_rag.client.CARServiceClient` (then
            ``api_key`` and ``client_options`` are its own).
        api_key: the key the server's ``--api-keys`` file holds for this app.
        k: the most records returned (default 5, as ``car-rag query --k``).
        as_of, filters: sent with every request where given (``/retrieve``'s point in time and
            filters, for a server that takes them; one that does not refuses them with a 422).
        layout: where node metadata keeps ``doc_id``, ``doc_type`` and the rest.
        client_options: :class:`~car_rag.client.CARServiceClient`'s ``timeout_s``,
            ``connect_timeout_s``, ``retries``, ``backoff_s``, ``caller``.

    Errors are the client's: :class:`~car_rag.client.CARServiceUnavailable` (down, timed out),
    :class:`~car_rag.client.CARAuthError` (401/403), :class:`~car_rag.client.CARRequestError`.
    """

    def __init__(
        self,
        url: str | CARServiceClient,
        *,
        api_key: str | None = None,
        k: int = DEFAULT_K,
        as_of: str | None = None,
        filters: Mapping[str, Any] | None = None,
        layout: MetadataLayout | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **client_options: Any,
    ) -> None:
        checked_k(k)
        if isinstance(url, CARServiceClient) and (api_key is not None or client_options):
            raise ValueError("pass api_key and client options to the CARServiceClient, not beside it")
        self.client = url if isinstance(url, CARServiceClient) else CARServiceClient(url, api_key=api_key, **client_options)
        self.k = k
        self.options: dict[str, Any] = {"as_of": as_of, "filters": None if filters is None else dict(filters)}
        self.layout = layout or MetadataLayout()
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [served_node(s, self.layout) for s in self.client.retrieve(query_bundle.query_str, self.k, **self.options)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [served_node(s, self.layout) for s in await self.client.aretrieve(query_bundle.query_str, self.k, **self.options)]
