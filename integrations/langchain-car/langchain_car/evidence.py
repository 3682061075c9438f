"""Evidence for the model: retrieved documents → car-rag evidence → prompt.

``format_evidence`` is a runnable, so a chain reads::

    chain = (
        {"context": retriever | format_evidence, "question": RunnablePassthrough()}
        | answer_prompt
        | llm
    )

The documents are turned back into the car-rag :class:`~car_rag.RetrievalResult` their
``car_*`` metadata describe, and rendered by the core: by default as numbered plain
documents in car-rag's order (``form="plain"``, :func:`car_rag.evidence.plain.render_plain`,
what measured best with the offline reader: the core README, "Does the reader-first evidence
make the reader right?"), or the reader-first form (``form="reader"``: an authority digest in
the policy's words, then packets marked current or replaced), or the audit XML
(``form="audit"``); :func:`car_rag.render` renders each, with the same escaping, token budget
and wording as the core, nothing re-implemented. Documents that did not come from :class:`~langchain_car.CARRetriever`
are rendered as current packets in their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from car_rag import Policy, RetrievalResult, builtin_policies, load_policy, render
from car_rag.adapters import RecordLayout
from car_rag.annotations import result_from_annotations
from car_rag.evidence import EVIDENCE_FORMS, EvidenceForm, SupersededMode, TokenCounter
from car_rag.prompts import evidence_messages, load_prompt
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda

__all__ = [
    "CARAnswerPrompt",
    "answer_prompt",
    "answer_prompt_template",
    "documents_to_result",
    "evidence_formatter",
    "format_evidence",
]


def documents_to_result(
    documents: Sequence[Document], *, policy: Policy | None = None, query: str | None = None, doc_id_key: str = "doc_id"
) -> RetrievalResult:
    """The car-rag result the documents' ``car_*`` metadata describe, in the given order.

    Ranks (and so packet ids ``EP-<rank>``) are the documents' positions. Records linked by
    a supersession edge but not among the documents are kept, text-less, so that packets
    can still name them; they are ranked after the documents (render only the first
    ``len(documents)`` records).
    """
    return _build(documents, policy, query, doc_id_key)[0]


def _build(
    documents: Sequence[Document], policy: Policy | None, query: str | None, doc_id_key: str
) -> tuple[RetrievalResult, int]:
    layout = RecordLayout(doc_id_key=doc_id_key, json_lists=False)
    items = []
    for position, doc in enumerate(documents, 1):
        meta = doc.metadata or {}
        record = layout.evidence_record(meta, doc.page_content, policy, default_id=doc.id or f"doc-{position}")
        items.append((record, meta))
    if query is None:
        query = next((d.metadata["car_query"] for d in documents if isinstance((d.metadata or {}).get("car_query"), str)), "")
    result = result_from_annotations(items, query=query, policy=policy, linked=True)
    return result, len({record.doc_id for record, _ in items})


def _policy_for(documents: Sequence[Document]) -> Policy | None:
    """The built-in policy the documents were retrieved under, when they name one whose rules
    cover every rule on their edges (else None: sentences then name rules without descriptions)."""
    names = {(d.metadata or {}).get("car_policy") for d in documents} - {None}
    if len(names) != 1 or (name := names.pop()) not in builtin_policies():
        return None
    policy = load_policy(name)
    rules = {
        link["rule"]
        for d in documents
        for link in [*(d.metadata or {}).get("car_voided_by", []), *(d.metadata or {}).get("car_voids", [])]
    }
    known = {r.name for r in policy.rules} | {"explicit"}
    return policy if rules <= known else None


def evidence_formatter(
    policy: Policy | str | None = None,
    *,
    form: EvidenceForm = "plain",
    k: int | None = None,
    superseded: SupersededMode = "include",
    token_budget: float | None = None,
    token_counter: TokenCounter | None = None,
    query_id: str | None = None,
    rationale: bool = True,
    indent: str | None = "  ",
    doc_id_key: str = "doc_id",
    compact: bool = False,
) -> Runnable[list[Document], str]:
    """A runnable rendering a list of documents as car-rag's evidence text (:func:`car_rag.render`).

    ``form="plain"`` (default) gives the records as numbered plain documents in car-rag's
    order (:func:`car_rag.evidence.plain.render_plain`: what measured best with the offline
    reader, see the core README); ``form="reader"`` the reader-first form, an authority
    digest and packets (:func:`car_rag.evidence.reader.render_reader`); ``form="audit"`` the
    full audit XML with retrieval rationale (:func:`car_rag.evidence.audit.render_audit`), for
    debugging and provenance (``rationale`` and ``compact`` apply to it only). ``policy``
    supplies the state words, verbs and rule descriptions (default: the built-in policy named
    in the documents' ``car_policy``, if any). ``k`` packets at most, ``superseded="omit"``
    to leave superseded records out, a ``token_budget`` (whole packets are dropped, least
    useful first).
    """
    if form not in EVIDENCE_FORMS:
        raise ValueError(f"form must be one of {', '.join(map(repr, EVIDENCE_FORMS))}, got {form!r}")
    bound = load_policy(policy) if isinstance(policy, str) else policy

    def format_evidence(documents: list[Document]) -> str:
        docs = list(documents)
        policy_ = bound or _policy_for(docs)
        result, shown = _build(docs, policy_, None, doc_id_key)
        # Records beyond the documents are text-less placeholders here: no provenance packets.
        return render(
            result,
            form,
            policy=policy_,
            k=shown if k is None else min(k, shown),
            superseded=superseded,
            token_budget=token_budget,
            token_counter=token_counter,
            query_id=query_id,
            indent=indent,
            provenance=False,
            rationale=rationale,
            compact=compact,
        )

    return RunnableLambda(format_evidence, name="format_evidence")


format_evidence: Runnable[list[Document], str] = evidence_formatter()
"""Documents → numbered plain documents with the default options (see :func:`evidence_formatter`)."""


class CARAnswerPrompt(ChatPromptTemplate):
    """car-rag's packaged answer prompt (:mod:`car_rag.prompts`) as a LangChain
    ``ChatPromptTemplate`` over ``{context}`` (the evidence) and ``{question}``.

    Its templates are the plain-documents prompt. While they are the packaged ones, formatting
    asks the core (:func:`car_rag.prompts.evidence_messages`) for the messages of the evidence
    at hand, so the prompt matches the evidence's form (plain, reader-first or audit XML) and the
    hidden-record rules are sent only when a packet was replaced by a record the caller may
    not read. Edited templates are formatted as written."""

    def format_messages(self, **kwargs: Any) -> list[BaseMessage]:
        values = self._merge_partial_and_user_variables(**kwargs)
        evidence, question = values.get("context"), values.get("question")
        if not isinstance(evidence, str) or not isinstance(question, str):
            raise TypeError("answer_prompt takes {'context': <evidence str>, 'question': <str>}")
        if [getattr(getattr(m, "prompt", None), "template", None) for m in self.messages] != _packaged_templates():
            return super().format_messages(**kwargs)
        system, user = evidence_messages(question, evidence)
        return [SystemMessage(content=system["content"]), HumanMessage(content=user["content"])]

    async def aformat_messages(self, **kwargs: Any) -> list[BaseMessage]:
        return self.format_messages(**kwargs)


def _packaged_templates() -> list[str]:
    return [load_prompt("plain_system").strip(), load_prompt("plain_user").strip().replace("{evidence}", "{context}")]


def answer_prompt_template() -> CARAnswerPrompt:
    """A fresh :class:`CARAnswerPrompt` (``answer_prompt`` is one)."""
    system, user = _packaged_templates()
    # from_messages builds the class it is called on, but is typed as returning ChatPromptTemplate
    return cast(CARAnswerPrompt, CARAnswerPrompt.from_messages([("system", system), ("human", user)]))


answer_prompt: ChatPromptTemplate = answer_prompt_template()
"""car-rag's packaged answer prompt as a ``ChatPromptTemplate`` (:class:`CARAnswerPrompt`):
takes ``{"context": evidence, "question": str}`` and gives system + user chat messages, with
the prompt written for the evidence's form (plain, reader-first or audit)."""
