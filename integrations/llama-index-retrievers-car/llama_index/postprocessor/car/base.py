"""What the car-rag postprocessors share: the store, the policy and the resolver over them."""

from __future__ import annotations

from typing import Any

from car_rag import CallerContext
from car_rag.policy import PolicyArg
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index.retrievers.car.layout import MetadataLayout
from llama_index.retrievers.car.lookup import AuthorityLookup, NodeAuthorityLookup, authority_lookup
from llama_index.retrievers.car.resolver import AuthorityResolver, Resolution

__all__ = ["CARPostprocessorBase"]


class CARPostprocessorBase(BaseNodePostprocessor):
    """Fields and resolution shared by :class:`SupersessionExpander` and :class:`ActiveStatusFilter`."""

    policy: PolicyArg | None = Field(
        default=None, description="car-rag policy (or the name or path of one) whose rules decide supersession."
    )
    store: Any = Field(
        default=None,
        exclude=True,
        description="Where superseders are looked up by metadata filter: the vector store behind the index, "
        "a docstore, a list of nodes, or an AuthorityLookup.",
    )
    layout: MetadataLayout = Field(
        default_factory=MetadataLayout, description="Where node metadata keeps doc_id, doc_type and the scope keys."
    )
    caller: CallerContext | None = Field(
        default=None,
        exclude=True,
        description="The reader results are for: records they may not read are never returned. None: unrestricted.",
    )
    scope_lookup_limit: int = Field(
        default=20, ge=1, description="Most records one scope id named in the query (e.g. a CVE id) may pull in."
    )
    _lookup: AuthorityLookup | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._lookup = authority_lookup(self.store, self.layout) if self.store is not None else None

    def _resolver(self, nodes: list[NodeWithScore]) -> AuthorityResolver:
        if self.policy is None:
            raise ValueError(f"{self.class_name()} needs a car-rag policy to resolve supersession")
        lookup = self._lookup or NodeAuthorityLookup([n.node for n in nodes], self.layout)
        return AuthorityResolver(lookup, self.policy, self.layout, scope_lookup_limit=self.scope_lookup_limit)

    def _resolve(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None) -> Resolution:
        query = query_bundle.query_str if query_bundle is not None else ""
        return self._resolver(nodes).resolve(query, nodes, caller=self.caller)

    async def _aresolve(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None) -> Resolution:
        query = query_bundle.query_str if query_bundle is not None else ""
        return await self._resolver(nodes).aresolve(query, nodes, caller=self.caller)
