"""How a car-rag record is laid out as a LlamaIndex node, and back.

A node carries the record's text and, as top-level metadata, what authority resolution
reads: ``doc_id``, ``doc_type``, the policy's scope keys (``package``, ``cve_id``, …),
dates, version, provenance and governance. It is the layout car-rag's own store writes to
Chroma (:func:`car_rag.store.chroma_metadata`), so a vector store filled by LlamaIndex
answers the same Stage-2 lookups (``doc_type``/scope-key filters) as a car-rag store.

Ingest your own documents the same way: put the keys in ``Document.metadata`` before
splitting, and every chunk inherits them. Lists (``supersedes``, ``allowed_principals``)
are written as JSON strings by default, because LlamaIndex's vector stores require flat
metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from car_rag import Policy, Record, load_records
from car_rag.eligibility import governance_metadata
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode

__all__ = [
    "CAR_METADATA_PREFIX",
    "MetadataLayout",
    "RECORD_METADATA_KEYS",
    "load_nodes",
    "node_to_record",
    "record_to_node",
    "records_to_nodes",
]

CAR_METADATA_PREFIX = "car_"
"""Metadata keys car-rag adds to the nodes it returns start with this prefix."""

RECORD_METADATA_KEYS = (
    "published_at",
    "effective_at",
    "version",
    "source",
    "uri",
    "authority",
    "tenant",
    "allowed_principals",
    "supersedes",
)
"""Record fields stored under their own name (besides ``doc_id``, ``doc_type`` and the scope keys)."""

_LLAMA_INDEX_KEYS = frozenset({"_node_content", "_node_type", "document_id", "ref_doc_id"})
_GOVERNANCE_KEYS = ("car_tenant", "car_public")
_HIDDEN_FROM_LLM = ("tenant", "allowed_principals", "supersedes", "authority", *_GOVERNANCE_KEYS)


class MetadataLayout(BaseModel):
    """Where a record's fields live in node metadata. The defaults are car-rag's own layout."""

    model_config = ConfigDict(frozen=True)

    doc_id_key: str = Field(
        default="doc_id",
        description="Metadata key holding the record id; when absent, the node's ref_doc_id, then its node id, is used.",
    )
    doc_type_key: str = Field(default="doc_type", description="Metadata key holding the record's doc_type.")
    json_lists: bool = Field(
        default=True,
        description="Write list fields (supersedes, allowed_principals) as JSON strings, for vector stores "
        "that only accept flat metadata (LlamaIndex's ChromaVectorStore among them).",
    )

    def doc_id(self, node: BaseNode) -> str:
        value = node.metadata.get(self.doc_id_key)
        if isinstance(value, str) and value and value != "None":
            return value
        return node.ref_doc_id or node.node_id

    def doc_type(self, node: BaseNode) -> str | None:
        value = node.metadata.get(self.doc_type_key)
        return value if isinstance(value, str) and value else None


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def record_to_node(record: Record, layout: MetadataLayout | None = None) -> TextNode:
    """A :class:`~llama_index.core.schema.TextNode` for one record: node id and ``ref_doc_id`` are
    the ``doc_id``; metadata in car-rag's layout; car-rag's keys are kept out of the embedded text."""
    layout = layout or MetadataLayout()
    meta: dict[str, Any] = {
        key: value
        for key, value in record.metadata.items()
        if isinstance(value, (str, int, float)) and key not in RECORD_METADATA_KEYS
    }
    meta[layout.doc_id_key] = record.doc_id
    meta[layout.doc_type_key] = record.doc_type
    optional: dict[str, Any] = {
        "published_at": _when(record.published_at),
        "effective_at": _when(record.effective_at),
        "version": record.version,
        "source": record.source,
        "uri": record.uri,
        "authority": record.authority,
        "tenant": record.tenant,
    }
    meta.update({k: v for k, v in optional.items() if v is not None})
    for name in ("supersedes", "allowed_principals"):
        values = list(getattr(record, name))
        if values:
            meta[name] = json.dumps(values) if layout.json_lists else values
    governance = governance_metadata(record)
    meta.update({k: governance[k] for k in _GOVERNANCE_KEYS})
    meta.update(record.scope)
    node = TextNode(
        id_=record.doc_id,
        text=record.text,
        metadata=meta,
        excluded_embed_metadata_keys=list(meta),  # embed the text alone, as car-rag does
        excluded_llm_metadata_keys=[k for k in meta if k in _HIDDEN_FROM_LLM],
    )
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=record.doc_id)
    return node


def records_to_nodes(records: Iterable[Record | Mapping[str, Any]], layout: MetadataLayout | None = None) -> list[TextNode]:
    """Nodes for records (or record dicts in car-rag's JSONL format), ready for a ``VectorStoreIndex``."""
    out = []
    for item in records:
        record = item if isinstance(item, Record) else Record.model_validate(item)
        out.append(record_to_node(record, layout))
    return out


def load_nodes(path: str | Path, layout: MetadataLayout | None = None) -> list[TextNode]:
    """Nodes for a corpus in car-rag's JSONL record format; a bad line raises, naming it."""
    report = load_records(path)
    if report.errors:
        raise ValueError("cannot load corpus:\n" + "\n".join(str(e) for e in report.errors[:20]))
    return records_to_nodes(report.records, layout)


def _as_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            parsed = json.loads(text)
            return [str(v) for v in parsed]
        return [text]
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    raise ValueError(f"expected a list of ids, got {type(value).__name__}")


def node_to_record(
    node: BaseNode, policy: Policy, layout: MetadataLayout | None = None, *, text: str | None = None
) -> Record:
    """The car-rag :class:`~car_rag.Record` a node stands for, read from its metadata.

    Scope is read from the policy's scope keys. Raises :class:`ValueError` when the node has
    no ``doc_type`` or its metadata does not validate (a bad date, an authority outside 0..1).
    """
    layout = layout or MetadataLayout()
    meta = node.metadata
    doc_type = layout.doc_type(node)
    if doc_type is None:
        raise ValueError(f"node {node.node_id!r} has no {layout.doc_type_key!r} metadata")
    fields: dict[str, Any] = {
        "doc_id": layout.doc_id(node),
        "doc_type": doc_type,
        "text": text if text is not None else node.get_content(),
        "scope": {k: str(meta[k]) for k in policy.scope_keys if meta.get(k) not in (None, "")},
    }
    for name in RECORD_METADATA_KEYS:
        value = meta.get(name)
        if value is None or value == "":
            continue
        if name in ("supersedes", "allowed_principals"):
            fields[name] = _as_list(value)
        elif name == "authority":
            fields[name] = float(value)
        else:
            fields[name] = value
    known = {layout.doc_id_key, layout.doc_type_key, *RECORD_METADATA_KEYS, *policy.scope_keys, *_GOVERNANCE_KEYS}
    fields["metadata"] = {
        k: v
        for k, v in meta.items()
        if k not in known and k not in _LLAMA_INDEX_KEYS and not k.startswith(CAR_METADATA_PREFIX)
    }
    try:
        return Record.model_validate(fields)
    except Exception as exc:  # pydantic's ValidationError, or a bad JSON list
        raise ValueError(f"node {node.node_id!r}: metadata is not a valid car-rag record: {exc}") from exc

