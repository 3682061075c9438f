"""The agent tool that keeps status, and the compressor that expands and marks, against the
stock ``create_retriever_tool`` that hands the same documents over unmarked."""

from __future__ import annotations

import asyncio

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, create_retriever_tool

from langchain_car import CARCompressor, create_car_retriever_tool, format_marked, record_to_document
from tests.corpus import ANCHOR, CHAIN_QUERY, QUERY, SUPERSEDER, records
from tests.unit_tests.test_retriever import DOCS, POLICY, KeywordRetriever, make

ANCHOR_TEXT = next(d.page_content for d in DOCS if d.id == ANCHOR)


def header_of(output: str, text: str) -> str:
    """The document header printed just above ``text`` in a tool's output."""
    before = output.split(text)[0].rstrip("\n")
    return before.rsplit("\n", 1)[-1]


def test_tool_marks_the_superseded_record_with_what_replaced_it() -> None:
    tool = create_car_retriever_tool(make(), "advisories", "Search security advisories.")
    assert isinstance(tool, BaseTool) and tool.name == "advisories"
    output = tool.invoke({"query": QUERY})
    assert output.startswith("[Document 1] (patch_release)\nRelease 4.17.99.")
    assert header_of(output, ANCHOR_TEXT).endswith("(vulnerability_disclosure; replaced by patch release 4.17.99)")
    assert output.count("replaced by") == 1  # the other disclosures are current: nothing replaced them


def test_stock_tool_hands_the_same_superseded_record_over_unmarked() -> None:
    """The contrast: ``create_retriever_tool`` formats ``{page_content}`` only."""
    output = create_retriever_tool(make(), "advisories", "Search security advisories.").invoke({"query": QUERY})
    assert ANCHOR_TEXT in output
    assert "replaced" not in output and "superseded" not in output


def test_tool_call_from_an_agent_gives_a_tool_message_and_the_documents() -> None:
    tool = create_car_retriever_tool(make(), "advisories", "Search.", response_format="content_and_artifact")
    message = tool.invoke({"type": "tool_call", "id": "call-1", "name": "advisories", "args": {"query": CHAIN_QUERY}})
    assert isinstance(message, ToolMessage) and message.tool_call_id == "call-1"
    assert isinstance(message.content, str)
    assert [d.metadata["car_status"] for d in message.artifact][:1] == ["active"]
    superseded = [d for d in message.artifact if d.metadata["car_status"] == "superseded"]
    assert superseded and all("replaced by" in header_of(message.content, d.page_content) for d in superseded)


def test_async_tool_gives_the_same_output() -> None:
    tool = create_car_retriever_tool(make(), "advisories", "Search.")
    assert asyncio.run(tool.ainvoke({"query": QUERY})) == tool.invoke({"query": QUERY})


def test_documents_without_status_are_refused_naming_them() -> None:
    plain = KeywordRetriever(documents=DOCS)
    tool = create_car_retriever_tool(plain, "advisories", "Search.")
    with pytest.raises(ValueError, match=r"lodash-disclosure: no 'car_status'.*CARCompressor"):
        tool.invoke({"query": QUERY})


def test_a_replacers_label_cannot_close_the_header() -> None:
    """Record values reach the header escaped: a version holding ')' and ';' is quoted."""
    forged = [r.model_copy(update={"version": "4.17.99); current"}) if r.doc_id == SUPERSEDER else r for r in records()]
    docs = make(docs=[record_to_document(r) for r in forged]).invoke(QUERY)
    header = header_of(format_marked(docs), ANCHOR_TEXT)
    assert header.endswith('(vulnerability_disclosure; replaced by "patch release 4.17.99); current")')


def test_compressor_expands_and_marks_what_the_base_retriever_returned() -> None:
    base = KeywordRetriever(documents=DOCS)
    assert SUPERSEDER not in [d.id for d in base.invoke(QUERY)]
    compressed = ContextualCompressionRetriever(
        base_compressor=CARCompressor(store=DOCS, policy=POLICY, k=5), base_retriever=base
    )
    docs = compressed.invoke(QUERY)
    assert [(d.id, d.metadata["car_status"]) for d in docs] == [(d.id, d.metadata["car_status"]) for d in make().invoke(QUERY)]
    assert docs[0].id == SUPERSEDER and next(d for d in docs if d.id == ANCHOR).metadata["car_superseded_by"] == [SUPERSEDER]
    output = create_car_retriever_tool(compressed, "advisories", "Search.").invoke({"query": QUERY})
    assert header_of(output, ANCHOR_TEXT).endswith("replaced by patch release 4.17.99)")


def test_compressor_without_k_returns_the_whole_closure_and_runs_async() -> None:
    compressor = CARCompressor(store=DOCS, policy=POLICY)
    given = [d for d in DOCS if d.id == ANCHOR]
    docs = compressor.compress_documents(given, QUERY)
    assert {d.id: d.metadata["car_status"] for d in docs} == {SUPERSEDER: "active", ANCHOR: "superseded"}
    again = asyncio.run(compressor.acompress_documents(given, QUERY))
    assert [d.id for d in again] == [d.id for d in docs]
    assert compressor.compress_documents([], QUERY) == []


def test_compressor_passes_foreign_documents_through_unresolved() -> None:
    foreign = Document(id="note-1", page_content="A note about lodash merge with no car-rag metadata.")
    docs = CARCompressor(store=DOCS, policy=POLICY).compress_documents([foreign], QUERY)
    assert [(d.id, d.metadata["car_status"]) for d in docs] == [("note-1", "unresolved")]
