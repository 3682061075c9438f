"""What an extraction did: the records, and everything it could not type, scope or resolve."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from car_rag.extract.citations import Skipped
from car_rag.extractors import MissingScope
from car_rag.records import Record, RecordError

__all__ = ["Edge", "ExtractReport"]

SHOWN = 20
"""Untyped documents named one a line; past this many (a policy without doc-type patterns types
none), one line counts the rest."""


@dataclass
class Edge:
    """One extracted edge ``superseder`` ⊳ ``superseded``, merged over every span that states it."""

    superseder: str
    superseded: str
    confidence: float
    """The surest of its spans."""
    sources: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    """Each span: ``found_in`` (doc_id), ``source``, ``confidence``, ``text``, ``span`` (offsets in that text)."""

    def as_json(self) -> dict[str, Any]:
        return {"id": self.superseded, "confidence": self.confidence, "sources": self.sources, "evidence": self.evidence}


@dataclass
class ExtractReport:
    """The records of one extraction and what it could not do (each named by document)."""

    records: list[Record] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)
    """Documents that could not be read or made into a record: not in ``records``."""
    edges: list[Edge] = field(default_factory=list)
    untyped: list[str] = field(default_factory=list)
    """Documents no pattern typed: they have the policy's ``default_doc_type``."""
    skipped: list[Skipped] = field(default_factory=list)
    """Citations next to a supersession verb that gave no edge (unresolved, negated, quoted …)."""
    unattached: list[Edge] = field(default_factory=list)
    """Edges whose superseder is not in this input: its record cannot carry them (not stored)."""
    cycles: list[list[str]] = field(default_factory=list)
    """Supersession cycles the extracted edges close: the store rejects the record that closes one."""
    missing_scope: list[MissingScope] = field(default_factory=list)
    llm_calls: int = 0
    """Calls the LLM route made (answers read from its cache not counted)."""
    source: str = "<input>"
    """The raw input, as errors name it."""
    lines: dict[str, int] = field(default_factory=dict)
    """Line (or item) of each document in ``source``."""

    def at_raw_lines(self, errors: Iterable[RecordError]) -> list[RecordError]:
        """``errors`` of an ingest of ``records`` (which it numbers by item) named by the raw
        input and each document's line there, the place a user can fix."""
        return [replace(e, source=self.source, line=self.lines.get(e.doc_id) if e.doc_id else None) for e in errors]

    @property
    def unresolved(self) -> list[Skipped]:
        return [s for s in self.skipped if s.reason == "unresolved"]

    def summary(self) -> str:
        by_source = Counter(s for e in self.edges for s in e.sources)
        sources = ", ".join(f"{n} {s}" for s, n in sorted(by_source.items())) or "none"
        parts = [
            f"{len(self.records)} records",
            f"{len(self.edges)} edges ({sources})",
            f"{len(self.untyped)} untyped",
            f"{len(self.unresolved)} unresolved citations",
        ]
        if self.errors:
            parts.append(f"{len(self.errors)} rejected")
        if self.cycles:
            parts.append(f"{len(self.cycles)} cycles")
        if self.unattached:
            parts.append(f"{len(self.unattached)} edges with no superseder in the input")
        return ", ".join(parts)

    def problems(self) -> list[str]:
        """One line per thing a user should look at, each naming its document."""
        lines = [f"untyped: {d}: no doc_types pattern matched (given the default type)" for d in self.untyped[:SHOWN]]
        if len(self.untyped) > SHOWN:
            lines.append(f"untyped: {len(self.untyped) - SHOWN} more documents (every one in the JSON report)")
        lines += [
            f"{s.reason}: {s.doc_id}: {s.citation!r}"
            + (f" (tried {', '.join(s.tried)}: no such document)" if s.tried else "")
            + f" in {s.evidence[:120]!r}"
            for s in self.skipped
        ]
        lines += [
            f"unattached: {e.superseder} ⊳ {e.superseded} (read in {e.evidence[0]['found_in']}): "
            f"{e.superseder} is not in the input"
            for e in self.unattached
        ]
        lines += [f"cycle: {' ⊳ '.join(c)}: the store rejects the record that closes it" for c in self.cycles]
        lines += [str(m) for m in self.missing_scope]
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "records": len(self.records),
            "errors": [str(e) for e in self.errors],
            "edges": [{"superseder": e.superseder, **e.as_json()} for e in self.edges],
            "untyped": self.untyped,
            "skipped": [vars(s) | {"tried": list(s.tried)} for s in self.skipped],
            "unattached": [{"superseder": e.superseder, **e.as_json()} for e in self.unattached],
            "cycles": self.cycles,
            "missing_scope": [str(m) for m in self.missing_scope],
            "llm_calls": self.llm_calls,
        }
