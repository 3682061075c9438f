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
import numbers
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    StrictStr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

__all__ = [
    "PUBLIC_TENANT",
    "TENANT_SEPARATOR",
    "UNDATED",
    "LoadReport",
    "Record",
    "RecordError",
    "json_line_error",
    "load_records",
    "parse_records",
    "shown_id",
    "tenant_key",
]

PUBLIC_TENANT = "*"
"""The tenant value the eligibility gate writes for records that belong to every tenant;
reserved, so no record can claim it (see :mod:`car_rag.eligibility`)."""

TENANT_SEPARATOR = "\x1f"
"""Between a tenant and a doc_id in the key a store holds a tenant's record under (see
:func:`tenant_key`); no tenant and no doc_id a writer sends holds it."""


def tenant_key(tenant: str | None, doc_id: str) -> str:
    """The key a store holds ``tenant``'s record ``doc_id`` under: the doc_id itself for a public
    record, else prefixed with its tenant, so that two tenants may each hold a record ``doc_id``
    and neither can see or take the other's (a reader is only ever shown :func:`shown_id`)."""
    return doc_id if tenant is None or doc_id.startswith(tenant + TENANT_SEPARATOR) else f"{tenant}{TENANT_SEPARATOR}{doc_id}"


def shown_id(key: str) -> str:
    """The doc_id its writer gave the record a store holds under ``key`` (what readers are shown)."""
    return key.rpartition(TENANT_SEPARATOR)[2]


METADATA_DEPTH = 64
"""How deeply ``metadata`` may nest: a record is stored as JSON and read back when its store
opens, and pydantic's JSON reader refuses nesting much past 200 levels."""

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _shown(value: object, limit: int = 60) -> str:
    """``repr`` of a value for an error message, cut short so a huge one cannot flood the report."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _entry_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with a ``supersedes`` entry written as an object (None: nothing)."""
    extra = sorted(set(entry) - {"id", "confidence"})
    if extra or not isinstance(entry.get("id"), str) or not entry.get("id"):
        return f"an edge object needs exactly 'id' (a doc_id) and 'confidence', got {_shown(entry)}"
    value = entry.get("confidence")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return f"confidence of the edge to {_shown(entry['id'])} must be a number in [0, 1], got {_shown(value)}"
    return None


def _not_blank(value: str) -> str:
    # An empty scope value would put unrelated records in one entity bucket (and link them
    # through a rule); an empty tenant or principal is a data error, not a name.
    if not value.strip():
        raise ValueError(f"must not be empty or white space, got {_shown(value)}")
    return value


def _encodable(value: Any) -> Any:
    # A lone surrogate cannot be encoded: it would break hashing, storage and rendering. Most
    # values are ASCII or absent: skipped.
    if value is None or (isinstance(value, str) and value.isascii()):
        return value
    strings = value.items() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    for item in strings:
        for text in item if isinstance(item, tuple) else (item,):
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"unpaired surrogate at position {exc.start}: not valid Unicode") from None
    return value


