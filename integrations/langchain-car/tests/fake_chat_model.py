"""``FakeEvidenceChatModel``: a fake chat model (no language model behind it) for chain tests.

It reads the ``<evidence>`` out of its last message (reader-first or audit form) and answers
the way the packaged system prompt asks a real model to: from the active (current) packets,
citing their ids, naming what was superseded and by what. Deterministic, so a test can
assert what reached the model.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

_EVIDENCE = re.compile(r"<evidence\b.*?</evidence>", re.S)


class FakeEvidenceChatModel(BaseChatModel):
    """Fake chat model: cites the active packets of the evidence it is given."""

    seen: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "fake-evidence-chat-model"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        match = _EVIDENCE.search(str(messages[-1].content))
        if match is None:
            answer = "I was given no evidence."
        else:
            root = ET.fromstring(match.group(0))
            if root.find("packet") is not None or root.find("digest") is not None:  # reader-first form
                packets = list(root.iter("packet"))
                active = [f"[{p.get('id')}]" for p in packets if p.get("status") == "current"]
                stale = [
                    f"[{p.get('id')}] is superseded by {p.get('replaced-by')}" for p in packets if p.get("status") == "replaced"
                ]
            else:
                packets = list(root.iter("evidence-packet"))
                active = [f"{p.get('doc-id')} [{p.get('id')}]" for p in packets if p.get("status") == "active"]
                stale = []
                for p in packets:
                    if p.get("status") == "superseded":
                        by = [s.get("doc-id", "") for s in p.iter("superseded-by") if s.get("controlling") == "true"]
                        stale.append(f"{p.get('doc-id')} [{p.get('id')}] is superseded by {', '.join(by) or 'a hidden record'}")
            answer = "Active evidence: " + "; ".join(active) + "."
            if stale:
                answer += " Superseded: " + "; ".join(stale) + "."
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])
