"""car-rag records as LangChain ``Document`` objects, and back.

The retriever reads authority from document metadata, so the metadata layout is the
contract between a user's vector store and car-rag. :func:`document_metadata` writes it;
:func:`document_to_record` reads it (also from documents that were not written by this
package, as long as they carry ``doc_type`` and the policy's scope keys as flat keys)::

    doc_id            the record id (also the Document id / Chroma id)
    doc_type          the record type policy rules match on
    <scope key>       one flat key per scope entry, e.g. package="lodash", cve_id="CVE-…"
    car_scope_keys    which of the flat keys are scope keys (a list)
    published_at      ISO-8601; effective_at likewise
    version, source, uri, tenant, authority
    supersedes        explicit supersession edges: a list of doc ids (Chroma list metadata,
                      so Stage 2 can ask ``{"supersedes": {"$contains": id}}``)
    car_tenant, car_public, allowed_principals   governance, as car_rag.store writes it
    car_metadata_json the record's free ``metadata``, JSON-encoded (Chroma metadata is flat)

It extends :func:`car_rag.store.chroma_metadata` (the layout of car-rag's own Chroma
collections) with what a store needs to rebuild the whole record. Chroma rejects empty
lists, so empty ``supersedes`` / ``allowed_principals`` / scopes are left out.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from car_rag import Policy, Record, load_records, parse_records
from car_rag.store import RESERVED_METADATA, chroma_metadata
from langchain_core.documents import Document
from pydantic import ValidationError

__all__ = [
    "CAR_METADATA_PREFIX",
    "LAYOUT_KEYS",
    "document_metadata",
    "document_to_record",
    "load_documents",
    "record_to_document",
    "records_to_documents",
]

CAR_METADATA_PREFIX = "car_"
"""Metadata keys starting with this are car-rag's own (layout and retrieval annotations)."""

LAYOUT_KEYS = frozenset(
    RESERVED_METADATA
    | {"effective_at", "uri", "authority", "supersedes", "car_scope_keys", "car_metadata_json"}
)
"""Keys the layout uses for record fields; a scope key may not take one of these names."""

_RECORD_STRINGS = ("version", "source", "uri", "tenant")


def document_metadata(record: Record) -> dict[str, Any]:
    """Flat metadata (Chroma-compatible) carrying every field of ``record`` but its text."""
    clash = sorted(k for k in record.scope if k in LAYOUT_KEYS or k.startswith(CAR_METADATA_PREFIX))
    if clash:
        raise ValueError(f"record {record.doc_id!r}: scope keys {clash} collide with the metadata layout")
    meta = chroma_metadata(record)
    meta["doc_id"] = record.doc_id
    if record.effective_at is not None:
        meta["effective_at"] = record.effective_at.isoformat()
    if record.uri is not None:
        meta["uri"] = record.uri
    if record.authority is not None:
        meta["authority"] = record.authority
    if record.supersedes:
        meta["supersedes"] = list(record.supersedes)
    if record.scope:
        meta["car_scope_keys"] = list(record.scope)
    if record.metadata:
        meta["car_metadata_json"] = json.dumps(record.metadata, ensure_ascii=False, sort_keys=True, default=str)
    return meta


def record_to_document(record: Record) -> Document:
    """A ``Document`` with the record's text, id and :func:`document_metadata`."""
    return Document(id=record.doc_id, page_content=record.text, metadata=document_metadata(record))


def records_to_documents(records: Iterable[Record | Mapping[str, Any]]) -> list[Document]:
    """Documents for records (or record dicts in the neutral JSONL format); invalid ones raise."""
    report = parse_records(list(records))
    if report.errors:
        raise ValueError("invalid records: " + "; ".join(str(e) for e in report.errors[:5]))
    return [record_to_document(r) for r in report.records]


def load_documents(path: str | Path, *, strict: bool = True) -> list[Document]:
    """Documents for a corpus in car-rag's JSONL record format.

    With ``strict`` (default) any bad line raises ``ValueError`` naming it; otherwise bad
    lines are skipped with a warning and every good line is returned.
    """
    report = load_records(path)
    if report.errors:
        message = f"{len(report.errors)} invalid records: " + "; ".join(str(e) for e in report.errors[:5])
        if strict:
            raise ValueError(message)
        warnings.warn(message, stacklevel=2)
    return [record_to_document(r) for r in report.records]


def _strings(value: Any) -> list[str]:
    """A list of ids from list metadata, a JSON-encoded list, or one string."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            decoded = json.loads(text)
            if isinstance(decoded, list):
                return [str(v) for v in decoded]
        return [text] if text else []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise TypeError(f"expected a list of ids, got {type(value).__name__}")


def document_to_record(document: Document, policy: Policy | None = None, *, id_key: str = "doc_id") -> Record:
    """The car-rag :class:`~car_rag.Record` a document's metadata describes.

    ``doc_id`` comes from ``metadata[id_key]``, else the document's ``id``. Scope keys are
    those listed in ``car_scope_keys``, else the ``policy``'s scope keys present in the
    metadata. Keys outside the layout (and not ``car_``-prefixed) become the record's free
    ``metadata``. Raises ``ValueError`` when the metadata cannot make a valid record.
    """
    meta = dict(document.metadata or {})
    doc_id = meta.get(id_key) if meta.get(id_key) is not None else document.id
    if not doc_id:
        raise ValueError(f"document has no {id_key!r} metadata and no id: {document.page_content[:60]!r}")
    if "car_scope_keys" in meta:
        scope_keys = _strings(meta["car_scope_keys"])
    else:
        scope_keys = [k for k in (policy.scope_keys if policy is not None else ()) if k in meta]
    fields: dict[str, Any] = {
        "doc_id": doc_id,
        "text": document.page_content,
        "doc_type": meta.get("doc_type"),
        "scope": {k: meta[k] for k in scope_keys if meta.get(k) is not None},
        "supersedes": _strings(meta.get("supersedes")),
        "allowed_principals": _strings(meta.get("allowed_principals")),
    }
    for name in ("published_at", "effective_at", "authority", *_RECORD_STRINGS):
        if meta.get(name) is not None:
            fields[name] = meta[name]
    if isinstance(fields.get("authority"), int) and not isinstance(fields["authority"], bool):
        fields["authority"] = float(fields["authority"])
    if "car_metadata_json" in meta:
        fields["metadata"] = json.loads(meta["car_metadata_json"])
    else:
        skip = LAYOUT_KEYS | set(scope_keys) | {id_key}
        fields["metadata"] = {k: v for k, v in meta.items() if k not in skip and not k.startswith(CAR_METADATA_PREFIX)}
    if fields["doc_type"] is None:
        raise ValueError(f"document {doc_id!r} has no 'doc_type' metadata: car-rag cannot apply a policy to it")
    try:
        return Record.model_validate(fields)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"document {doc_id!r}: metadata is not a valid car-rag record: {details}") from None
