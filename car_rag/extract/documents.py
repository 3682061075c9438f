"""Raw documents: what a user has before car-rag's record fields exist.

A raw document needs only ``doc_id`` and ``text``. ``title`` goes to the record's metadata
(and resolves citations by title); the fields a :class:`~car_rag.records.Record` knows
(``published_at``, ``doc_type``, ``scope``, ``supersedes`` …) are kept as given and win over
anything extracted; every other field is kept as metadata. A document that cannot be read
(no text, binary data, larger than the limit) is a :class:`~car_rag.records.RecordError`
naming it and its field; the rest go on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag.records import Record, RecordError, json_line_error

__all__ = ["MAX_CHARS", "RawDocument", "raw_documents", "read_raw"]

MAX_CHARS = 2_000_000
"""The largest text read by default (characters): past it a document is reported, not cut."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
BINARY_SHARE = 0.05
"""A text in which more than this share of characters are control characters (or U+FFFD,
what a decoder puts for bytes it could not read) is binary data, not a document."""

RECORD_FIELDS = frozenset(Record.model_fields) - {"doc_id", "text", "metadata", "supersedes_confidence"}


@dataclass(frozen=True)
class RawDocument:
    """One raw input document (see the module docstring)."""

    doc_id: str
    text: str
    title: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    """Record fields given with it (``published_at``, ``doc_type`` …): kept as they are."""
    metadata: dict[str, Any] = field(default_factory=dict)


def _problem(item: dict[str, Any], max_chars: int) -> tuple[str, str] | None:
    """(field, what is wrong) with one raw document, or None."""
    doc_id = item.get("doc_id")
    if not isinstance(doc_id, str) or not doc_id.strip():
        return "doc_id", f"a raw document needs a doc_id (a non-empty string), got {doc_id!r:.60}"
    text = item.get("text")
    if not isinstance(text, str):
        return "text", f"a raw document needs its text as a string, got {type(text).__name__}"
    if not text.strip():
        return "text", "empty: there is nothing to extract from"
    if len(text) > max_chars:
        return "text", f"{len(text):,} characters, more than the limit of {max_chars:,} (raise it with --max-chars)"
    controls = len(_CONTROL.findall(text, 0, min(len(text), 100_000)))
    if controls > BINARY_SHARE * min(len(text), 100_000):
        return "text", f"binary data, not text: {controls:,} control or undecodable characters in the first 100,000"
    title = item.get("title")
    if title is not None and not isinstance(title, str):
        return "title", f"must be a string, got {type(title).__name__}"
    metadata = item.get("metadata", {})
    if not isinstance(metadata, dict):
        return "metadata", f"must be an object, got {type(metadata).__name__}"
    return None


def raw_documents(
    items: Iterable[tuple[int, Any]], source: str, max_chars: int = MAX_CHARS
) -> Iterator[RawDocument | RecordError]:
    """Each numbered item as a :class:`RawDocument`, or the :class:`RecordError` saying why not."""
    seen: set[str] = set()
    for number, item in items:
        if isinstance(item, RecordError):
            yield item
            continue
        if not isinstance(item, dict):
            yield RecordError(source, number, None, None, f"expected a JSON object, got {type(item).__name__}")
            continue
        problem = _problem(item, max_chars)
        doc_id = item.get("doc_id") if isinstance(item.get("doc_id"), str) else None
        if problem is not None:
            yield RecordError(source, number, doc_id, *problem)
            continue
        assert doc_id is not None
        if doc_id in seen:
            yield RecordError(source, number, doc_id, "doc_id", "duplicate doc_id in this input")
            continue
        seen.add(doc_id)
        metadata = dict(item.get("metadata") or {})
        metadata.update({k: v for k, v in item.items() if k not in RECORD_FIELDS and k not in ("doc_id", "text", "metadata")})
        fields = {k: v for k, v in item.items() if k in RECORD_FIELDS}
        yield RawDocument(doc_id, item["text"], item.get("title"), fields, metadata)


def read_raw(path: str | Path) -> Iterator[tuple[int, Any]]:
    """The numbered lines of a raw JSONL file, parsed; a line that is not JSON (or not UTF-8)
    is a :class:`RecordError` in its place."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                yield number, RecordError(str(path), number, None, None, f"not UTF-8: {exc.reason} at byte {exc.start}")
            except json.JSONDecodeError as exc:
                yield number, RecordError(str(path), number, None, None, f"not JSON: {json_line_error(exc)}")
