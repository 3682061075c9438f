"""What a reader is shown of a store that namespaces its tenants' doc_ids.

A store holds each tenant's record under :func:`~car_rag.records.tenant_key` (its tenant, U+001F,
its doc_id), so two tenants may each have a record ``x`` and neither can see or take the other's.
The key never leaves the library: :func:`as_shown` gives a result every record and edge of which
carries the doc_id its writer gave it. Without tenants the result is returned as it is.
"""

from __future__ import annotations

from dataclasses import replace

from car_rag.ambiguity import Ambiguity
from car_rag.channels.fusion import FusedHit
from car_rag.graph import Edge
from car_rag.records import TENANT_SEPARATOR, Record, shown_id
from car_rag.resolution import RetrievalResult, RetrievedRecord

__all__ = ["as_shown", "shown_edge", "shown_record"]


def as_shown(result: RetrievalResult) -> RetrievalResult:
    """``result`` with each record, edge and Stage-1 hit named by the doc_id its writer gave."""
    hits = [*result.anchors, *result.candidates]
    if not any(TENANT_SEPARATOR in d for d in [*(r.doc_id for r in result.ranked), *(h.doc_id for h in hits)]):
        return result
    return replace(
        result,
        ranked=[_shown_item(item) for item in result.ranked],
        anchors=[_shown_hit(h) for h in result.anchors],
        candidates=[_shown_hit(h) for h in result.candidates],
        ambiguity=None if result.ambiguity is None else _shown_ambiguity(result.ambiguity),
    )


def shown_record(record: Record) -> Record:
    """``record`` as its writer gave it: its doc_id and the ids its ``supersedes`` names without tenant."""
    if record.tenant is None:
        return record
    weak = {shown_id(d): c for d, c in record.supersedes_confidence.items()}
    update = {"doc_id": shown_id(record.doc_id), "supersedes": [shown_id(d) for d in record.supersedes]}
    return record.model_copy(update={**update, "supersedes_confidence": weak})


def shown_edge(edge: Edge) -> Edge:
    return replace(edge, superseder=shown_id(edge.superseder), target=shown_id(edge.target))


def _shown_hit(hit: FusedHit) -> FusedHit:
    return replace(hit, doc_id=shown_id(hit.doc_id))


def _shown_item(item: RetrievedRecord) -> RetrievedRecord:
    return replace(
        item,
        record=shown_record(item.record),
        anchor_id=None if item.anchor_id is None else shown_id(item.anchor_id),
        stage1=None if item.stage1 is None else _shown_hit(item.stage1),
        superseded_by=[shown_id(d) for d in item.superseded_by],
        voided_by=[shown_edge(e) for e in item.voided_by],
        voids=[shown_edge(e) for e in item.voids],
        contested_by=[shown_edge(e) for e in item.contested_by],
        disputed_by=[shown_edge(e) for e in item.disputed_by],
    )


def _shown_ambiguity(ambiguity: Ambiguity) -> Ambiguity:
    members = tuple(replace(m, controlling=tuple(shown_id(d) for d in m.controlling)) for m in ambiguity.members)
    return replace(ambiguity, members=members)
