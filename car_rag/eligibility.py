"""The eligibility gate: who may read which record, compiled into every channel.

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
from typing import Any

import numpy as np

from car_rag.records import PUBLIC_TENANT, Record

__all__ = ["CallerContext", "PUBLIC_TENANT", "governance_metadata"]


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
    """Metadata the Chroma filter of :meth:`CallerContext.chroma_where` reads."""
    meta: dict[str, Any] = {
        "car_tenant": record.tenant if record.tenant is not None else PUBLIC_TENANT,
        "car_public": not record.allowed_principals,
    }
    if record.allowed_principals:
        meta["allowed_principals"] = list(record.allowed_principals)
    return meta
