"""Records: the corpus items car-rag retrieves and reasons about.

A record carries, beside its text, the metadata authority resolution needs: its
``doc_type`` (which policy rules it can trigger or be voided by), its ``scope`` (the
entity keys supersession is confined to) and its dates. Loading is per line and
forgiving: a bad line becomes a :class:`RecordError` naming the line, the record and
the field, and every good line is still returned.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

__all__ = ["Record", "RecordError", "LoadReport", "load_records", "parse_records"]


class Record(BaseModel):
    """One corpus item. Unknown fields are rejected so that a typo such as
    ``supercedes`` fails loudly instead of silently dropping an authority edge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: StrictStr = Field(min_length=1, description="Stable unique id of the record.")
    text: StrictStr = Field(description="The document text, verbatim.")
    doc_type: StrictStr = Field(min_length=1, description="Kind of document; policy rules match on it.")
    scope: dict[StrictStr, StrictStr] = Field(
        default_factory=dict, description="Entity keys the record is about, e.g. {'cve_id': ..., 'package': ...}."
    )
    published_at: datetime | None = Field(default=None, description="When the record was issued.")
    effective_at: datetime | None = Field(
        default=None, description="When it takes effect, if not when published; used for temporal rules."
    )
    version: StrictStr | None = Field(default=None, description="Version label, for version-ordered rules.")
    source: StrictStr | None = Field(default=None, description="Issuing source (feed, court, agency).")
    uri: StrictStr | None = Field(default=None, description="Where the record can be cited from.")
    authority: float | None = Field(
        default=None, ge=0.0, le=1.0, strict=True, description="Source authority weight, 0..1."
    )
    tenant: StrictStr | None = Field(default=None, description="Owning tenant; None means every tenant.")
    allowed_principals: list[StrictStr] = Field(
        default_factory=list, description="Principals allowed to read it; empty means every principal."
    )
    supersedes: list[StrictStr] = Field(
        default_factory=list, description="Explicit supersession edges: ids this record voids."
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free metadata, carried through.")

    @field_validator("doc_id")
    @classmethod
    def _strip_id(cls, value: str) -> str:
        if value != value.strip():
            raise ValueError("doc_id must not start or end with white space")
        return value

    @field_validator("doc_id", "text", "doc_type", "version", "source", "uri", "tenant", "scope", "allowed_principals", "supersedes")
    @classmethod
    def _valid_unicode(cls, value: object) -> object:
        # A lone surrogate cannot be encoded: it would break hashing, storage and rendering.
        strings = value.items() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for item in strings:
            for text in item if isinstance(item, tuple) else (item,):
                if isinstance(text, str):
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError as exc:
                        raise ValueError(f"unpaired surrogate at position {exc.start}: not valid Unicode") from None
        return value

    @field_validator("published_at", "effective_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        # Naive and aware datetimes cannot be compared; treat naive ones as UTC.
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value

    @field_validator("supersedes")
    @classmethod
    def _not_self(cls, value: list[str], info: Any) -> list[str]:
        if info.data.get("doc_id") in value:
            raise ValueError("a record cannot supersede itself")
        return value

    @property
    def time(self) -> datetime | None:
        """The date temporal rules compare: when it takes effect, else when published."""
        return self.effective_at or self.published_at

    def fingerprint(self) -> str:
        """Content hash used to make re-ingest idempotent."""
        payload = self.model_dump_json(exclude_none=False).encode()
        return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True)
class RecordError:
    """Why one input record was rejected."""

    source: str
    line: int | None
    doc_id: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        who = f" record {self.doc_id!r}" if self.doc_id else ""
        what = f" field {self.field!r}" if self.field else ""
        subject = f"{who}{what}:" if (who or what) else ""
        return f"{where}:{subject} {self.message}"


@dataclass
class LoadReport:
    """Records parsed from an input, with the ones rejected and why."""

    records: list[Record] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    """Line (or item) number of each accepted record, for errors found later, e.g. at ingest."""


def _errors_from_validation(exc: ValidationError, source: str, line: int | None, doc_id: str | None) -> list[RecordError]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or None
        out.append(RecordError(source, line, doc_id, loc, err["msg"]))
    return out


def _validate(numbered: Iterable[tuple[int, Any, str | None]], source: str) -> LoadReport:
    report = LoadReport()
    seen: set[str] = set()
    for number, item, problem in numbered:
        if problem:
            report.errors.append(RecordError(source, number, None, None, problem))
            continue
        if isinstance(item, Record):
            record = item
        elif not isinstance(item, dict):
            report.errors.append(RecordError(source, number, None, None, f"expected a JSON object, got {type(item).__name__}"))
            continue
        else:
            doc_id = item.get("doc_id") if isinstance(item.get("doc_id"), str) else None
            try:
                record = Record.model_validate(item)
            except ValidationError as exc:
                report.errors.extend(_errors_from_validation(exc, source, number, doc_id))
                continue
        if record.doc_id in seen:
            report.errors.append(RecordError(source, number, record.doc_id, "doc_id", "duplicate doc_id in this input"))
            continue
        seen.add(record.doc_id)
        report.records.append(record)
        report.lines[record.doc_id] = number
    return report


def parse_records(items: Iterable[Any], source: str = "<input>") -> LoadReport:
    """Validate dicts (or Records) one by one; a repeat of an earlier doc_id is rejected."""
    return _validate(((n, item, None) for n, item in enumerate(items, start=1)), source)


def _json_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                # utf-8-sig: a byte-order mark some editors write must not cost the first record.
                yield number, json.loads(raw.decode("utf-8-sig")), None
            except UnicodeDecodeError as exc:
                yield number, None, f"not UTF-8: {exc.reason} at byte {exc.start}"
            except json.JSONDecodeError as exc:
                yield number, None, f"invalid JSON: {exc.msg} (column {exc.colno})"


def load_records(path: str | Path) -> LoadReport:
    """Load a JSONL corpus in the neutral record format; bad lines are reported, not fatal."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    return _validate(_json_lines(path), str(path))
