"""The Theorem-4 audit of one retrieved set as evaluator scores: what car-rag's metrics for
LlamaIndex, RAGAS and DeepEval share, so the three frameworks score a set the same way.

* ``car_closure_violations``: superseded records returned without anything that supersedes
  them (stale authority, nothing saying so); 0 is safe;
* ``car_controlling_hit``: 1.0 when the active frontier of an expected record's authority chain
  was returned (the record that controls now, whichever of its chain the dataset names);
* ``car_theorem4``: both at once, Theorem 4's condition for a safe set.

The only label is each question's expected ids; the rest comes from the corpus's authority
graph (:func:`graph_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from car_rag.eval.audit import SetAudit, audit_set
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy, load_policy
from car_rag.records import Record

__all__ = ["AUDIT_METRICS", "AuditScores", "graph_of", "score_retrieved"]

AUDIT_METRICS = ("car_closure_violations", "car_controlling_hit", "car_theorem4")
"""The metric names, the same in every framework."""


@dataclass(frozen=True)
class AuditScores:
    """One retrieved set's audit and whether an expected record's controlling record was in it."""

    audit: SetAudit
    controlling_hit: bool

    def value(self, metric: str) -> float:
        """The score of ``metric`` (one of :data:`AUDIT_METRICS`)."""
        if metric == "car_closure_violations":
            return float(len(self.audit.violations))
        if metric == "car_controlling_hit":
            return float(self.controlling_hit)
        if metric == "car_theorem4":
            return float(self.controlling_hit and self.audit.closure_complete)
        raise ValueError(f"metric must be one of {', '.join(AUDIT_METRICS)}, got {metric!r}")

    def details(self) -> dict[str, Any]:
        """Which records were stale and what controls them, for a metric's metadata or reason."""
        return {
            "violations": [{"doc_id": v.doc_id, "controlling": list(v.controlling)} for v in self.audit.violations],
            "superseded": self.audit.superseded,
            "controlling_hit": self.controlling_hit,
            "unknown": self.audit.unknown,
        }

    def reason(self) -> str:
        """One line that says why: each stale record and what controls it."""
        stale = "; ".join(f"{v.doc_id} returned without {', '.join(v.controlling)}" for v in self.audit.violations)
        hit = (
            "the controlling record was returned" if self.controlling_hit else "no expected record's controlling record returned"
        )
        unknown = f"; not in the graph: {', '.join(self.audit.unknown)}" if self.audit.unknown else ""
        return f"{stale or 'no closure violation'}; {hit}{unknown}"


def score_retrieved(
    graph: AuthorityGraph,
    retrieved_ids: Sequence[str] | None,
    expected_ids: Sequence[str] | None,
    *,
    k: int | None = None,
    doc_ids: Mapping[str, str] | None = None,
) -> AuditScores:
    """Audit the first ``k`` records of ``retrieved_ids`` (node or chunk ids mapped to record ids
    through ``doc_ids``, repeats of one record counted once) against ``graph``."""
    ids = doc_ids or {}
    shown = list(dict.fromkeys(ids.get(i, i) for i in (retrieved_ids or [])))[:k]
    anchors = [ids.get(i, i) for i in expected_ids or []]
    hit = any(audit_set(shown, graph, anchor).frontier_included for anchor in anchors)
    return AuditScores(audit_set(shown, graph), hit)


def graph_of(records: Iterable[Record], policy: Policy | str | Path) -> AuthorityGraph:
    """The authority graph of ``records`` under ``policy`` (a policy, a packaged name or a TOML path)."""
    graph = AuthorityGraph(load_policy(policy))
    for record in records:
        graph.add(record)
    return graph
