"""CARRetriever: any LlamaIndex retriever as Stage 1, authority resolved on the same store; ``from_index``
defaults to car-rag's own Stage 1 (:mod:`~llama_index.retrievers.car.index_retriever`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, overload

from car_rag import CallerContext, Policy, load_policy
from car_rag.adapters import checked_k
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.base import BaseIndex
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index.retrievers.car.index_retriever import CARIndexRetriever
from llama_index.retrievers.car.layout import MetadataLayout, node_doc_id
from llama_index.retrievers.car.lookup import AuthorityLookup, authority_lookup
from llama_index.retrievers.car.resolver import AuthorityResolver, Resolution

__all__ = ["CARRetriever", "DEFAULT_K"]

DEFAULT_K = 5
"""Records returned by default: the core's (``car-rag query --k``), and langchain-car's."""


def _index_behind(store: Any, retriever: BaseRetriever) -> BaseIndex[Any] | None:
    """The index ``retriever`` searches, when ``store`` is that index's vector store and keeps no
    text (LlamaIndex's in-memory default, ``SimpleVectorStore``): the index keeps its nodes in
    its docstore, where Stage 2 then looks them up."""
    if not isinstance(store, BasePydanticVectorStore) or store.stores_text or not isinstance(retriever, VectorIndexRetriever):
        return None
    index = getattr(retriever, "_index", None)  # VectorIndexRetriever keeps its index, with no public name for it
    return index if isinstance(index, BaseIndex) and getattr(index, "vector_store", None) is store else None


class CARRetriever(BaseRetriever):
    """Controlling-authority retrieval around an existing retriever.

    Stage 1 is ``retriever`` (a ``VectorIndexRetriever``, a ``QueryFusionRetriever``, a
    ``BM25Retriever``, …): its nodes are the anchors, in its order. Stage 2 looks up, by
    metadata filter only, the records in ``store`` that can supersede each anchor (same
    scope keys, superseding types), transitively; Stage 3 is car-rag's supersession graph
    and active frontier. The result ranks active records first, each in its anchor's Stage-1
    order, and superseded ones after them (except one voided only by records ``caller`` may
    not read: nothing shown takes its place, so it keeps its own); nothing is dropped. Every
    node carries its status in metadata (``car_status``, ``car_superseded_by``, ``car_rule``,
    ``car_voided_by``, ``car_voids``, ``car_role``, ``car_stage1_score``,
    ``car_stage1_rank``, …).

    Args:
        retriever: the Stage-1 retriever to wrap.
        store: where Stage 2 looks records up: the vector store behind the index (any
            ``BasePydanticVectorStore`` whose ``get_nodes`` takes metadata filters; one that
            keeps no text, such as the in-memory default, stands for the docstore of the
            index ``retriever`` searches), the index itself, a docstore or list of nodes (held
            in memory), or an ``AuthorityLookup``.
        policy: a car-rag policy, or the name or path of one (``"security-advisory"``).
        k: the most records returned (default 5, as the core's ``car-rag query --k``): the
            active frontier first, then superseded provenance; a record's chunks count once.
        k1: keep only the first ``k1`` Stage-1 documents as anchors (default: all).
        doc_id_key: the metadata key holding the record id (default ``doc_id``; the
            ``layout``'s when one is given).
        layout: where node metadata keeps ``doc_id``, ``doc_type`` and the rest.
        caller: the reader the results are for; records they may not read are never
            returned, and a record voided only by such a record is reported superseded
            with ``car_hidden_superseder``. Filter Stage 1 for the caller yourself
            (e.g. ``MetadataFilters`` on the wrapped retriever).
        scope_lookup_limit: most records one scope id named in the query may pull in.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        store: Any,
        policy: Policy | str | Path,
        *,
        k: int = DEFAULT_K,
        k1: int | None = None,
        doc_id_key: str | None = None,
        layout: MetadataLayout | None = None,
        caller: CallerContext | None = None,
        scope_lookup_limit: int = 20,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        checked_k(k)
        if k1 is not None and k1 < 1:
            raise ValueError(f"k1 must be >= 1 or None, got {k1}")
        self.retriever = retriever
        self.policy = load_policy(policy)
        self.layout = layout or MetadataLayout()
        if doc_id_key is not None:
            self.layout = self.layout.model_copy(update={"doc_id_key": doc_id_key})
        self.k = k
        self.lookup: AuthorityLookup = authority_lookup(_index_behind(store, retriever) or store, self.layout)
        self.k1 = k1
        self.caller = caller
        self.resolver = AuthorityResolver(
            self.lookup,
            self.policy,
            self.layout,
            scope_lookup_limit=scope_lookup_limit,
            channel=type(retriever).__name__,
        )
        super().__init__(callback_manager=callback_manager or getattr(retriever, "callback_manager", None), verbose=verbose)

    @overload
    @classmethod
    def from_index(
        cls, index: Any, policy: Policy | str | Path, *, retriever: BaseRetriever, similarity_top_k: None = None, **kwargs: Any
    ) -> CARRetriever: ...

    @overload
    @classmethod
    def from_index(
        cls, index: Any, policy: Policy | str | Path, *, retriever: None = None, similarity_top_k: int, **kwargs: Any
    ) -> CARRetriever: ...

    @overload
    @classmethod
    def from_index(
        cls, index: Any, policy: Policy | str | Path, *, retriever: None = None, similarity_top_k: None = None, **kwargs: Any
    ) -> CARIndexRetriever: ...

    @classmethod
    def from_index(
        cls,
        index: Any,
        policy: Policy | str | Path,
        *,
        retriever: BaseRetriever | None = None,
        similarity_top_k: int | None = None,
        **kwargs: Any,
    ) -> CARRetriever | CARIndexRetriever:
        """car-rag over a ``VectorStoreIndex``: by default the core's own Stage 1 (the index's dense
        search and BM25 over its nodes, calibrated fusion, scope linking and the scope posterior;
        :class:`~llama_index.retrievers.car.CARIndexRetriever`, ``kwargs`` go to it).

        Wrapping a retriever of your own stays available: pass ``retriever`` (or ``similarity_top_k``
        for ``index.as_retriever(similarity_top_k=...)``); authority is then resolved on
        ``index.vector_store``, or on ``index.docstore`` when the vector store keeps no text."""
        if retriever is None and similarity_top_k is not None:
            retriever = index.as_retriever(similarity_top_k=similarity_top_k)
        if retriever is None:
            return CARIndexRetriever(index, policy, **kwargs)
        return cls(retriever, index, policy, **kwargs)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {"retriever": self.retriever}

    # ------------------------------------------------------------------ resolution alone
    def resolve(self, query: QueryType, nodes: list[NodeWithScore]) -> Resolution:
        """Stages 2 and 3 for Stage-1 ``nodes`` you already have (sync); every record, not capped at ``k``."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        return self.resolver.resolve(bundle.query_str, nodes, caller=self.caller, k1=self.k1)

    async def aresolve(self, query: QueryType, nodes: list[NodeWithScore]) -> Resolution:
        """Stages 2 and 3 for Stage-1 ``nodes`` you already have (async lookups)."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        return await self.resolver.aresolve(bundle.query_str, nodes, caller=self.caller, k1=self.k1)

    # ------------------------------------------------------------------ BaseRetriever
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        anchors = self.retriever.retrieve(query_bundle)
        return self._top(self.resolver.resolve(query_bundle.query_str, anchors, caller=self.caller, k1=self.k1).nodes)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        anchors = await self.retriever.aretrieve(query_bundle)
        resolution = await self.resolver.aresolve(query_bundle.query_str, anchors, caller=self.caller, k1=self.k1)
        return self._top(resolution.nodes)

    def _top(self, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        """The nodes of the first ``k`` records (a record's chunks count once)."""
        kept: set[str] = set()
        out = []
        for nws in nodes:
            doc_id = node_doc_id(nws.node, self.layout)
            if doc_id not in kept and len(kept) >= self.k:
                continue
            kept.add(doc_id)
            out.append(nws)
        return out
