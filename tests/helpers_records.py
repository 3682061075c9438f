"""Small builders shared by the record / policy / graph tests (plain functions, no fixtures)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from car_rag.records import Record

BASE = datetime(2024, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    """An aware UTC datetime ``n`` days after 2024-01-01."""
    return BASE + timedelta(days=n)


def rec(doc_id: str, doc_type: str = "note", *, at: int | None = None, text: str | None = None, **fields: Any) -> Record:
    """A Record with a throw-away text; ``at`` is a day offset for ``published_at``."""
    if at is not None:
        fields.setdefault("published_at", day(at))
    return Record(doc_id=doc_id, text=text if text is not None else f"text of {doc_id}", doc_type=doc_type, **fields)


MDRENDER_PATCH = {
    "doc_id": "sec-mdrender-2.0.1-release",
    "doc_type": "patch_release",
    "text": "mdrender 2.0.1: raw HTML in link titles is escaped before rendering.",
    "scope": {"package": "mdrender", "cve_id": "CVE-2099-10009"},
    "published_at": "2025-03-01",
}
"""A release note the demo corpus lacks, worded apart from the disclosure it voids (MDRENDER_VOIDED)."""
MDRENDER_VOIDED = "sec-mdrender-cve-2099-10009-disclosure"


def edge_set(graph: Any) -> set[tuple[str, str, str]]:
    """The graph's edges as comparable (superseder, target, rule) triples."""
    return {(e.superseder, e.target, e.rule) for e in graph.edges()}
