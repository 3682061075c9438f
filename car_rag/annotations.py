"""A resolved result as ``car_*`` annotations on the items a framework returns, and back.

Integrations hand back their own objects (nodes, documents) with what resolution decided
written into their metadata; evidence rendering and the guard later rebuild the
:class:`~car_rag.RetrievalResult` those annotations describe. Both directions live here so
the keys, the link shape and the status rule are defined once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from car_rag.ambiguity import Ambiguity
from car_rag.graph import Edge
from car_rag.layout import (
    CAR_AMBIGUITY,
    CAR_ANCHOR_ID,
    CAR_CONTESTED_BY,
    CAR_DISPUTED_BY,
    CAR_FILTERED_SUPERSEDER,
    CAR_HIDDEN_SUPERSEDER,
    CAR_POLICY,
    CAR_QUERY,
    CAR_RANK,
    CAR_ROLE,
    CAR_RULE,
    CAR_SCOPE_PROBABILITY,
    CAR_STAGE1_CHANNEL,
    CAR_STAGE1_RANK,
    CAR_STAGE1_SCORE,
    CAR_STATUS,
    CAR_SUPERSEDED_BY,
    CAR_VOIDED_BY,
    CAR_VOIDS,
)
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.resolution import Anchor, RetrievalResult, RetrievedRecord, edge_json

__all__ = ["UNRESOLVED", "annotations_for", "result_from_annotations", "status_rule", "unresolved_annotations"]

UNRESOLVED = "unresolved"
"""``car_status`` of an item passed through without car-rag metadata."""
_ROLES = ("anchor", "superseder", "scope_match")


def status_rule(item: RetrievedRecord, result: RetrievalResult) -> str | None:
    """The rule that made ``item`` superseded: that of the first voider active in the result
    (one that controls), else of its first voider; None for an active record."""
    if item.status != "superseded":
        return None
    for edge in item.voided_by:
        other = result.get(edge.superseder)
        if other is not None and other.status == "active":
            return edge.rule
    return item.voided_by[0].rule if item.voided_by else None


def _link(result: RetrievalResult, doc_id: str, edge: Edge) -> dict[str, Any]:
    """One supersession edge as metadata: the record at the other end, enough to cite it."""
    other = result.get(doc_id)
    return {
        **edge_json(doc_id, edge),
        "doc_type": other.record.doc_type if other else None,
        "version": other.record.version if other else None,
        "scope": dict(other.record.scope) if other else {},
        "status": other.status if other else None,
    }


def annotations_for(item: RetrievedRecord, result: RetrievalResult) -> dict[str, Any]:
    """The ``car_*`` metadata for one record of ``result``."""
    hit = item.stage1
    return {
        CAR_STATUS: item.status,
        CAR_RANK: item.rank,
        CAR_ROLE: item.role,
        CAR_ANCHOR_ID: item.anchor_id,
        CAR_SUPERSEDED_BY: list(item.superseded_by),
        CAR_RULE: status_rule(item, result),
        CAR_VOIDED_BY: [_link(result, e.superseder, e) for e in item.voided_by],
        CAR_VOIDS: [_link(result, e.target, e) for e in item.voids],
        CAR_CONTESTED_BY: [_link(result, e.superseder, e) for e in item.contested_by],
        CAR_DISPUTED_BY: [_link(result, e.superseder, e) for e in item.disputed_by],
        CAR_HIDDEN_SUPERSEDER: item.hidden_superseder,
        CAR_FILTERED_SUPERSEDER: item.filtered_superseder,
        CAR_STAGE1_RANK: hit.rank if hit else None,
        CAR_STAGE1_SCORE: next(iter(hit.channel_scores.values()), None) if hit else None,
        CAR_STAGE1_CHANNEL: next(iter(hit.channel_ranks), None) if hit else None,
        CAR_POLICY: result.policy.name if result.policy is not None else None,
        CAR_QUERY: result.query,
        CAR_SCOPE_PROBABILITY: None if item.scope_probability is None else round(item.scope_probability, 4),
        CAR_AMBIGUITY: None if result.ambiguity is None else result.ambiguity.to_dict(),
    }


def unresolved_annotations(query: str, policy: Policy | None) -> dict[str, Any]:
    """The ``car_*`` metadata of an item passed through unresolved (no car-rag metadata)."""
    return {
        CAR_STATUS: UNRESOLVED,
        CAR_RANK: None,
        CAR_ROLE: "anchor",
        CAR_ANCHOR_ID: None,
        CAR_SUPERSEDED_BY: [],
        CAR_RULE: None,
        CAR_VOIDED_BY: [],
        CAR_VOIDS: [],
        CAR_CONTESTED_BY: [],
        CAR_DISPUTED_BY: [],
        CAR_HIDDEN_SUPERSEDER: False,
        CAR_FILTERED_SUPERSEDER: False,
        CAR_STAGE1_RANK: None,
        CAR_STAGE1_SCORE: None,
        CAR_STAGE1_CHANNEL: None,
        CAR_POLICY: policy.name if policy else None,
        CAR_QUERY: query,
        CAR_SCOPE_PROBABILITY: None,
        CAR_AMBIGUITY: None,
    }


def _edges(links: Any, doc_id: str, *, incoming: bool) -> list[Edge]:
    out = []
    for link in links or ():
        if isinstance(link, Mapping) and "doc_id" in link and "rule" in link:
            other, rule = str(link["doc_id"]), str(link["rule"])
            value = link.get("confidence", 1.0)
            sure = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0
            out.append(Edge(other, doc_id, rule, sure) if incoming else Edge(doc_id, other, rule, sure))
    return out


def _stage1(doc_id: str, meta: Mapping[str, Any]) -> Anchor | None:
    rank, score, channel = meta.get(CAR_STAGE1_RANK), meta.get(CAR_STAGE1_SCORE), meta.get(CAR_STAGE1_CHANNEL)
    if not isinstance(rank, int) or isinstance(rank, bool):
        return None
    number = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None
    return Anchor(doc_id, rank, number, channel if isinstance(channel, str) and channel else "stage1")


def _annotated(record: Record, meta: Mapping[str, Any], rank: int) -> RetrievedRecord:
    if CAR_STATUS not in meta:  # not resolved by car-rag: current, in its place
        return RetrievedRecord(record=record, status="active", role="anchor", rank=rank, anchor_id=record.doc_id)
    anchor = _stage1(record.doc_id, meta)
    role = meta.get(CAR_ROLE)
    return RetrievedRecord(
        record=record,
        status="superseded" if meta.get(CAR_STATUS) == "superseded" else "active",
        role=role if role in _ROLES else "anchor",
        rank=rank,
        anchor_id=meta.get(CAR_ANCHOR_ID),
        stage1=anchor.hit() if anchor is not None else None,
        superseded_by=[str(d) for d in meta.get(CAR_SUPERSEDED_BY) or []],
        voided_by=_edges(meta.get(CAR_VOIDED_BY), record.doc_id, incoming=True),
        voids=_edges(meta.get(CAR_VOIDS), record.doc_id, incoming=False),
        contested_by=_edges(meta.get(CAR_CONTESTED_BY), record.doc_id, incoming=True),
        disputed_by=_edges(meta.get(CAR_DISPUTED_BY), record.doc_id, incoming=True),
        hidden_superseder=bool(meta.get(CAR_HIDDEN_SUPERSEDER)),
        filtered_superseder=bool(meta.get(CAR_FILTERED_SUPERSEDER)),
        scope_probability=_probability(meta.get(CAR_SCOPE_PROBABILITY)),
    )


def _probability(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _linked(link: Mapping[str, Any], rank: int) -> RetrievedRecord:
    """A record an item links to but that is not among the items: enough of it to name it."""
    record = Record(
        doc_id=str(link["doc_id"]),
        text="",
        doc_type=link.get("doc_type") or "record",
        version=link.get("version"),
        scope=link.get("scope") or {},
    )
    superseded = link.get("status") == "superseded"
    return RetrievedRecord(record=record, status="superseded" if superseded else "active", role="superseder", rank=rank)


def result_from_annotations(
    items: Sequence[tuple[Record, Mapping[str, Any]]], *, query: str, policy: Policy | None, linked: bool = False
) -> RetrievalResult:
    """The result that annotated items describe, ranked in their order (a repeated doc_id
    keeps its first place). Items without ``car_status`` are active records in their place.
    With ``linked``, records an item links to but that are not among the items are appended,
    text-less, so that evidence can still name them (render only the first ``len(items)``)."""
    ranked: list[RetrievedRecord] = []
    links: list[Mapping[str, Any]] = []
    for record, meta in items:
        if any(r.doc_id == record.doc_id for r in ranked):
            continue
        ranked.append(_annotated(record, meta, len(ranked) + 1))
        if CAR_STATUS in meta:
            keys = (CAR_VOIDED_BY, CAR_VOIDS, CAR_CONTESTED_BY, CAR_DISPUTED_BY)
            links += [link for key in keys for link in meta.get(key) or () if isinstance(link, Mapping)]
    if linked:
        shown = {r.doc_id for r in ranked}
        for link in links:
            if "doc_id" in link and str(link["doc_id"]) not in shown:
                shown.add(str(link["doc_id"]))
                ranked.append(_linked(link, len(ranked) + 1))
    anchors = [r.stage1 for r in ranked if r.stage1 is not None]
    scope_ids = policy.scope_ids_in(query) if policy is not None else {}
    result = RetrievalResult(query, ranked, anchors, scope_ids, {}, policy)
    noted = next((meta[CAR_AMBIGUITY] for _, meta in items if isinstance(meta.get(CAR_AMBIGUITY), Mapping)), None)
    result.ambiguity = None if noted is None else Ambiguity.from_dict(noted)
    return result
