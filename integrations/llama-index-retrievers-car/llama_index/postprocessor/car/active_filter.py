"""Active-status filter: drops (or marks and moves back) the nodes something supersedes."""

from __future__ import annotations

from typing import Literal

from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index.postprocessor.car.base import CARPostprocessorBase
from llama_index.retrievers.car.layout import node_doc_id
from llama_index.retrievers.car.resolver import CAR_HIDDEN_SUPERSEDER, CAR_STATUS, Resolution

__all__ = ["ActiveStatusFilter"]


class ActiveStatusFilter(CARPostprocessorBase):
    """Keeps the active frontier in front of the model.

    Nodes that already carry ``car_status`` (from :class:`CARRetriever` or a
    :class:`SupersessionExpander`) are filtered on it. Other nodes are resolved first: with
    a ``store``, a node is superseded when any record there voids it (its
    ``car_superseded_by`` names them, though they are not added: that is the expander's
    job); without one, only when another incoming node voids it. Either way a ``policy``
    is needed.

    ``mode="drop"`` removes superseded nodes; the provenance stays on the nodes that void
    them (``car_voids`` names each dropped record and the rule). ``mode="mark"``
    keeps every node in car-rag's order: active ones first, superseded ones after them,
    marked in metadata, except a node voided only by records the caller may not read
    (``car_hidden_superseder``), which keeps its place as nothing shown stands in for it.
    Nodes without car-rag metadata (``car_status="unresolved"``) are always kept.
    """

    mode: Literal["drop", "mark"] = Field(
        default="drop",
        description="'drop': remove superseded nodes; 'mark': keep them after the active ones, marked in metadata.",
    )

    @classmethod
    def class_name(cls) -> str:
        return "ActiveStatusFilter"

    def _needs_resolution(self, nodes: list[NodeWithScore]) -> bool:
        return any(CAR_STATUS not in n.node.metadata and self.layout.doc_type(n.node.metadata) is not None for n in nodes)

    def _apply(self, nodes: list[NodeWithScore], resolution: Resolution | None) -> list[NodeWithScore]:
        if resolution is not None:
            incoming = {node_doc_id(n.node, self.layout) for n in nodes}
            # The resolution brings in superseders from the store; a filter only filters.
            nodes = [n for n in resolution.nodes if node_doc_id(n.node, self.layout) in incoming]
        if self.mode == "drop":
            return [n for n in nodes if n.node.metadata.get(CAR_STATUS) != "superseded"]
        displaced = [_displaced(n) for n in nodes]
        return [n for n, d in zip(nodes, displaced) if not d] + [n for n, d in zip(nodes, displaced) if d]

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        resolution = self._resolve(nodes, query_bundle) if self._needs_resolution(nodes) else None
        return self._apply(nodes, resolution)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        resolution = await self._aresolve(nodes, query_bundle) if self._needs_resolution(nodes) else None
        return self._apply(nodes, resolution)


def _displaced(nws: NodeWithScore) -> bool:
    """Superseded with a readable record in its place (:attr:`car_rag.RetrievedRecord.displaced`)."""
    meta = nws.node.metadata
    return meta.get(CAR_STATUS) == "superseded" and not meta.get(CAR_HIDDEN_SUPERSEDER)
