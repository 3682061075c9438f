"""Supersession expander: adds, from the store, the records that void the retrieved nodes."""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index.postprocessor.car.base import CARPostprocessorBase

__all__ = ["SupersessionExpander"]


class SupersessionExpander(CARPostprocessorBase):
    """Treats the incoming nodes as anchors and adds their authority closure from ``store``.

    For each node, the records that can supersede it (same scope on a rule's keys, of a
    superseding type, or in its scope bucket) are looked up by metadata filter, transitively,
    and car-rag's rules decide who voids whom. The output is car-rag's ranking: active
    records first, each in its anchor's order, superseded ones after them, every node
    marked with ``car_status``, ``car_superseded_by``, ``car_rule`` and the rest. Nothing is
    dropped; put an :class:`ActiveStatusFilter` after it to drop what is superseded.

    Example:
        ``RetrieverQueryEngine.from_args(index.as_retriever(), node_postprocessors=[
        SupersessionExpander(store=index.vector_store, policy="security-advisory")])``
    """

    def __init__(self, store: Any = None, policy: Any = None, **kwargs: Any) -> None:
        super().__init__(store=store, policy=policy, **kwargs)
        if self.store is None:
            raise ValueError("SupersessionExpander needs a store to look superseders up in")

    @classmethod
    def class_name(cls) -> str:
        return "SupersessionExpander"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return self._resolve(nodes, query_bundle).nodes

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        return (await self._aresolve(nodes, query_bundle)).nodes
