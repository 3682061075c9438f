"""The adapter contract shared with langchain-car (k, doc_id_key, the prompt) and the
synthesizer's budget in the LLM's own tokens; real Chroma and MiniLM, a fake LLM (named so)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from car_rag import CallerContext
from car_rag.prompts import load_prompt
from llama_index.core import Settings
from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.prompts import ChatPromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import BaseNode, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

from car_li_support import FakeLLM
from llama_index.retrievers.car import DEFAULT_K, CARRetriever, EvidenceSynthesizer, evidence_prompt_template
from test_li_retriever import YAML_Q

HIDDEN_RULE = load_prompt("reader_hidden").strip().splitlines()[0]
VAULT_Q = "Can a network attacker still recover vaultkit API tokens through the timing side channel?"


class SmallWindowFakeLLM(FakeLLM):
    """The fake LLM with a small context window."""

    window: int = 900

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="fake-llm-small", context_window=self.window, num_output=200)


def distinct(nodes) -> list[str]:
    return list(dict.fromkeys(n.node.metadata["doc_id"] for n in nodes))


def test_k_caps_the_records_returned(index, policy):
    assert DEFAULT_K == 5
    wide = CARRetriever(index.as_retriever(similarity_top_k=10), index.vector_store, policy)
    assert len(distinct(wide.retrieve(YAML_Q))) == 5
    two = CARRetriever(index.as_retriever(similarity_top_k=10), index.vector_store, policy, k=2)
    assert distinct(two.retrieve(YAML_Q)) == distinct(wide.retrieve(YAML_Q))[:2]
    with pytest.raises(ValueError, match="k must be"):
        CARRetriever(index.as_retriever(), index.vector_store, policy, k=0)


def test_doc_id_key(nodes, policy):
    renamed: list[BaseNode] = [
        TextNode(id_=f"n{i}", text=n.text, metadata={("rid" if k == "doc_id" else k): v for k, v in n.metadata.items()})
        for i, n in enumerate(nodes)
    ]
    retriever = CARRetriever(BM25Retriever.from_defaults(nodes=renamed, similarity_top_k=3), renamed, policy, doc_id_key="rid")
    assert retriever.retrieve(YAML_Q)[0].node.metadata["rid"] == "adv-yamlette-2.0.1-release"


def test_prompt_is_a_chat_template_and_the_hidden_rule_is_sent_only_when_needed(index, policy, fake_llm):
    assert isinstance(evidence_prompt_template(), ChatPromptTemplate)
    base = index.as_retriever(similarity_top_k=1)
    synthesizer = EvidenceSynthesizer(llm=fake_llm, policy=policy, form="reader")
    RetrieverQueryEngine(retriever=CARRetriever(base, index.vector_store, policy), response_synthesizer=synthesizer).query(
        VAULT_Q
    )
    assert HIDDEN_RULE not in fake_llm.prompts[-1]
    outsider = CARRetriever(base, index.vector_store, policy, caller=CallerContext("other-co", {"dev"}))
    RetrieverQueryEngine(retriever=outsider, response_synthesizer=synthesizer).query(VAULT_Q)
    assert 'replaced-by="hidden"' in fake_llm.prompts[-1] and HIDDEN_RULE in fake_llm.prompts[-1]
    # The default plain documents say it in the replaced record's header, naming nothing.
    RetrieverQueryEngine(retriever=outsider, response_synthesizer=EvidenceSynthesizer(llm=fake_llm, policy=policy)).query(VAULT_Q)
    assert "; replaced by a record you are not permitted to read)\n" in fake_llm.prompts[-1]


def _engine(index, policy, llm, **kwargs: Any) -> RetrieverQueryEngine:
    """The reader-first form: its packets and <not-shown> list make what the budget left out countable."""
    retriever = CARRetriever(index.as_retriever(similarity_top_k=10), index.vector_store, policy, k=10)
    synthesizer = EvidenceSynthesizer(llm=llm, policy=policy, **{"form": "reader", **kwargs})
    return RetrieverQueryEngine(retriever=retriever, response_synthesizer=synthesizer)


def test_evidence_is_budgeted_in_the_llms_tokens_leaving_room_for_the_answer(index, policy):
    roomy = FakeLLM(prompts=[])
    _engine(index, policy, roomy).query(YAML_Q)
    assert "<not-shown" not in roomy.prompts[-1]
    whole = len(Settings.tokenizer(roomy.prompts[-1]))
    llm = SmallWindowFakeLLM(prompts=[], window=whole + 200 - 60)  # 60 tokens short of the whole evidence
    _engine(index, policy, llm).query(YAML_Q)
    prompt = llm.prompts[-1]
    assert "<not-shown" in prompt
    assert len(Settings.tokenizer(prompt)) + 200 <= llm.window


def test_the_tokenizer_decides_the_budget(index, policy):
    words = SmallWindowFakeLLM(prompts=[], window=3000)
    _engine(index, policy, words, tokenizer=str.split).query(YAML_Q)
    characters = SmallWindowFakeLLM(prompts=[], window=3000)
    _engine(index, policy, characters, tokenizer=list).query(YAML_Q)
    shown = [len(re.findall(r"<packet ", llm.prompts[-1])) for llm in (words, characters)]
    assert shown[0] > shown[1] >= 1


def test_a_window_too_small_for_the_prompt_is_a_clear_error(index, policy):
    with pytest.raises(ValueError, match="context window .* leaves no room for evidence"):
        _engine(index, policy, SmallWindowFakeLLM(prompts=[], window=300)).query(YAML_Q)
