"""Response synthesis from car-rag's evidence instead of raw node text.

The nodes a query engine hands to its synthesizer become one evidence document: by default
car-rag's records as numbered plain documents in its order (``form="plain"``,
:func:`car_rag.evidence.plain.render_plain`, whole texts within a token budget; what measured
best with the offline reader, see the core README), or the reader-first form
(``form="reader"``: an authority digest in the policy's words, then packets marked current or
replaced), or the audit XML (``form="audit"``), each rendered by :func:`car_rag.render`. The
LLM gets car-rag's answer prompt for that form: a system message and a user message with the
evidence and the question.

    engine = RetrieverQueryEngine(retriever, response_synthesizer=EvidenceSynthesizer(llm=llm, policy=policy))
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from pathlib import Path
from typing import Any, Literal

from car_rag import Policy, load_policy, render
from car_rag.evidence import EVIDENCE_FORMS, EvidenceForm
from car_rag.prompts import load_prompt, reader_system_prompt, system_prompt
from llama_index.core import Settings
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate, ChatPromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.response_synthesizers.base import BaseSynthesizer, QueryTextType
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.types import RESPONSE_TEXT_TYPE

from llama_index.retrievers.car.layout import MetadataLayout
from llama_index.retrievers.car.resolver import nodes_to_result

__all__ = ["EvidencePromptTemplate", "EvidenceSynthesizer", "evidence_prompt_template", "render_evidence"]


_USER_PROMPT = {"plain": "plain_user", "reader": "reader_user", "audit": "answer_user"}
_PER_MESSAGE = 4  # chat formats add a few tokens around each message
# Evidence with a packet replaced by a hidden record: the prompt is counted with the hidden-record rules.
_HIDDEN_PROBE = '<evidence-packet id="EP-1"><superseded-by hidden="true"/></evidence-packet><packet replaced-by="hidden">'


class EvidencePromptTemplate(ChatPromptTemplate):
    """car-rag's answer prompt for one evidence form (:mod:`car_rag.prompts`) as a LlamaIndex
    ``ChatPromptTemplate`` over ``{context_str}`` (the evidence) and ``{query_str}``.

    While its system message is the packaged one, formatting asks the core for the system
    prompt of the evidence at hand, so the hidden-record rules are sent only when a packet
    was replaced by a record the caller may not read (as :func:`car_rag.prompts.evidence_messages`
    does). An edited system message is sent as written."""

    form: str = "plain"

    def __init__(self, message_templates: Sequence[ChatMessage], *, form: str = "plain", **kwargs: Any) -> None:
        # set after the parent's constructor, which would keep an unknown keyword as a template variable
        super().__init__(message_templates, **kwargs)
        self.form = form

    def format_messages(self, llm: Any = None, **kwargs: Any) -> list[ChatMessage]:
        messages = super().format_messages(llm=llm, **kwargs)
        evidence = {**self.kwargs, **kwargs}.get("context_str")
        if (
            messages
            and messages[0].role == MessageRole.SYSTEM
            and messages[0].content == _system(self.form, "")
            and isinstance(evidence, str)
        ):
            messages[0] = ChatMessage(role=MessageRole.SYSTEM, content=_system(self.form, evidence))
        return messages


def _system(form: str, evidence: str) -> str:
    if form == "plain":
        return load_prompt("plain_system").strip()
    return reader_system_prompt(evidence) if form == "reader" else system_prompt(evidence)


def _check_form(form: str) -> None:
    if form not in EVIDENCE_FORMS:
        raise ValueError(f"form must be one of {', '.join(map(repr, EVIDENCE_FORMS))}, got {form!r}")


def evidence_prompt_template(form: EvidenceForm = "plain") -> EvidencePromptTemplate:
    """car-rag's answer prompt for an evidence ``form`` as a LlamaIndex chat template over
    ``{context_str}`` (the evidence) and ``{query_str}`` (see :class:`EvidencePromptTemplate`)."""
    _check_form(form)
    user = load_prompt(_USER_PROMPT[form])
    user = user.replace("{evidence}", "{context_str}").replace("{question}", "{query_str}")
    return EvidencePromptTemplate(
        message_templates=[
            ChatMessage(role=MessageRole.SYSTEM, content=_system(form, "")),
            ChatMessage(role=MessageRole.USER, content=user.strip()),
        ],
        form=form,
    )


def render_evidence(
    query: str,
    nodes: Sequence[NodeWithScore],
    policy: Policy | str | Path,
    *,
    layout: MetadataLayout | None = None,
    form: EvidenceForm = "plain",
    **render_kwargs: Any,
) -> str:
    """The evidence for nodes, rendered by :func:`car_rag.render` (its options: ``k``,
    ``superseded``, ``token_budget``, ``token_counter``; ``query_id`` and ``indent`` for the
    reader and audit forms; ``rationale`` and ``compact`` for the audit form): numbered plain
    documents (default), the reader-first form (``form="reader"``) or the audit XML (``form="audit"``).

    Nodes from :class:`CARRetriever` or the car-rag postprocessors keep their status; other
    nodes are resolved among themselves (see :func:`nodes_to_result`)."""
    _check_form(form)
    policy = load_policy(policy)
    result = nodes_to_result(query, nodes, policy, layout)
    return render(result, form, policy=policy, **render_kwargs)


class EvidenceSynthesizer(BaseSynthesizer):
    """Answers from car-rag's evidence for all retrieved nodes (plain documents by default), in one LLM call.

    Args:
        llm: the chat model (default ``Settings.llm``).
        policy: the car-rag policy the nodes were resolved under (rule descriptions and scope
            keys in the supersession sentences).
        form: ``"plain"`` (default: numbered plain documents in car-rag's order, what measured
            best with the offline reader), ``"reader"`` (authority digest, then packets) or
            ``"audit"`` (the full XML with retrieval rationale, for debugging and provenance).
        text_qa_template: a chat template over ``{context_str}`` and ``{query_str}``; default
            :func:`evidence_prompt_template` for ``form`` (car-rag's answer prompt).
        k: render only the first ``k`` records.
        superseded: ``"include"`` (marked, with a pointer to what replaced them) or ``"omit"``.
        token_budget: the most tokens of evidence; whole packets are left out, least useful
            first, until it fits. Default: what the LLM's context window leaves after the
            prompt and the answer (``context_window - num_output - prompt tokens``, from the
            synthesizer's ``PromptHelper``, i.e. the LLM's metadata); a given budget is capped
            at that too.
        tokenizer: counts tokens (``len(tokenizer(text))``); default ``Settings.tokenizer``.
        compact: audit form only: the same facts in fewer tokens.
    """

    def __init__(
        self,
        llm: LLM | None = None,
        policy: Policy | str | Path | None = None,
        *,
        layout: MetadataLayout | None = None,
        form: EvidenceForm = "plain",
        text_qa_template: BasePromptTemplate | None = None,
        k: int | None = None,
        superseded: Literal["include", "omit"] = "include",
        token_budget: float | None = None,
        tokenizer: Callable[[str], Sequence[Any]] | None = None,
        compact: bool = False,
        callback_manager: CallbackManager | None = None,
        prompt_helper: PromptHelper | None = None,
        streaming: bool = False,
    ) -> None:
        if policy is None:
            raise ValueError("EvidenceSynthesizer needs the car-rag policy the nodes were resolved under")
        super().__init__(llm=llm, callback_manager=callback_manager, prompt_helper=prompt_helper, streaming=streaming)
        self.policy = load_policy(policy)
        self.layout = layout or MetadataLayout()
        self._text_qa_template = text_qa_template or evidence_prompt_template(form)
        self._token_budget = token_budget
        self._tokenizer = tokenizer
        self._render_kwargs: dict[str, Any] = {"form": form, "k": k, "superseded": superseded}
        if form == "audit":
            self._render_kwargs["compact"] = compact

    def _get_prompts(self) -> PromptDictType:
        return {"text_qa_template": self._text_qa_template}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "text_qa_template" in prompts:
            self._text_qa_template = prompts["text_qa_template"]

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by the synthesizer's tokenizer (default ``Settings.tokenizer``)."""
        return len((self._tokenizer or Settings.tokenizer)(text))

    def evidence_budget(self, query: str) -> int:
        """Tokens left for evidence: the context window less the answer (``num_output``) and the
        prompt around the evidence (with the hidden-record rules, the longest it can be)."""
        helper = self._prompt_helper
        messages = self._text_qa_template.format_messages(context_str=_HIDDEN_PROBE, query_str=query)
        prompt = sum(self.count_tokens(m.content or "") + _PER_MESSAGE for m in messages) - self.count_tokens(_HIDDEN_PROBE)
        available = helper.context_window - helper.num_output - prompt
        if available < 1:
            raise ValueError(
                f"the LLM's context window ({helper.context_window} tokens) leaves no room for evidence after the "
                f"prompt ({prompt}) and the answer (num_output={helper.num_output})"
            )
        return available if self._token_budget is None else min(int(self._token_budget), available)

    def render(self, query: str, nodes: Sequence[NodeWithScore]) -> str:
        """The evidence this synthesizer puts in front of the LLM for ``nodes``, within
        :meth:`evidence_budget` tokens counted by the LLM's tokenizer."""
        return render_evidence(
            query,
            nodes,
            self.policy,
            layout=self.layout,
            token_budget=self.evidence_budget(query),
            token_counter=self.count_tokens,
            **self._render_kwargs,
        )

    # The base class hands get_response only the nodes' text; pass the nodes along.
    def synthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> Any:
        return super().synthesize(query, nodes, additional_source_nodes, car_nodes=nodes, **response_kwargs)

    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> Any:
        return await super().asynthesize(query, nodes, additional_source_nodes, car_nodes=nodes, **response_kwargs)

    def _messages(
        self, query_str: str, text_chunks: Sequence[str], car_nodes: Sequence[NodeWithScore] | None
    ) -> list[ChatMessage]:
        if car_nodes is None:  # called directly with text: each chunk is an unresolved document
            car_nodes = [NodeWithScore(node=TextNode(text=t, id_=f"chunk-{i}")) for i, t in enumerate(text_chunks, 1)]
        evidence = self.render(query_str, car_nodes)
        return self._text_qa_template.format_messages(context_str=evidence, query_str=query_str)

    def get_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        car_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        messages = self._messages(query_str, text_chunks, car_nodes)
        if self._streaming:
            stream = self._llm.stream_chat(messages, **response_kwargs)

            def deltas() -> Generator[str, None, None]:
                for chunk in stream:
                    yield chunk.delta or ""

            return deltas()
        return self._llm.chat(messages, **response_kwargs).message.content or ""

    async def aget_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        car_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        messages = self._messages(query_str, text_chunks, car_nodes)
        if self._streaming:
            stream = await self._llm.astream_chat(messages, **response_kwargs)

            async def deltas() -> AsyncGenerator[str, None]:
                async for chunk in stream:
                    yield chunk.delta or ""

            return deltas()
        return (await self._llm.achat(messages, **response_kwargs)).message.content or ""
