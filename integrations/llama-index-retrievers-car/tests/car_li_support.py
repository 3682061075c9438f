"""Test support shared by the LlamaIndex integration tests (a uniquely named module, so the
suite can run in one session with car-rag's own tests)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

POLICY = "security-advisory"
STOPWORDS = frozenset(
    "a an and are as at be by can for from has have in is it its of on or so still the to via was with "
    "what when which who will".split()
)


def content_words(text: str) -> set[str]:
    """Lower-cased word tokens minus stop words, to check vocabulary disjointness."""
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


class FakeLLM(CustomLLM):
    """A fake LLM, named as such: no model behind it. It records every prompt it is given and
    answers by citing the first active (current) evidence packet it sees (or says it used the
    context); ``scripted`` replaces that answer."""

    prompts: list[str] = []
    scripted: str | None = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="fake-llm", context_window=32_000, num_output=256)

    def _answer(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if self.scripted is not None:
            return self.scripted
        active = re.search(r'<evidence-packet id="(EP-\d+)" doc-id="([^"]+)" status="active"', prompt)
        if active:
            return f"Answered from {active.group(2)} [{active.group(1)}]."
        current = re.search(r'<packet id="(EP-\d+)" status="current"', prompt)
        if current:
            return f"Answered from [{current.group(1)}]."
        return "Answered from the context."

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self._answer(prompt)

        def gen() -> CompletionResponseGen:
            so_far = ""
            for word in text.split(" "):
                delta = word if not so_far else " " + word
                so_far += delta
                yield CompletionResponse(text=so_far, delta=delta)

        return gen()


def child(el: ET.Element, path: str) -> ET.Element:
    """The first element at ``path`` under ``el``, which must exist (``find`` may be None)."""
    found = el.find(path)
    assert found is not None, f"no {path!r} under <{el.tag}>"
    return found


def text_of(el: ET.Element, path: str | None = None) -> str:
    """The text of ``el``, or of its first element at ``path``; an element without text fails."""
    node = el if path is None else child(el, path)
    assert node.text is not None, f"<{node.tag}> has no text"
    return node.text
