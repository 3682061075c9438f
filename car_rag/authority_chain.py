"""The authority chain of one record as a reader may see it: whether it controls, which records
void it by which rule, every edge up to the active records. ``car-rag mcp``'s ``explain`` and
``car-rag serve``'s ``POST /explain`` answer with it."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from car_rag.eligibility import CallerContext
from car_rag.records import TENANT_SEPARATOR, shown_id
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE

if TYPE_CHECKING:
    from car_rag.store import CARStore

__all__ = ["authority_chain"]


def authority_chain(
    store: CARStore, doc_id: str, caller: CallerContext | None = None, *, min_confidence: float = DEFAULT_MIN_CONFIDENCE
) -> dict[str, Any]:
    """The authority chain of ``doc_id`` as ``caller`` may see it: its status, the active records
    that control it (the frontier of what voids it), every edge from it up to them (superseder,
    target, rule and its description, confidence), the records that void it only below
    ``min_confidence`` (possibly superseded), and whether a record the caller may not read voids it
    (``hidden_superseder``; never named). Records the caller may not read are never named, and a
    ``doc_id`` they may not read is reported as missing, like one that does not exist (``KeyError``)."""
    records = store.records
    own = store.key(doc_id, caller.tenant) if caller is not None and caller.tenant is not None else doc_id
    if own != doc_id and own in records:  # the caller's own record of that id before a public one
        return authority_chain(store, own, caller, min_confidence=min_confidence)
    record = records.get(doc_id)
    if record is None or (caller is not None and not caller.can_read(record)):
        raise KeyError(f"no record {doc_id!r} in this store that this reader may read")
    graph, policy = store.graph, store.policy
    voiders = graph.ancestors(doc_id)
    readable = {v for v in voiders if caller is None or caller.can_read(records[v])}
    rssg = graph.rssg({doc_id} | voiders, min_confidence)

    def status(d: str) -> str:
        return "superseded" if d in rssg.voided_by else "active"

    def summary(d: str) -> dict[str, Any]:
        other = records[d]
        published = other.published_at.isoformat() if other.published_at else None
        return {"doc_id": d, "doc_type": other.doc_type, "version": other.version, "published_at": published, "status": status(d)}

    chain: list[dict[str, Any]] = []
    queue, seen = deque([doc_id]), {doc_id}
    while queue:
        target = queue.popleft()
        for edge in sorted(graph.superseders(target), key=lambda e: e.superseder):
            if edge.superseder not in readable:
                continue
            rule = policy.rule(edge.rule)
            chain.append(
                {
                    "superseder": edge.superseder,
                    "target": target,
                    "rule": edge.rule,
                    "rule_description": rule.description if rule is not None else "",
                    "confidence": edge.confidence,
                    "superseder_status": status(edge.superseder),
                }
            )
            if edge.superseder not in seen:
                seen.add(edge.superseder)
                queue.append(edge.superseder)
    voided = rssg.voided_by.get(doc_id, {})
    contested = rssg.contested_by.get(doc_id, {})
    shown: dict[str, Any] = _shown(
        {
            **summary(doc_id),
            "scope": dict(record.scope),
            "controlling": [summary(d) for d in rssg.controlling(doc_id) if d in readable],
            "voided_by": [{"doc_id": d, "rule": rule} for d, rule in sorted(voided.items()) if d in readable],
            "possibly_superseded_by": [
                {"doc_id": d, "rule": rule, "confidence": sure} for d, (rule, sure) in sorted(contested.items()) if d in readable
            ],
            "hidden_superseder": any(d not in readable for d in voided),
            "chain": chain,
        }
    )
    return shown


def _shown(value: Any) -> Any:
    """``value`` with every store key a tenant's record is held under as the doc_id its writer gave."""
    if isinstance(value, str):
        return shown_id(value) if TENANT_SEPARATOR in value else value
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value
