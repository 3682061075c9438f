"""car-rag records as LangChain ``Document`` objects, and back.

The retriever reads authority from document metadata, so the metadata layout is the
contract between a user's vector store and car-rag. It is car-rag's own flat layout
(:class:`car_rag.adapters.RecordLayout`, versioned as ``car_layout``), here with native list
metadata so that Chroma can answer Stage 2's ``{"supersedes": {"$contains": id}}``::

    doc_id            the record id (also the Document id / Chroma id)
    doc_type          the record type policy rules match on
    <scope key>       one flat key per scope entry, e.g. package="lodash", cve_id="CVE-…"
    car_scope_keys    which of the flat keys are scope keys (a list)
    published_at      ISO-8601; effective_at likewise
    version, source, uri, tenant, authority
    supersedes        explicit supersession edges: a list of doc ids
    car_tenant, car_public, allowed_principals   governance, as car_rag.store writes it
    car_metadata_json the record's free ``metadata``, JSON-encoded (Chroma metadata is flat)
    car_layout        the layout version

Documents that were not written by this package are read too, as long as they carry
``doc_type`` and the policy's scope keys as flat keys (lists may be JSON strings). Chroma
rejects empty lists, so empty ``supersedes`` / ``allowed_principals`` / scopes are left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from car_rag import Policy, Record, load_records
from car_rag.adapters import RecordLayout
from car_rag.records import parse_records
from langchain_core.documents import Document

__all__ = ["document_metadata", "document_to_record", "load_documents", "record_to_document", "records_to_documents"]

_LAYOUT = RecordLayout(json_lists=False)


def document_metadata(record: Record) -> dict[str, Any]:
    """Flat metadata (Chroma-compatible) carrying every field of ``record`` but its text."""
    return _LAYOUT.metadata(record)


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


def document_to_record(document: Document, policy: Policy | None = None, *, doc_id_key: str = "doc_id") -> Record:
    """The car-rag :class:`~car_rag.Record` a document's metadata describes.

    ``doc_id`` comes from ``metadata[doc_id_key]``, else the document's ``id``. Scope keys are
    those listed in ``car_scope_keys``, else the ``policy``'s scope keys present in the
    metadata. Raises ``ValueError`` (:class:`car_rag.adapters.LayoutError`) naming the record and
    field when the metadata cannot make a valid record.
    """
    layout = _LAYOUT if doc_id_key == _LAYOUT.doc_id_key else _LAYOUT.model_copy(update={"doc_id_key": doc_id_key})
    return layout.record(document.metadata or {}, document.page_content, policy, default_id=document.id)
