"""car-rag's authority audit as LlamaIndex retrieval metrics, for the ``RetrieverEvaluator`` you run.

Each metric audits the ids a retriever returned against the corpus's authority graph with
:func:`car_rag.eval.audit_metrics.score_retrieved` (the audit of ``car-rag``'s own harness, as the RAGAS
and DeepEval metrics score it):

* :class:`CARClosureViolations` (``car_closure_violations``): how many superseded records were
  returned without anything that supersedes them (stale authority, nothing saying so); 0 is safe;
* :class:`CARControllingHit` (``car_controlling_hit``): 1.0 when the active frontier of an expected
  record's authority chain was returned (the record that controls now, whichever of its chain
  the dataset names);
* :class:`CARTheorem4` (``car_theorem4``): both at once, Theorem 4's condition for a safe set.

and, for answers, :class:`CARAnswerEvaluator`: whether a response is confidently wrong about
the status (car-rag's deterministic answer classifier).

No labels beyond the dataset's expected ids: only the graph, built from the nodes' car-rag
metadata (:meth:`CARAuditMetric.from_nodes`)::

    graph_metrics = CARAuditMetric.all_from_nodes(nodes, "security-advisory", k=5)
    evaluator = RetrieverEvaluator(metrics=graph_metrics, retriever=fusion_retriever)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from car_rag.adapters import AuthorityGraph
from car_rag.eval.answers import GoldAnswer, classify, suite_kind
from car_rag.eval.audit_metrics import AuditScores, score_retrieved
from car_rag.policy import Policy, load_policy
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.evaluation.retrieval.metrics_base import BaseRetrievalMetric, RetrievalMetricResult
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import BaseNode
from pydantic import Field

from llama_index.retrievers.car.layout import MetadataLayout, node_doc_id, node_to_record

__all__ = ["CARAnswerEvaluator", "CARAuditMetric", "CARClosureViolations", "CARControllingHit", "CARTheorem4"]


class CARAuditMetric(BaseRetrievalMetric):
    """What the three metrics share: the graph, which ids are records, how many to audit."""

    metric_name: ClassVar[str] = "car_audit"

    graph: AuthorityGraph = Field(description="The corpus's authority graph (from_nodes builds it).")
    doc_ids: Mapping[str, str] = Field(
        default_factory=dict, description="Node id -> record id, for chunked nodes; ids not in it are record ids."
    )
    k: int | None = Field(default=None, ge=1, description="Audit the first k retrieved (None: all of them).")

    @classmethod
    def from_nodes(
        cls, nodes: Iterable[BaseNode], policy: Policy | str | Path, *, k: int | None = None, layout: MetadataLayout | None = None
    ) -> Self:
        """The metric over the graph of ``nodes`` (laid out by car-rag: ``records_to_nodes``, the
        extractors); a node whose metadata cannot make a record raises, naming it and the field."""
        graph, doc_ids = _graph(nodes, policy, layout)
        return cls(graph=graph, doc_ids=doc_ids, k=k)

    @staticmethod
    def all_from_nodes(
        nodes: Iterable[BaseNode], policy: Policy | str | Path, *, k: int | None = None, layout: MetadataLayout | None = None
    ) -> list[BaseRetrievalMetric]:
        """The three metrics over one graph (built once)."""
        graph, doc_ids = _graph(nodes, policy, layout)
        return [cls(graph=graph, doc_ids=doc_ids, k=k) for cls in (CARClosureViolations, CARControllingHit, CARTheorem4)]

    def audit(self, retrieved_ids: list[str] | None, expected_ids: list[str] | None) -> AuditScores:
        """The audit of the retrieved records, and whether an expected record's frontier was returned."""
        return score_retrieved(self.graph, retrieved_ids, expected_ids, k=self.k, doc_ids=self.doc_ids)

    def compute(
        self,
        query: str | None = None,
        expected_ids: list[str] | None = None,
        retrieved_ids: list[str] | None = None,
        expected_texts: list[str] | None = None,
        retrieved_texts: list[str] | None = None,
        **kwargs: Any,
    ) -> RetrievalMetricResult:
        found = self.audit(retrieved_ids, expected_ids)
        return RetrievalMetricResult(score=found.value(self.metric_name), metadata=found.details())


class CARClosureViolations(CARAuditMetric):
    """Superseded records returned without anything that supersedes them (lower is better; 0 is safe)."""

    metric_name: ClassVar[str] = "car_closure_violations"


class CARControllingHit(CARAuditMetric):
    """1.0 when the record that controls an expected record's chain now was returned."""

    metric_name: ClassVar[str] = "car_controlling_hit"


class CARTheorem4(CARAuditMetric):
    """1.0 when the set is closure-complete and holds an expected record's controlling record."""

    metric_name: ClassVar[str] = "car_theorem4"


def _graph(
    nodes: Iterable[BaseNode], policy: Policy | str | Path, layout: MetadataLayout | None
) -> tuple[AuthorityGraph, dict[str, str]]:
    policy_ = load_policy(policy)
    graph = AuthorityGraph(policy_)
    doc_ids: dict[str, str] = {}
    for node in nodes:
        record = node_to_record(node, policy_, layout)
        graph.add(record)
        if node.node_id != record.doc_id:
            doc_ids[node.node_id] = node_doc_id(node, layout)
    return graph, doc_ids


class CARAnswerEvaluator(BaseEvaluator):
    """Whether an answer is confidently wrong: car-rag's answer classifier
    (:func:`car_rag.eval.answers.classify`) as a LlamaIndex response evaluator.

    ``reference`` is the gold status in the domain's words (``patched`` / ``vulnerable``,
    ``good_law`` / ``overruled``, ``active`` / ``compliant`` / ``non_compliant``), with
    ``fixed_version`` for a patched security question. ``passing`` is False exactly when the
    answer claims a status other than gold (the confident-wrong rate is the share not
    passing); ``score`` is 1.0 for a correct answer; ``feedback`` is the label and the words
    the rule fired on. Deterministic: no LLM."""

    def __init__(self, domain: str) -> None:
        self.domain = domain
        suite_kind(domain)  # an unknown domain is refused here, not at the first answer

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        """No prompts: the classifier reads the answer with the domain's state vocabulary."""

    async def aevaluate(
        self,
        query: str | None = None,
        response: str | None = None,
        contexts: Sequence[str] | None = None,
        reference: str | None = None,
        fixed_version: str | None = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        if not reference:
            raise ValueError("CARAnswerEvaluator needs reference=<the gold status>, e.g. 'patched'")
        found = classify(response or "", self.domain, GoldAnswer(reference, fixed_version))
        return EvaluationResult(
            query=query,
            response=response,
            contexts=contexts,
            passing=found.label != "confident_wrong",
            score=float(found.label == "correct"),
            feedback=f"{found.label}: {found.reason}",
        )
