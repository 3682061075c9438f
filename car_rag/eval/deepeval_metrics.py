"""car-rag's audit and answer classifier as DeepEval metrics (``pip install 'car-rag[deepeval]'``).

``deepeval.metrics.BaseMetric`` subclasses for ``deepeval.evaluate`` / ``assert_test``, scored
on an ``LLMTestCase``, with no LLM:

* :class:`CARClosureViolations` (passes at or below ``threshold``, 0 by default),
  :class:`CARControllingHit`, :class:`CARTheorem4` (pass at 1.0): the Theorem-4 audit of the
  test case's ``retrieval_context`` against the corpus's authority graph
  (:mod:`car_rag.eval.audit_metrics`, the scores of the LlamaIndex and RAGAS metrics). Each
  context names its record as DeepEval's ``RetrievedContextData(context=..., source=doc_id)``;
  the expected records are ``metadata={"expected_ids": [...]}``;
* :class:`CARConfidentWrong`: 1.0 when ``actual_output`` claims a status other than
  ``expected_output`` (the gold status; ``metadata={"fixed_version": ...}`` for a patched
  security question); passes at 0, so the share failing is the confident-wrong rate.

``reason`` says which records were stale and what controls them, or which words the answer
rule fired on. Set ``DEEPEVAL_TELEMETRY_OPT_OUT=1``: DeepEval reports usage unless told not to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from car_rag.eval.answers import GoldAnswer, classify, suite_kind
from car_rag.eval.audit_metrics import graph_of, score_retrieved
from car_rag.extras import MissingExtraError
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.records import Record

try:
    from deepeval.metrics import BaseMetric
    from deepeval.test_case import LLMTestCase, RetrievedContextData
except ImportError as exc:  # pragma: no cover - the deepeval extra
    raise MissingExtraError(
        f"car_rag.eval.deepeval_metrics needs deepeval ({exc.name} is not installed): pip install 'car-rag[deepeval]'"
    ) from exc

__all__ = ["CARAuditMetric", "CARClosureViolations", "CARConfidentWrong", "CARControllingHit", "CARTheorem4", "retrieved_ids"]


def retrieved_ids(test_case: LLMTestCase) -> list[str]:
    """The record ids of a test case's ``retrieval_context``, in rank order: each entry's
    ``source``. A plain-string entry names no record: a ValueError says which and what to pass."""
    ids = []
    for number, item in enumerate(test_case.retrieval_context or [], start=1):
        if not isinstance(item, RetrievedContextData):
            raise ValueError(
                f"retrieval_context entry {number} of the test case for {test_case.input!r} is a plain string: pass "
                "RetrievedContextData(context=text, source=doc_id) so the audit knows which record it is"
            )
        ids.append(item.source)
    return ids


class _CARMetric(BaseMetric):
    """The DeepEval bookkeeping the four metrics share: score, reason, success against the threshold."""

    metric: ClassVar[str]
    lower_is_better: ClassVar[bool] = False

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.include_reason = True
        self.async_mode = False
        self.evaluation_model = None

    def _set(self, score: float, reason: str) -> float:
        self.score, self.reason, self.error = score, reason, None
        self.success = score <= self.threshold if self.lower_is_better else score >= self.threshold
        return score

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        return float(self.measure(test_case))

    def is_successful(self) -> bool:
        return self.error is None and bool(self.success)

    @property
    def __name__(self) -> str:  # DeepEval reads the metric's name here
        return self.metric


class CARAuditMetric(_CARMetric):
    """What the three audit metrics share: the graph, how many retrieved records to audit."""

    metric = "car_audit"

    def __init__(self, graph: AuthorityGraph, *, k: int | None = None, threshold: float | None = None):
        if k is not None and k < 1:
            raise ValueError(f"k must be 1 or more (or None: every retrieved record), got {k}")
        super().__init__((0.0 if self.lower_is_better else 1.0) if threshold is None else threshold)
        self.graph = graph
        self.k = k

    @classmethod
    def from_records(cls, records: Iterable[Record], policy: Policy | str | Path, *, k: int | None = None) -> Self:
        """The metric over the authority graph of ``records`` (the corpus) under ``policy``."""
        return cls(graph_of(records, policy), k=k)

    @staticmethod
    def all_from_records(records: Iterable[Record], policy: Policy | str | Path, *, k: int | None = None) -> list[CARAuditMetric]:
        """The three metrics over one graph (built once)."""
        graph = graph_of(records, policy)
        return [cls(graph, k=k) for cls in (CARClosureViolations, CARControllingHit, CARTheorem4)]

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        expected = _metadata(test_case).get("expected_ids")
        if not isinstance(expected, Sequence) or isinstance(expected, str):
            raise ValueError(
                f"the test case for {test_case.input!r} needs metadata={{'expected_ids': [doc_id, ...]}} "
                "(the records the question is about)"
            )
        found = score_retrieved(self.graph, retrieved_ids(test_case), [str(e) for e in expected], k=self.k)
        return self._set(found.value(self.metric), found.reason())


class CARClosureViolations(CARAuditMetric):
    """Superseded records returned without anything that supersedes them (lower is better; 0 is safe)."""

    metric = "car_closure_violations"
    lower_is_better = True


class CARControllingHit(CARAuditMetric):
    """1.0 when the record that now controls an expected record's chain was returned."""

    metric = "car_controlling_hit"


class CARTheorem4(CARAuditMetric):
    """1.0 when the set is closure-complete and holds an expected record's controlling record."""

    metric = "car_theorem4"


class CARConfidentWrong(_CARMetric):
    """1.0 when ``actual_output`` claims a status other than ``expected_output`` (the gold status in
    the domain's words); passes at 0. ``domain``: ``security``, ``legal`` or ``compliance``."""

    metric = "car_confident_wrong"
    lower_is_better = True

    def __init__(self, domain: str, threshold: float = 0.0):
        suite_kind(domain)  # an unknown domain is refused here, not at the first answer
        super().__init__(threshold)
        self.domain = domain

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        if not test_case.expected_output:
            raise ValueError(f"the test case for {test_case.input!r} needs expected_output=<the gold status>, e.g. 'patched'")
        fixed = _metadata(test_case).get("fixed_version")
        gold = GoldAnswer(test_case.expected_output, None if fixed is None else str(fixed))
        found = classify(test_case.actual_output or "", self.domain, gold)
        return self._set(float(found.label == "confident_wrong"), f"{found.label}: {found.reason}")


def _metadata(test_case: LLMTestCase) -> Mapping[str, Any]:
    return test_case.metadata or {}
