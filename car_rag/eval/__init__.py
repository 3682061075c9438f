"""Evaluation you run on your own retriever: TCA and friends, the Theorem-4 audit, Wilson
intervals, and the classifier of a reader's answers.

The benchmark harness (built-in suites, ``car-rag bench``, the framework peers, the reader
evaluation ``car-rag eval-llm``, ``car-rag guard`` over answer files, plots) is the
``car_rag_evals`` package beside this one.
"""

from car_rag.eval.audit import ClosureViolation, RetrieverAudit, SetAudit, audit_retriever, audit_set, doc_ids_of
from car_rag.eval.metrics import AnswerRule, QueryScore, score_query, summarise
from car_rag.eval.stats import Rate, wilson

__all__ = [
    "AnswerRule",
    "ClosureViolation",
    "QueryScore",
    "Rate",
    "RetrieverAudit",
    "SetAudit",
    "audit_retriever",
    "audit_set",
    "doc_ids_of",
    "score_query",
    "summarise",
    "wilson",
]
