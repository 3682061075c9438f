"""Audit any retriever's output against an authority graph.

A retrieved set violates closure when it returns a superseded record without anything
that supersedes it: the reader is handed stale authority with nothing saying so. Theorem 4
of the CAR paper says a set is safe (TCA = 1) exactly when it has no such violation and
includes the active frontier of the anchor's authority chain. The audit needs no labels:
only the graph of the corpus, so users can audit the pipeline they already run, whatever
builds it — car-rag, a LlamaIndex retriever (``NodeWithScore``), a LangChain retriever
(``Document``) or a plain function returning ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from car_rag.eval.stats import Rate
from car_rag.graph import AuthorityGraph

__all__ = ["ClosureViolation", "RetrieverAudit", "SetAudit", "audit_set", "audit_retriever", "doc_ids_of"]


@dataclass(frozen=True)
class ClosureViolation:
    """``doc_id`` was returned superseded; none of what supersedes it was returned."""

    doc_id: str
    controlling: tuple[str, ...]
    """The active records of its authority chain: what should have been returned."""


@dataclass
class SetAudit:
    doc_ids: list[str]
    superseded: list[str] = field(default_factory=list)
    violations: list[ClosureViolation] = field(default_factory=list)
    frontier_included: bool | None = None
    """With an anchor: whether the active frontier of its authority chain was returned."""
    unknown: list[str] = field(default_factory=list)
    """Returned ids the graph does not know."""

    @property
    def closure_complete(self) -> bool:
        return not self.violations

    @property
    def theorem4(self) -> bool | None:
        """Both conditions of Theorem 4 (needs an anchor), else None."""
        return None if self.frontier_included is None else self.frontier_included and self.closure_complete


def audit_set(doc_ids: Sequence[str], graph: AuthorityGraph, anchor: str | None = None) -> SetAudit:
    """Audit one retrieved set (optionally against the anchor the question is about)."""
    shown = set(doc_ids)
    audit = SetAudit(list(doc_ids))
    for doc_id in doc_ids:
        if doc_id not in graph:
            audit.unknown.append(doc_id)
            continue
        above = graph.ancestors(doc_id)
        if above:
            audit.superseded.append(doc_id)
            if not above & shown:
                audit.violations.append(ClosureViolation(doc_id, tuple(sorted(graph.frontier(above)))))
    if anchor is not None and anchor in graph:
        audit.frontier_included = bool(graph.frontier(graph.closure([anchor])) & shown)
    return audit


def doc_ids_of(results: Iterable[Any], key: str = "doc_id") -> list[str]:
    """Ids from whatever a retriever returned: strings, car-rag records, LlamaIndex
    ``NodeWithScore``/nodes or LangChain ``Document``s (metadata ``key``, else their id)."""
    out = []
    for item in results:
        if isinstance(item, str):
            out.append(item)
            continue
        node = getattr(item, "node", item)  # NodeWithScore wraps a node
        metadata = getattr(node, "metadata", None) or {}
        value = metadata.get(key) or getattr(node, "doc_id", None) or getattr(node, "node_id", None) or getattr(node, "id", None)
        if value is None:
            raise ValueError(f"cannot find a doc id on {type(item).__name__}: set metadata[{key!r}]")
        out.append(str(value))
    return out


@dataclass
class RetrieverAudit:
    queries: int
    sets_with_superseded: int
    sets_with_violations: int
    violations: int
    theorem4: Rate | None
    examples: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "sets_with_superseded": self.sets_with_superseded,
            "sets_with_violations": self.sets_with_violations,
            "violations": self.violations,
            "theorem4": self.theorem4.to_dict() if self.theorem4 else None,
            "examples": self.examples,
        }


def audit_retriever(
    retrieve: Callable[[str], Iterable[Any]],
    queries: Iterable[tuple[str, str | None]],
    graph: AuthorityGraph,
    *,
    k: int = 5,
    key: str = "doc_id",
    examples: int = 5,
) -> RetrieverAudit:
    """Run ``retrieve`` on each (question, anchor id or None) and audit its top ``k``."""
    audits = []
    for question, anchor in queries:
        ids = doc_ids_of(retrieve(question), key)[:k]
        audits.append((question, audit_set(ids, graph, anchor)))
    with_anchor = [a for _, a in audits if a.theorem4 is not None]
    return RetrieverAudit(
        queries=len(audits),
        sets_with_superseded=sum(1 for _, a in audits if a.superseded),
        sets_with_violations=sum(1 for _, a in audits if a.violations),
        violations=sum(len(a.violations) for _, a in audits),
        theorem4=Rate(sum(bool(a.theorem4) for a in with_anchor), len(with_anchor)) if with_anchor else None,
        examples=[
            {"question": q, "returned": a.doc_ids, "violations": [(v.doc_id, list(v.controlling)) for v in a.violations]}
            for q, a in audits
            if a.violations
        ][:examples],
    )
