"""The eligibility gate: who may read which record, compiled into every channel.

A query may narrow the gate further: to the records that existed at a date (``as_of``,
:class:`Gate`) and to those a :class:`RecordFilter` keeps; both are compiled the same way.

A record with no ``tenant`` belongs to every tenant, and one with no
``allowed_principals`` is readable by every principal of its tenant: records with no
governance fields are public. A caller sees a record when both hold. The gate is applied
before scoring (a BM25 weight mask, a Chroma ``where`` clause, a filter on Stage-2
lookups), never by dropping results afterwards, so nothing restricted can crowd a
permitted record out of the top k or leak through a score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

import numpy as np

from car_rag.graph import exists_at
from car_rag.records import PUBLIC_TENANT, UNDATED, Record

__all__ = [
    "CallerContext",
    "DATE_KEYS",
    "FILTER_FIELDS",
    "Gate",
    "PUBLIC_TENANT",
    "RecordFilter",
    "as_of_label",
    "filter_of",
    "filter_of_conditions",
    "governance_metadata",
    "instant",
]

FILTER_FIELDS = ("date_range", "subjects", "sources", "doc_types", "metadata")
"""What a :class:`RecordFilter` can ask for (the RFC's ``filters`` of ``/retrieve``)."""

Scalar = str | int | float | bool


@dataclass(frozen=True)
class CallerContext:
    """The reader a retrieval is made for: their tenant and the principals they hold."""

    tenant: str | None = None
    principals: frozenset[str] = frozenset()

    def __init__(self, tenant: str | None = None, principals: Iterable[str] = frozenset()) -> None:
        # Any iterable of principals, kept hashable (masks are cached per caller).
        object.__setattr__(self, "tenant", tenant)
        object.__setattr__(self, "principals", frozenset(principals))

    def can_read(self, record: Record) -> bool:
        if record.tenant is not None and record.tenant != self.tenant:
            return False
        return not record.allowed_principals or not self.principals.isdisjoint(record.allowed_principals)

    def mask(self, doc_ids: Sequence[str], records: Mapping[str, Record]) -> np.ndarray:
        """Boolean mask over an index's records: True where this caller may read (an id with no
        stored record, such as a vector an ingest cut off before its record, is never readable)."""
        return np.fromiter((d in records and self.can_read(records[d]) for d in doc_ids), dtype=bool, count=len(doc_ids))

    def chroma_where(self) -> dict[str, Any]:
        """The same rule as a Chroma metadata filter over :func:`governance_metadata`."""
        tenants = [PUBLIC_TENANT] + ([self.tenant] if self.tenant is not None else [])
        readers: list[dict[str, Any]] = [{"car_public": True}]
        readers += [{"allowed_principals": {"$contains": p}} for p in sorted(self.principals)]
        reader_clause = readers[0] if len(readers) == 1 else {"$or": readers}
        return {"$and": [{"car_tenant": {"$in": tenants}}, reader_clause]}


def governance_metadata(record: Record) -> dict[str, Any]:
    """Metadata the Chroma filters of :meth:`CallerContext.chroma_where` and :meth:`Gate.chroma_where`
    read; ``car_time`` is the record's date in seconds (an undated record's, before every date)."""
    meta: dict[str, Any] = {
        "car_tenant": record.tenant if record.tenant is not None else PUBLIC_TENANT,
        "car_public": not record.allowed_principals,
        "car_time": record.sort_time.timestamp(),
    }
    if record.allowed_principals:
        meta["allowed_principals"] = list(record.allowed_principals)
    return meta


def instant(value: date | datetime | str, name: str = "as_of", *, end_of_day: bool = True) -> datetime:
    """A date as the instant a query means by it: a day is its last instant (a record of that
    day counts as of that day; its first with ``end_of_day`` False, where a range starts), a
    naive time is UTC. ``name`` is the field an error names."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{name}: cannot read {value!r} as a date (YYYY-MM-DD or ISO 8601)") from None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime.combine(value, time.max if end_of_day else time.min, tzinfo=UTC)
    raise ValueError(f"{name}: expected a date, got {type(value).__name__}")


def as_of_label(when: datetime, day_at: time = time.max) -> str:
    """How results and evidence write an ``as_of``: the day, where it is the day's last instant
    (``day_at``: a range's start is written as its day at the first)."""
    return when.date().isoformat() if when.timetz() == day_at.replace(tzinfo=when.tzinfo) else when.isoformat()


@dataclass(frozen=True)
class RecordFilter:
    """Which records a query asks to see: dated within ``since``..``until`` (by
    :attr:`~car_rag.records.Record.time`; an undated record is in no date range), with one of the
    given values for each scope key of ``subjects``, from one of ``sources``, of one of
    ``doc_types``, and with each ``metadata`` key equal to its value. Empty parts keep everything.

    A filter narrows what is shown, not what is true: a record it keeps that a record it leaves
    out voids is still superseded (see :func:`~car_rag.resolution.resolve_authority`)."""

    since: datetime | None = None
    until: datetime | None = None
    subjects: tuple[tuple[str, frozenset[str]], ...] = ()
    sources: frozenset[str] = frozenset()
    doc_types: frozenset[str] = frozenset()
    metadata: tuple[tuple[str, Scalar], ...] = ()

    def __init__(
        self,
        *,
        since: date | datetime | str | None = None,
        until: date | datetime | str | None = None,
        subjects: Mapping[str, Iterable[str]] | None = None,
        sources: Iterable[str] = (),
        doc_types: Iterable[str] = (),
        metadata: Mapping[str, Scalar] | None = None,
    ) -> None:
        start = None if since is None else instant(since, "date_range.from", end_of_day=False)
        end = None if until is None else instant(until, "date_range.to")
        if start is not None and end is not None and start > end:
            raise ValueError(f"date_range: from {as_of_label(start, time.min)} is after to {as_of_label(end)}")
        subject_values = {k: frozenset(v) for k, v in (subjects or {}).items()}
        named = (
            ("sources", frozenset(sources)),
            ("doc_types", frozenset(doc_types)),
            *((f"subjects.{k}", v) for k, v in subject_values.items()),
        )
        for name, values in named:
            if not all(isinstance(v, str) and v for v in values) or (name.startswith("subjects.") and not values):
                raise ValueError(f"{name}: expected non-empty strings, got {sorted(map(repr, values)) or 'none'}")
        for key, value in (metadata or {}).items():
            if not isinstance(value, (str, int, float, bool)):
                raise ValueError(f"metadata.{key}: expected a string, number or boolean, got {type(value).__name__}")
        object.__setattr__(self, "since", start)
        object.__setattr__(self, "until", end)
        object.__setattr__(self, "subjects", tuple(sorted(subject_values.items())))
        object.__setattr__(self, "sources", named[0][1])
        object.__setattr__(self, "doc_types", named[1][1])
        object.__setattr__(self, "metadata", tuple(sorted((metadata or {}).items())))

    def __bool__(self) -> bool:
        return any((self.since, self.until, self.subjects, self.sources, self.doc_types, self.metadata))

    def matches(self, record: Record) -> bool:
        if self.since is not None or self.until is not None:
            when = record.time
            if when is None or (self.since is not None and when < self.since) or (self.until is not None and when > self.until):
                return False
        if self.sources and record.source not in self.sources:
            return False
        if self.doc_types and record.doc_type not in self.doc_types:
            return False
        if any(record.scope.get(key) not in values for key, values in self.subjects):
            return False
        return all(key in record.metadata and _same(record.metadata[key], value) for key, value in self.metadata)

    def chroma_where(self) -> list[dict[str, Any]]:
        """The filter as Chroma metadata clauses (to be AND-ed) over what the layout writes: dates
        as ``car_time`` (:func:`governance_metadata`), scope keys and scalar metadata flat."""
        clauses: list[dict[str, Any]] = []
        if self.since is not None:
            clauses.append({"car_time": {"$gte": self.since.timestamp()}})
        if self.until is not None:
            clauses += [{"car_time": {"$lte": self.until.timestamp()}}, {"car_time": {"$gt": UNDATED.timestamp()}}]
        for key, values in (("source", self.sources), ("doc_type", self.doc_types), *self.subjects):
            if values:
                clauses.append({key: {"$in": sorted(values)}})
        clauses += [{key: value} for key, value in self.metadata]
        return clauses

    def to_dict(self) -> dict[str, Any]:
        """The filter in the shape ``/retrieve`` takes (only the parts set)."""
        out: dict[str, Any] = {}
        if self.since is not None or self.until is not None:
            out["date_range"] = {
                "from": None if self.since is None else as_of_label(self.since, time.min),
                "to": None if self.until is None else as_of_label(self.until),
            }
        for name, values in (("sources", self.sources), ("doc_types", self.doc_types)):
            if values:
                out[name] = sorted(values)
        if self.subjects:
            out["subjects"] = {k: sorted(v) for k, v in self.subjects}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


def filter_of(fields: Mapping[str, Any], scope_keys: Sequence[str]) -> RecordFilter:
    """A :class:`RecordFilter` from the ``filters`` object of ``/retrieve`` (``date_range``
    ``{"from", "to"}``, ``subjects`` ``{scope key: [values]}``, ``sources``, ``doc_types``,
    ``metadata`` ``{key: value}``). A field not among those, or a subject that is not one of the
    policy's ``scope_keys``, is a ValueError naming it: a filter is never silently ignored."""
    unknown = sorted(set(fields) - set(FILTER_FIELDS))
    if unknown:
        raise ValueError(f"filters.{unknown[0]}: unknown filter field (known: {', '.join(FILTER_FIELDS)})")
    dates = fields.get("date_range") or {}
    if not isinstance(dates, Mapping) or set(dates) - {"from", "to"}:
        raise ValueError('filters.date_range: expected {"from": date, "to": date} (either may be left out)')
    subjects = fields.get("subjects") or {}
    if not isinstance(subjects, Mapping):
        raise ValueError("filters.subjects: expected {scope key: [values]}")
    strange = sorted(set(subjects) - set(scope_keys))
    if strange:
        raise ValueError(f"filters.subjects.{strange[0]}: not a scope key of the policy (its keys: {', '.join(scope_keys)})")
    lists = {name: fields.get(name) or [] for name in ("sources", "doc_types")}
    for name, values in [*lists.items(), *((f"subjects.{k}", v) for k, v in subjects.items())]:
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise ValueError(f"filters.{name}: expected a list of strings")
    metadata = fields.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValueError("filters.metadata: expected {key: value}")
    try:
        return RecordFilter(since=dates.get("from"), until=dates.get("to"), subjects=subjects, metadata=metadata, **lists)
    except ValueError as exc:
        raise ValueError(f"filters.{exc}") from None


DATE_KEYS = ("published_at", "effective_at")
"""Metadata keys a framework filter compares dates on: both mean the record's date
(:attr:`~car_rag.records.Record.time`: ``effective_at``, else ``published_at``)."""


def filter_of_conditions(
    conditions: Iterable[tuple[str, str, Any]], scope_keys: Sequence[str], doc_type_key: str = "doc_type"
) -> RecordFilter:
    """A :class:`RecordFilter` from AND-ed ``(key, operator, value)`` conditions, the shape both
    frameworks' metadata filters flatten to (``operator``: ``eq``, ``in``, ``gte``, ``lte``):
    ``doc_type_key`` and ``source`` give types and sources, a scope key subjects, a date key
    (:data:`DATE_KEYS`, with ``gte``/``lte``) the date range, any other key metadata equality.
    What cannot be compiled into every channel is a ValueError naming it, never ignored."""
    fields: dict[str, Any] = {}
    for key, operator, value in conditions:
        values = value if operator == "in" else [value]
        if operator not in ("eq", "in", "gte", "lte") or (operator == "in" and not isinstance(value, (list, tuple))):
            raise ValueError(
                f"filter on {key!r}: operator {operator!r} with {value!r} cannot be compiled (eq, in; gte, lte on dates)"
            )
        if key in DATE_KEYS:
            if operator not in ("gte", "lte"):
                raise ValueError(f"filter on {key!r}: dates take gte and lte, got {operator!r}")
            fields.setdefault("date_range", {})["from" if operator == "gte" else "to"] = value
        elif operator in ("gte", "lte"):
            raise ValueError(f"filter on {key!r}: {operator} compares dates ({', '.join(DATE_KEYS)}) only")
        elif key in (doc_type_key, "source"):
            fields.setdefault("doc_types" if key == doc_type_key else "sources", []).extend(values)
        elif key in scope_keys:
            fields.setdefault("subjects", {}).setdefault(key, []).extend(values)
        elif operator == "eq":
            fields.setdefault("metadata", {})[key] = value
        else:
            raise ValueError(f"filter on {key!r}: metadata compares with eq only, got {operator!r}")
    return filter_of(fields, scope_keys)


def _same(held: Any, wanted: Scalar) -> bool:
    # True is not 1 here: a metadata flag and a count are different values.
    return bool(held == wanted) and isinstance(held, bool) == isinstance(wanted, bool)


@dataclass(frozen=True)
class Gate:
    """Everything that decides whether a record is a candidate for one query: the caller's
    eligibility, the date the query is asked ``as_of`` (records that did not exist yet are not
    candidates) and its filter. Hashable: masks are cached per gate."""

    caller: CallerContext | None = None
    as_of: datetime | None = None
    filter: RecordFilter | None = None

    def __bool__(self) -> bool:
        return self.caller is not None or self.as_of is not None or bool(self.filter)

    def can_read(self, record: Record) -> bool:
        return (
            (self.as_of is None or exists_at(record, self.as_of))
            and (self.caller is None or self.caller.can_read(record))
            and (not self.filter or self.filter.matches(record))
        )

    def mask(self, doc_ids: Sequence[str], records: Mapping[str, Record]) -> np.ndarray:
        """Boolean mask over an index's records: True where this gate admits the record."""
        return np.fromiter((d in records and self.can_read(records[d]) for d in doc_ids), dtype=bool, count=len(doc_ids))

    def chroma_where(self) -> dict[str, Any] | None:
        """The same rule as a Chroma metadata filter (None: every record)."""
        clauses = [] if self.caller is None else [self.caller.chroma_where()]
        if self.as_of is not None:
            clauses.append({"car_time": {"$lte": self.as_of.timestamp()}})
        if self.filter:
            clauses += self.filter.chroma_where()
        return None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
