"""Evaluation: TCA and friends, the Theorem-4 audit, benchmark suites and the runner."""

from car_rag.eval.audit import ClosureViolation, RetrieverAudit, SetAudit, audit_retriever, audit_set, doc_ids_of
from car_rag.eval.metrics import QueryScore, score_query, summarise
from car_rag.eval.stats import Rate, wilson
from car_rag.eval.suites import SUITES, AnswerRule, Suite, custom_suite, load_suite

__all__ = [
    "AnswerRule",
    "ClosureViolation",
    "QueryScore",
    "Rate",
    "RetrieverAudit",
    "SUITES",
    "SetAudit",
    "Suite",
    "audit_retriever",
    "audit_set",
    "custom_suite",
    "doc_ids_of",
    "load_suite",
    "score_query",
    "summarise",
    "wilson",
]
