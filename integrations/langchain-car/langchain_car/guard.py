"""The authority guard after the model: is the answer consistent with the evidence it was given?

    chain = (
        RunnablePassthrough.assign(documents=itemgetter("question") | retriever)
        | RunnablePassthrough.assign(
            answer={"context": itemgetter("documents") | format_evidence, "question": itemgetter("question")}
            | answer_prompt | llm | StrOutputParser())
        | authority_guard()
    )
    out = chain.invoke({"question": "Is lodash still vulnerable?"})
    out["guard"].flagged, [f.message for f in out["guard"].findings]

The documents are turned back into the car-rag result their ``car_*`` metadata describe
(:func:`langchain_car.documents_to_result`, the same packet ids ``format_evidence`` gave
them) and judged by :func:`car_rag.guard.check_answer`; nothing is re-implemented here.
"""

from __future__ import annotations

from typing import Any

from car_rag import Policy, load_policy
from car_rag.evidence import EvidenceForm
from car_rag.guard import GuardReport, check_answer
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableLambda

from langchain_car.evidence import _build, _policy_for

__all__ = ["authority_guard", "check_documents"]


def check_documents(
    answer: Any,
    documents: list[Document],
    policy: Policy | str | None = None,
    *,
    k: int | None = None,
    doc_id_key: str = "doc_id",
    form: EvidenceForm = "plain",
) -> GuardReport:
    """The guard's verdict on ``answer`` (text or a chat message) given the ``documents`` it was
    generated from, read in the evidence ``form`` the model saw (``format_evidence``'s default,
    plain: citations are ``[Document n]``; reader and audit: ``[EP-n]``)."""
    text = answer.content if isinstance(answer, BaseMessage) else answer
    docs = list(documents)
    policy_ = (load_policy(policy) if isinstance(policy, str) else policy) or _policy_for(docs)
    result, shown = _build(docs, policy_, None, doc_id_key)
    return check_answer(text, result, policy_, k=shown if k is None else min(k, shown), form=form)


def authority_guard(
    policy: Policy | str | None = None,
    *,
    k: int | None = None,
    doc_id_key: str = "doc_id",
    answer_key: str = "answer",
    documents_key: str = "documents",
    form: EvidenceForm = "plain",
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """A runnable placed after the model: takes a dict holding the answer (``answer_key``)
    and the documents it was generated from (``documents_key``), and returns the same dict
    with ``guard``: a :class:`car_rag.guard.GuardReport` (``flagged``, ``findings``), reading
    citations as the evidence ``form`` numbers them. It never raises on the answer's content;
    an answer it cannot judge says why."""

    def guard(inputs: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(inputs, dict) or answer_key not in inputs or documents_key not in inputs:
            raise TypeError(f"authority_guard takes a dict with {answer_key!r} and {documents_key!r}")
        report = check_documents(inputs[answer_key], inputs[documents_key], policy, k=k, doc_id_key=doc_id_key, form=form)
        return {**inputs, "guard": report}

    return RunnableLambda(guard, name="car_authority_guard")