class _FromPythonOnly:
    """Annotation: check a field with :func:`_encodable` on Python input only. JSON input cannot
    carry a lone surrogate (pydantic's parser refuses it), so a stored record read back, as every
    ``--stage2 sql`` query does for each record of its closure, makes no call into Python here."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        schema = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=schema, python_schema=core_schema.no_info_after_validator_function(_encodable, schema)
        )


_Encodable = _FromPythonOnly()

_Label = Annotated[StrictStr, AfterValidator(_not_blank)]
"""A scope key or value, tenant or principal: a string that is not empty or white space."""


UNDATED = datetime.min.replace(tzinfo=UTC)
"""Where a record without a date sorts: before every dated one."""


class Record(BaseModel):
    """One corpus item. Unknown fields are rejected so that a typo such as
    ``supercedes`` fails loudly instead of silently dropping an authority edge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: Annotated[StrictStr, _Encodable] = Field(min_length=1, description="Stable unique id of the record.")
    text: Annotated[StrictStr, _Encodable] = Field(description="The document text, verbatim.")
    doc_type: Annotated[StrictStr, _Encodable] = Field(min_length=1, description="Kind of document; policy rules match on it.")
    scope: Annotated[dict[_Label, _Label], _Encodable] = Field(
        default_factory=dict, description="Entity keys the record is about, e.g. {'cve_id': ..., 'package': ...}."
    )
    published_at: datetime | None = Field(default=None, description="When the record was issued.")
    effective_at: datetime | None = Field(
        default=None, description="When it takes effect, if not when published; used for temporal rules."
    )
    version: Annotated[StrictStr | None, _Encodable] = Field(
        default=None, description="Version label, for version-ordered rules."
    )
    source: Annotated[StrictStr | None, _Encodable] = Field(default=None, description="Issuing source (feed, court, agency).")
    uri: Annotated[StrictStr | None, _Encodable] = Field(default=None, description="Where the record can be cited from.")
    authority: float | None = Field(default=None, ge=0.0, le=1.0, strict=True, description="Source authority weight, 0..1.")
    tenant: Annotated[_Label | None, _Encodable] = Field(
        default=None, description=f"Owning tenant; None means every tenant ({PUBLIC_TENANT!r} is reserved)."
    )
    allowed_principals: Annotated[list[_Label], _Encodable] = Field(
        default_factory=list, description="Principals allowed to read it; empty means every principal."
    )
    publisher: Annotated[_Label | None, _Encodable] = Field(
        default=None,
        description="For a public record (no tenant): the publisher that issued it; its edges may void "
        "tenants' records (see car_rag.trust). A server sets it from a publisher key, and refuses it from any other.",
    )
    supersedes: Annotated[list[StrictStr], _Encodable] = Field(
        default_factory=list,
        description="Explicit supersession edges: ids this record voids; an entry {'id': ..., 'confidence': 0.7} "
        "gives an edge inferred with that confidence (Definition 9), a plain id one that is certain.",
    )
    supersedes_confidence: dict[str, float] = Field(
        default_factory=dict,
        exclude=True,
        description="Confidence of each explicit edge below 1, read from the 'supersedes' entries (never given apart).",
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free metadata, carried through.")

    @model_validator(mode="before")
    @classmethod
    def _split_confidences(cls, data: Any) -> Any:
        # One written form: the confidence travels in its ``supersedes`` entry, so the map is
        # derived here and never taken as input. Malformed entries stay for ``_entries`` to name.
        if not isinstance(data, dict):
            return data
        if "supersedes_confidence" in data:
            raise ValueError("supersedes_confidence: give an edge's confidence in its supersedes entry instead")
        entries = data.get("supersedes")
        if not entries or not isinstance(entries, list) or all(isinstance(e, str) for e in entries):
            return data
        ids: list[Any] = []
        confidence: dict[str, float] = {}
        for entry in entries:
            if isinstance(entry, dict) and _entry_problem(entry) is None:
                ids.append(entry["id"])
                if entry["confidence"] < 1:
                    confidence[entry["id"]] = float(entry["confidence"])
            else:
                ids.append(entry)
        return {**data, "supersedes": ids, "supersedes_confidence": confidence}

    @field_validator("supersedes", mode="before")
    @classmethod
    def _entries(cls, value: Any) -> Any:
        if isinstance(value, list):
            for i, entry in enumerate(value):
                if isinstance(entry, dict):
                    raise ValueError(f"entry {i}: {_entry_problem(entry)}")
        return value

    @field_serializer("supersedes")
    def _with_confidences(self, ids: list[str]) -> list[Any]:
        weak = self.supersedes_confidence
        return [{"id": d, "confidence": weak[d]} if d in weak else d for d in ids]

    @field_validator("metadata")
    @classmethod
    def _storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Checked here, not when written: a record the store cannot read back would make the
        # whole store fail to open. Most records have none: skipped, a fifth of reading a perf record back.
        if not value:
            return value
        stack = [(value, 1)]
        while stack:
            item, depth = stack.pop()
            if depth > METADATA_DEPTH:
                raise ValueError(f"nested deeper than {METADATA_DEPTH} levels")
            children = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else ()
            stack.extend((child, depth + 1) for child in children)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be JSON data: {exc}") from None
        return value

    @field_validator("doc_id")
    @classmethod
    def _strip_id(cls, value: str) -> str:
        if value != value.strip():
            raise ValueError("doc_id must not start or end with white space")
        return value

    @field_validator("tenant")
    @classmethod
    def _not_public_marker(cls, value: str | None) -> str | None:
        # The Chroma filter reads the marker as "every tenant": a record carrying it would be
        # public to dense search and private to BM25 and Stage 2.
        if value == PUBLIC_TENANT:
            raise ValueError(f"{PUBLIC_TENANT!r} is reserved for records of every tenant: leave tenant out instead")
        return value

    @field_validator("tenant")
    @classmethod
    def _no_separator_in_tenant(cls, value: str | None) -> str | None:
        if value is not None and TENANT_SEPARATOR in value:
            raise ValueError("must not hold the character U+001F (it separates a tenant from its doc_ids)")
        return value

    @field_validator("publisher")
    @classmethod
    def _public_only(cls, value: str | None, info: Any) -> str | None:
        # A tenant's record voids its own tenant's already; a publisher speaks for every tenant.
        if value is not None and info.data.get("tenant") is not None:
            raise ValueError("only a public record (no tenant) has a publisher")
        return value

    @field_validator("published_at", "effective_at", mode="before")
    @classmethod
    def _not_a_number(cls, value: object) -> object:
        # pydantic reads a number, or a string of digits, as seconds since 1970: 2024 or
        # "20240131" would silently become a date in 1970.
        # A date-time as every stored record holds one cannot be a number: returned first.
        if value is None or (isinstance(value, str) and ":" in value):
            return value
        if isinstance(value, numbers.Number) or (isinstance(value, str) and _NUMBER.fullmatch(value.strip())):
            raise ValueError(
                f"must be an ISO-8601 date such as '2024-01-31' or '2024-01-31T12:00:00Z', not a number: {_shown(value)}"
            )
        return value

    @field_validator("published_at", "effective_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        # Naive and aware datetimes cannot be compared; treat naive ones as UTC.
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @field_validator("supersedes")
    @classmethod
    def _not_self(cls, value: list[str], info: Any) -> list[str]:
        if info.data.get("doc_id") in value:
            raise ValueError("a record cannot supersede itself")
        return value

    @property
    def sort_time(self) -> datetime:
        """:attr:`time` for ordering: a record without a date sorts before every dated one."""
        return self.time or UNDATED

    @property
    def time(self) -> datetime | None:
        """The date temporal rules compare: when it takes effect, else when published."""
        return self.effective_at or self.published_at

    def edge_confidence(self, target: str) -> float:
        """The confidence of this record's explicit edge to ``target`` (1.0: certain)."""
        return self.supersedes_confidence.get(target, 1.0)

    def fingerprint(self) -> str:
        """Content hash used to make re-ingest idempotent."""
        # A record without a publisher hashes as it did before the field existed (stored
        # fingerprints stay valid: re-ingesting an unchanged store re-embeds nothing).
        unset = {"publisher"} if self.publisher is None else None
        payload = self.model_dump_json(exclude_none=False, exclude=unset).encode()
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
        loc, message = [str(p) for p in err["loc"]], err["msg"]
        if loc[-1:] == ["[key]"]:  # a bad key of a dict: name the dict, the message shows the key
            loc, message = loc[:-2], f"invalid key: {message}"
        out.append(RecordError(source, line, doc_id, ".".join(loc) or None, message))
    return out


def _validate(numbered: Iterable[tuple[int, Any, str | None]], source: str) -> LoadReport:
    report = LoadReport()
    seen: set[str] = set()  # tenant_key of each record
    for number, item, problem in numbered:
        if problem:
            doc_id = item.get("doc_id") if isinstance(item, dict) and isinstance(item.get("doc_id"), str) else None
            report.errors.append(RecordError(source, number, doc_id, None, problem))
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
        if separated := _separator_in(record):
            report.errors.append(RecordError(source, number, record.doc_id, *separated))
            continue
        key = tenant_key(record.tenant, record.doc_id)  # two tenants may each have a record of one doc_id
        if key in seen:
            report.errors.append(RecordError(source, number, record.doc_id, "doc_id", "duplicate doc_id in this input"))
            continue
        seen.add(key)
        report.records.append(record)
        report.lines.setdefault(record.doc_id, number)
    return report


def _separator_in(record: Record) -> tuple[str, str] | None:
    """(field, message) where an id of ``record`` holds U+001F: a store's key for a tenant's record
    (:func:`tenant_key`), which a record may give only for itself and its own tenant's records (one
    read back from a store, written again)."""
    prefix = None if record.tenant is None else record.tenant + TENANT_SEPARATOR
    for name, ids in (("doc_id", [record.doc_id]), ("supersedes", record.supersedes)):
        for doc_id in ids:
            if TENANT_SEPARATOR in doc_id and (
                prefix is None or not doc_id.startswith(prefix) or TENANT_SEPARATOR in doc_id[len(prefix) :]
            ):
                return name, f"must not hold the character U+001F (it separates a tenant from its doc_ids), got {_shown(doc_id)}"
    return None


def parse_records(items: Iterable[Any], source: str = "<input>") -> LoadReport:
    """Validate dicts (or Records) one by one; a repeat of an earlier doc_id is rejected."""
    return _validate(((n, item, None) for n, item in enumerate(items, start=1)), source)


def _load_json(text: str) -> tuple[Any, list[str]]:
    """One JSON value, and the keys some object in it repeats (JSON keeps the last of two
    equal keys: a repeated "supersedes" would drop edges silently)."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        repeated.extend(key for i, key in enumerate(keys) if key in keys[:i])
        return dict(items)

    return json.loads(text, object_pairs_hook=pairs), repeated


def json_line_error(exc: json.JSONDecodeError) -> str:
    """What is wrong with one line of a JSONL file, ``exc`` being from parsing that line alone
    (its line break stripped): the fault and its column, or, where the line ends before its
    value does (a line cut short, where no column says anything), that it is not complete JSON."""
    if exc.msg.startswith("Unterminated string"):  # on one line, only the line's end leaves a string open
        return "invalid JSON: the line is not complete JSON (it ends inside a string)"
    if exc.pos >= len(exc.doc.rstrip()):
        return f"invalid JSON: the line is not complete JSON ({exc.msg} at its end)"
    return f"invalid JSON: {exc.msg} at column {exc.pos + 1}"


def _json_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                # utf-8-sig: a byte-order mark some editors write must not cost the first record.
                item, repeated = _load_json(raw.decode("utf-8-sig").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                yield number, None, f"not UTF-8: {exc.reason} at byte {exc.start}"
            except json.JSONDecodeError as exc:
                yield number, None, json_line_error(exc)
            except ValueError as exc:  # e.g. an integer too long to convert
                yield number, None, f"invalid JSON: {exc}"
            except RecursionError:
                yield number, None, "invalid JSON: nested too deeply"
            else:
                yield number, item, f"invalid JSON: key {_shown(repeated[0])} appears twice in one object" if repeated else None


def load_records(path: str | Path) -> LoadReport:
    """Load a JSONL corpus in the neutral record format; bad lines are reported, not fatal."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    return _validate(_json_lines(path), str(path))
