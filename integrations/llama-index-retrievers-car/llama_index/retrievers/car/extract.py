"""``CARAuthorityExtractor``: car-rag's metadata layout for nodes from raw documents, in an ``IngestionPipeline``.

A LlamaIndex user has ``SimpleDirectoryReader`` output: documents with text and the reader's
metadata, no ``doc_type``, scope or ``supersedes``. This transformation reads them out of the text
with :mod:`car_rag.extract` (the policy's ``[extract]`` section: identifier patterns, doc-type
patterns, the optional LLM route; ``[record_scope]`` for scope) and writes car-rag's flat layout
on every node, so ``VectorStoreIndex(nodes)`` gives an index ``CARRetriever.from_index`` resolves
on. Put it before or after the splitter: the nodes of one document (its ``ref_doc_id``, else a
``doc_id`` in its metadata, else its node id) are read as that one document, in order, and every
chunk carries its record's ``doc_id``, type, scope and edges: one record for authority.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from typing import Any

from car_rag.extract import AuthorityExtractor
from car_rag.layout import CAR_PREFIX
from car_rag.policy import PolicyArg
from llama_index.core.extractors import BaseExtractor
from llama_index.core.schema import BaseNode, TransformComponent
from pydantic import Field

from llama_index.retrievers.car.layout import _HIDDEN_FROM_LLM, LLAMA_INDEX_KEYS, MetadataLayout

__all__ = ["CARAuthorityExtractor", "CARAuthorityMetadataExtractor"]

_LIFTED = ("published_at", "effective_at", "doc_type", "version")
"""Metadata a reader may already carry that is a record field: kept as that field."""


def _authority_metadata(
    nodes: Sequence[BaseNode], policy: PolicyArg, layout: MetadataLayout, title_key: str
) -> list[dict[str, Any]]:
    """car-rag's metadata for each of ``nodes``, in order: the nodes of one document read as
    that document, each given its record's layout; raises ``ValueError`` naming a document
    that cannot be read."""
    groups: dict[str, list[BaseNode]] = {}
    owner: list[str] = []
    for node in nodes:
        doc_id = layout.doc_id(node.metadata, None) or node.ref_doc_id or node.node_id
        groups.setdefault(doc_id, []).append(node)
        owner.append(doc_id)
    raw = []
    for doc_id, members in groups.items():
        metadata = {k: v for k, v in members[0].metadata.items() if k not in LLAMA_INDEX_KEYS and k != "doc_id"}
        lifted = {k: metadata.pop(k) for k in _LIFTED if isinstance(metadata.get(k), str)}
        title = metadata.get(title_key)
        text = "\n\n".join(n.get_content() for n in members)
        raw.append({"doc_id": doc_id, "text": text, **lifted, "metadata": metadata, **({"title": title} if title else {})})
    report = AuthorityExtractor(policy).extract(raw, name="nodes")
    if report.errors:
        raise ValueError("car-rag could not read these documents: " + "; ".join(str(e) for e in report.errors[:10]))
    metas = {r.doc_id: layout.metadata(r) for r in report.records}
    return [metas[doc_id] for doc_id in owner]


def _hide(node: BaseNode, meta: dict[str, Any]) -> None:
    """car-rag's keys out of the embedded text, and the authority bookkeeping out of the LLM's."""
    node.excluded_embed_metadata_keys = sorted({*node.excluded_embed_metadata_keys, *meta})
    hidden = [k for k in meta if k in _HIDDEN_FROM_LLM or k.startswith(CAR_PREFIX)]
    node.excluded_llm_metadata_keys = sorted({*node.excluded_llm_metadata_keys, *hidden})


class CARAuthorityExtractor(TransformComponent):
    """Extracts doc types, scope and supersession edges (with confidence) from nodes' text and
    writes car-rag's metadata layout on them (see the module docstring). A document that cannot be
    read (empty, binary, an LLM failure) raises ``ValueError`` naming it: an ingestion pipeline
    must not drop a document without saying so."""

    policy: PolicyArg = Field(description="A car-rag policy (its [extract] section), or its name or path.")
    layout: MetadataLayout = Field(default_factory=MetadataLayout, description="car-rag's flat metadata layout.")
    title_key: str = Field(default="title", description="Metadata field holding a document's title, if any.")

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        for node, meta in zip(nodes, _authority_metadata(nodes, self.policy, self.layout, self.title_key)):
            node.metadata.update(meta)
            _hide(node, meta)
        return nodes


class CARAuthorityMetadataExtractor(BaseExtractor):
    """The same as a LlamaIndex metadata extractor: ``extract(nodes)`` returns car-rag's metadata
    for each node, and in a pipeline (or ``process_nodes``) it is merged into the nodes it was
    read from, its keys kept out of the embedded text (which BaseExtractor's own merge cannot
    do: it would embed ``supersedes`` and the record's JSON in every chunk). So it merges
    itself: it reads each document once, never rewrites the nodes' text template (that would
    change what every chunk embeds), and a document it cannot read raises ``ValueError`` naming
    it whatever ``raise_on_error`` and ``max_retries`` say (reading is deterministic; the LLM
    route retries on its own)."""

    policy: PolicyArg = Field(description="A car-rag policy (its [extract] section), or its name or path.")
    layout: MetadataLayout = Field(default_factory=MetadataLayout, description="car-rag's flat metadata layout.")
    title_key: str = Field(default="title", description="Metadata field holding a document's title, if any.")

    async def aextract(self, nodes: Sequence[BaseNode]) -> list[dict[str, Any]]:
        return _authority_metadata(nodes, self.policy, self.layout, self.title_key)

    async def aprocess_nodes(
        self,
        nodes: Sequence[BaseNode],
        excluded_embed_metadata_keys: list[str] | None = None,
        excluded_llm_metadata_keys: list[str] | None = None,
        **kwargs: Any,
    ) -> list[BaseNode]:
        done = list(nodes) if self.in_place else [deepcopy(node) for node in nodes]
        for node, meta in zip(done, await self.aextract(done)):
            node.metadata.update(meta)
            _hide(node, meta)
            node.excluded_embed_metadata_keys.extend(excluded_embed_metadata_keys or [])
            node.excluded_llm_metadata_keys.extend(excluded_llm_metadata_keys or [])
        return done
