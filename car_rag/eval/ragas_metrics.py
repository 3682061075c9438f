"""car-rag's audit and answer classifier as RAGAS metrics (``pip install 'car-rag[ragas]'``).

RAGAS 0.4's metrics (``ragas.metrics.collections.BaseMetric``: ``ascore`` / ``score`` /
``batch_score`` giving a ``MetricResult``), for the ``@experiment`` functions RAGAS runs:

* :class:`CARClosureViolations`, :class:`CARControllingHit`, :class:`CARTheorem4`: the
  Theorem-4 audit of ``retrieved_context_ids`` against the corpus's authority graph, with
  ``reference_context_ids`` the question's expected records (:mod:`car_rag.eval.audit_metrics`,
  the scores of the LlamaIndex metrics); no LLM;
* :class:`CARConfidentWrong`: 1.0 when ``response`` claims a status other than ``reference``
  (car-rag's deterministic answer classifier), so its mean is the confident-wrong rate; no LLM.

Each result's ``reason`` says which records were stale and what controls them, or which words
the answer rule fired on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Self

from car_rag.eval.answers import GoldAnswer, classify, suite_kind
from car_rag.eval.audit_metrics import graph_of, score_retrieved
from car_rag.extras import MissingExtraError
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.records import Record

try:
    from ragas.metrics.collections.base import BaseMetric
    from ragas.metrics.result import MetricResult
except ImportError as exc:  # pragma: no cover - the ragas extra
    raise MissingExtraError(
        f"car_rag.eval.ragas_metrics needs ragas ({exc.name} is not installed): pip install 'car-rag[ragas]'"
    ) from exc

__all__ = ["CARAuditMetric", "CARClosureViolations", "CARConfidentWrong", "CARControllingHit", "CARTheorem4"]


class CARAuditMetric(BaseMetric):
    """What the three audit metrics share: the graph, how many retrieved records to audit, and
    ``doc_ids`` (chunk id -> record id, for ids that are not record ids)."""

    metric: ClassVar[str] = "car_audit"
    bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(self, graph: AuthorityGraph, *, k: int | None = None, doc_ids: Mapping[str, str] | None = None):
        if k is not None and k < 1:
            raise ValueError(f"k must be 1 or more (or None: every retrieved record), got {k}")
        self.graph = graph
        self.k = k
        self.doc_ids = dict(doc_ids or {})
        super().__init__(name=self.metric, allowed_values=self.bounds)

    @classmethod
    def from_records(cls, records: Iterable[Record], policy: Policy | str | Path, *, k: int | None = None) -> Self:
        """The metric over the authority graph of ``records`` (the corpus) under ``policy``."""
        return cls(graph_of(records, policy), k=k)

    @staticmethod
    def all_from_records(records: Iterable[Record], policy: Policy | str | Path, *, k: int | None = None) -> list[CARAuditMetric]:
        """The three metrics over one graph (built once)."""
        graph = graph_of(records, policy)
        return [cls(graph, k=k) for cls in (CARClosureViolations, CARControllingHit, CARTheorem4)]

    async def ascore(self, retrieved_context_ids: Sequence[str], reference_context_ids: Sequence[str]) -> MetricResult:
        """The score of the retrieved ids (in rank order) against the expected ones."""
        found = score_retrieved(self.graph, retrieved_context_ids, reference_context_ids, k=self.k, doc_ids=self.doc_ids)
        return MetricResult(value=found.value(self.metric), reason=found.reason())


class CARClosureViolations(CARAuditMetric):
    """Superseded records returned without anything that supersedes them (lower is better; 0 is safe)."""

    metric = "car_closure_violations"
    bounds = (0.0, float("inf"))


class CARControllingHit(CARAuditMetric):
    """1.0 when the record that now controls an expected record's chain was returned."""

    metric = "car_controlling_hit"


class CARTheorem4(CARAuditMetric):
    """1.0 when the set is closure-complete and holds an expected record's controlling record."""

    metric = "car_theorem4"


class CARConfidentWrong(BaseMetric):
    """1.0 when ``response`` claims a status other than ``reference`` (the gold status in the
    domain's words: ``patched`` / ``vulnerable``, ``good_law`` / ``overruled``, ``active`` /
    ``compliant`` / ``non_compliant``; ``fixed_version`` for a patched security question); the mean
    over a dataset is the confident-wrong rate. ``domain``: ``security``, ``legal`` or ``compliance``."""

    def __init__(self, domain: str, name: str = "car_confident_wrong"):
        suite_kind(domain)  # an unknown domain is refused here, not at the first answer
        self.domain = domain
        super().__init__(name=name, allowed_values=(0.0, 1.0))

    async def ascore(self, response: str, reference: str, fixed_version: str | None = None) -> MetricResult:
        """Whether ``response`` is confidently wrong against the gold ``reference``."""
        if not reference:
            raise ValueError("car_confident_wrong needs reference=<the gold status>, e.g. 'patched'")
        found = classify(response, self.domain, GoldAnswer(reference, fixed_version))
        return MetricResult(value=float(found.label == "confident_wrong"), reason=f"{found.label}: {found.reason}")
