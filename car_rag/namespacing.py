"""What a reader is shown of a store that namespaces its tenants' doc_ids.

A store holds each tenant's record under :func:`~car_rag.records.tenant_key` (its tenant, U+001F,
its doc_id), so two tenants may each have a record ``x`` and neither can see or take the other's.
The key never leaves the library: :func:`as_shown` gives a result every record and edge of which
carries the doc_id its writer gave it. Without tenants the result is returned as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from car_rag.ambiguity import Ambiguity
from car_rag.channels.fusion import FusedHit
from car_rag.graph import Edge
from car_rag.records import TENANT_SEPARATOR, Record, shown_id
from car_rag.resolution import RetrievalResult, RetrievedRecord

__all__ = ["as_shown", "renamed", "shown_edge", "shown_record"]


def as_shown(result: RetrievalResult) -> RetrievalResult:
    """``result`` with each record, edge and Stage-1 hit named by the doc_id its writer gave."""
    hits = [*result.anchors, *result.candidates]
    if not any(TENANT_SEPARATOR in d for d in [*(r.doc_id for r in result.ranked), *(h.doc_id for h in hits)]):
        return result
    return renamed(result, shown_id)


def renamed(result: RetrievalResult, name: Callable[[str], str]) -> RetrievalResult:
    """``result`` with every doc_id it holds (records, the ids they name, edges, hits) as ``name`` gives it."""
    return replace(
        result,
        ranked=[_item(item, name) for item in result.ranked],
        anchors=[_hit(h, name) for h in result.anchors],
        candidates=[_hit(h, name) for h in result.candidates],
        ambiguity=None if result.ambiguity is None else _ambiguity(result.ambiguity, name),
    )


def shown_record(record: Record) -> Record:
    """``record`` as its writer gave it: its doc_id and the ids its ``supersedes`` names without tenant."""
    return record if record.tenant is None else _record(record, shown_id)


def shown_edge(edge: Edge) -> Edge:
    return _edge(edge, shown_id)


def _record(record: Record, name: Callable[[str], str]) -> Record:
    weak = {name(d): c for d, c in record.supersedes_confidence.items()}
    update = {"doc_id": name(record.doc_id), "supersedes": [name(d) for d in record.supersedes]}
    return record.model_copy(update={**update, "supersedes_confidence": weak})


def _edge(edge: Edge, name: Callable[[str], str]) -> Edge:
    return replace(edge, superseder=name(edge.superseder), target=name(edge.target))


def _hit(hit: FusedHit, name: Callable[[str], str]) -> FusedHit:
    return replace(hit, doc_id=name(hit.doc_id))


def _item(item: RetrievedRecord, name: Callable[[str], str]) -> RetrievedRecord:
    return replace(
        item,
        record=_record(item.record, name),
        anchor_id=None if item.anchor_id is None else name(item.anchor_id),
        stage1=None if item.stage1 is None else _hit(item.stage1, name),
        superseded_by=[name(d) for d in item.superseded_by],
        voided_by=[_edge(e, name) for e in item.voided_by],
        voids=[_edge(e, name) for e in item.voids],
        contested_by=[_edge(e, name) for e in item.contested_by],
        disputed_by=[_edge(e, name) for e in item.disputed_by],
    )


def _ambiguity(ambiguity: Ambiguity, name: Callable[[str], str]) -> Ambiguity:
    members = tuple(replace(m, controlling=tuple(name(d) for d in m.controlling)) for m in ambiguity.members)
    return replace(ambiguity, members=members)
