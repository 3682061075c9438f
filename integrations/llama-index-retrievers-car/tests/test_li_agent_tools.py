"""LlamaIndex's agent tools over CARRetriever keep status: ``RetrieverTool`` prints the node
metadata car-rag shows to an LLM (``car_status``, ``car_superseded_by``, ``car_rule``) above each
text, and ``QueryEngineTool`` answers from car-rag's evidence, its source nodes annotated.
Real Chroma, real MiniLM; the LLM is a fake, named as such."""

from __future__ import annotations

from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.tools import QueryEngineTool, RetrieverTool

from llama_index.retrievers.car import CARRetriever, EvidenceSynthesizer
from test_li_retriever import YAML_Q

DISCLOSURE, RELEASE = "adv-yamlette-disclosure", "adv-yamlette-2.0.1-release"


def _block_of(output: str, text: str) -> str:
    """The metadata lines LlamaIndex printed above ``text`` (its node's block)."""
    return output.split(text)[0].rsplit("\n\n", 2)[-2]


def test_retriever_tool_prints_status_above_the_superseded_text(index, records, policy):
    by_id = {r.doc_id: r for r in records}
    tool = RetrieverTool.from_defaults(
        CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy), name="advisories"
    )
    output = tool.call(YAML_Q)
    assert [n.node.metadata["doc_id"] for n in output.raw_output][:1] == [RELEASE]
    block = _block_of(output.content, by_id[DISCLOSURE].text)
    assert "car_status: superseded" in block and f"car_superseded_by: ['{RELEASE}']" in block
    assert "car_rule: patch_fixes_disclosure" in block
    assert "car_status: active" in _block_of(output.content, by_id[RELEASE].text)


def test_stock_retriever_tool_over_the_index_alone_prints_no_status(index, records):
    """The contrast: the same index without car-rag hands the disclosure over with nothing on it."""
    output = RetrieverTool.from_defaults(index.as_retriever(similarity_top_k=3), name="advisories").call(YAML_Q)
    assert next(r.text for r in records if r.doc_id == DISCLOSURE) in output.content
    assert "car_status" not in output.content and RELEASE not in output.content


def test_query_engine_tool_answers_from_evidence_that_marks_the_replaced_record(index, policy, fake_llm):
    retriever = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy)
    engine = RetrieverQueryEngine(
        retriever=retriever, response_synthesizer=EvidenceSynthesizer(llm=fake_llm, policy=policy, form="reader")
    )
    output = QueryEngineTool.from_defaults(engine, name="advisories", description="Security advisories.").call(YAML_Q)
    assert output.content == "Answered from [EP-1]."  # the fake LLM cites the first current packet
    prompt = fake_llm.prompts[-1]
    assert 'status="replaced" replaced-by="EP-1"' in prompt
    statuses = {n.node.metadata["doc_id"]: n.node.metadata["car_status"] for n in output.raw_output.source_nodes}
    assert statuses[RELEASE] == "active" and statuses[DISCLOSURE] == "superseded"
