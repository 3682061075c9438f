"""The authority guard after the model, in a chain (a fake chat model, said so in its name)."""

from __future__ import annotations

from operator import itemgetter

import pytest
from car_rag.guard import GuardReport
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnablePassthrough

from langchain_car import answer_prompt, authority_guard, check_documents, format_evidence
from tests.corpus import QUERY
from tests.unit_tests.test_retriever import make


def _chain(answer: str):
    retriever = make()
    return (
        RunnablePassthrough.assign(documents=itemgetter("question") | retriever)
        | RunnablePassthrough.assign(
            answer={"context": itemgetter("documents") | format_evidence, "question": itemgetter("question")}
            | answer_prompt
            | FakeListChatModel(responses=[answer])
            | StrOutputParser()
        )
        | authority_guard()
    )


def test_stale_answer_is_flagged_in_the_chain() -> None:
    out = _chain("No, it is not patched.").invoke({"question": QUERY})
    report = out["guard"]
    assert isinstance(report, GuardReport) and report.flagged
    assert [f.kind for f in report.findings] == ["stale_state"]
    assert "'patched'" in report.findings[0].message and out["answer"] == "No, it is not patched."


def test_consistent_answer_passes() -> None:
    out = _chain("Yes, it is patched in 4.17.99 [EP-1].").invoke({"question": QUERY})
    assert out["guard"].judged and not out["guard"].flagged


def test_message_answers_and_bad_input() -> None:
    docs = make().invoke(QUERY)
    assert check_documents(AIMessage(content="It remains vulnerable."), docs).flagged
    assert not check_documents("", docs).judged
    with pytest.raises(TypeError, match="answer"):
        authority_guard().invoke({"documents": docs})


def test_citations_are_read_as_the_evidence_form_numbers_them() -> None:
    docs = make().invoke(QUERY)
    plain = check_documents("Yes, it is patched in 4.17.99 [Document 9].", docs)  # format_evidence's default: plain
    assert [f.kind for f in plain.findings] == ["unknown_citation"] and "[Document 9]" in plain.findings[0].message
    assert not check_documents("Yes, it is patched in 4.17.99 [Document 1].", docs).flagged
    packets = check_documents("Yes, it is patched in 4.17.99 [EP-9].", docs, form="reader")
    assert [f.kind for f in packets.findings] == ["unknown_citation"] and "EP-9" in packets.findings[0].message
