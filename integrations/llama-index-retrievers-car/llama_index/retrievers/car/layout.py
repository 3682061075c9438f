"""How a car-rag record is laid out as a LlamaIndex node, and back.

A node carries the record's text and, as metadata, car-rag's flat layout
(:class:`car_rag.adapters.RecordLayout`, re-exported here as :class:`MetadataLayout`): ``doc_id``,
``doc_type``, the policy's scope keys (``package``, ``cve_id``, …), dates, version,
provenance and governance, lists as JSON strings because LlamaIndex's vector stores require
flat metadata. A vector store filled by LlamaIndex then answers the same Stage-2 lookups
as a car-rag store. Ingest your own documents the same way: put the keys in
``Document.metadata`` before splitting, and every chunk inherits them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from car_rag import Policy, Record, load_records
from car_rag.adapters import RecordLayout as MetadataLayout
from car_rag.layout import CAR_PREFIX
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode

__all__ = [
    "LLAMA_INDEX_KEYS",
    "MetadataLayout",
    "load_nodes",
    "node_doc_id",
    "node_to_record",
    "record_to_node",
    "records_to_nodes",
]

LLAMA_INDEX_KEYS = frozenset({"_node_content", "_node_type", "document_id", "ref_doc_id"})
"""Keys vector stores add to node metadata for their own bookkeeping: never free metadata."""
_HIDDEN_FROM_LLM = frozenset({"tenant", "allowed_principals", "supersedes", "authority"})
_DEFAULT = MetadataLayout()


def node_doc_id(node: BaseNode, layout: MetadataLayout | None = None) -> str:
    """The record id of a node: its metadata's, else its ``ref_doc_id``, else its node id."""
    return (layout or _DEFAULT).doc_id(node.metadata, None) or node.ref_doc_id or node.node_id


def record_to_node(record: Record, layout: MetadataLayout | None = None) -> TextNode:
    """A :class:`~llama_index.core.schema.TextNode` for one record: node id and ``ref_doc_id`` are
    the ``doc_id``; metadata in car-rag's layout; car-rag's keys are kept out of the embedded text."""
    meta = (layout or _DEFAULT).metadata(record)
    node = TextNode(
        id_=record.doc_id,
        text=record.text,
        metadata=meta,
        excluded_embed_metadata_keys=list(meta),  # embed the text alone, as car-rag does
        excluded_llm_metadata_keys=[k for k in meta if k in _HIDDEN_FROM_LLM or k.startswith(CAR_PREFIX)],
    )
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=record.doc_id)
    return node


def records_to_nodes(records: Iterable[Record | Mapping[str, Any]], layout: MetadataLayout | None = None) -> list[TextNode]:
    """Nodes for records (or record dicts in car-rag's JSONL format), ready for a ``VectorStoreIndex``."""
    return [record_to_node(r if isinstance(r, Record) else Record.model_validate(r), layout) for r in records]


def load_nodes(path: str | Path, layout: MetadataLayout | None = None) -> list[TextNode]:
    """Nodes for a corpus in car-rag's JSONL record format; a bad line raises, naming it."""
    report = load_records(path)
    if report.errors:
        raise ValueError("cannot load corpus:\n" + "\n".join(str(e) for e in report.errors[:20]))
    return records_to_nodes(report.records, layout)


def node_to_record(node: BaseNode, policy: Policy, layout: MetadataLayout | None = None, *, text: str | None = None) -> Record:
    """The car-rag :class:`~car_rag.Record` a node stands for, read from its metadata.

    Raises :class:`car_rag.adapters.LayoutError` (a ``ValueError``) naming the record and field when
    the node has no ``doc_type`` or its metadata does not validate.
    """
    layout = layout or _DEFAULT
    default = node.ref_doc_id or node.node_id
    content = text if text is not None else node.get_content()
    return layout.record(node.metadata, content, policy, default_id=default, foreign_keys=LLAMA_INDEX_KEYS)
