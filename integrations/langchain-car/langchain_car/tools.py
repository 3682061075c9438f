"""An agent's retrieval tool that keeps status: what replaced what travels with the text.

LangChain's ``create_retriever_tool`` formats each document as ``{page_content}``: an agent
given car-rag's documents that way reads a superseded record as plainly as the record that
replaced it (car-rag's order, which says which controls, is lost once the agent quotes one).
:func:`create_car_retriever_tool` formats them as car-rag's plain evidence
(:func:`car_rag.evidence.plain.render_plain` with ``marked=True``): numbered documents in
car-rag's order, each replaced record's header naming what replaced it, with the same escaping
of record text and values as every other form::

    [Document 1] (patch_release)
    Release 4.17.12. …

    [Document 2] (vulnerability_disclosure; replaced by patch release 4.17.12)
    CVE-2099-10001: …
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from car_rag.evidence import render_plain
from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import StructuredTool
from langchain_core.tools.retriever import RetrieverInput

from langchain_car.evidence import _build

__all__ = ["create_car_retriever_tool", "format_marked"]

_STATUS_KEY = "car_status"


def format_marked(documents: Sequence[Document], *, doc_id_key: str = "doc_id") -> str:
    """Documents resolved by car-rag as plain evidence, each replaced one marked with what
    replaced it. A document without car-rag's status (``car_status``) is refused, naming it:
    nothing could say whether it is current."""
    for position, doc in enumerate(documents, 1):
        if _STATUS_KEY not in (doc.metadata or {}):
            name = (doc.metadata or {}).get(doc_id_key) or doc.id or f"document {position}"
            raise ValueError(
                f"{name!s}: no {_STATUS_KEY!r} in its metadata, so its authority is unknown; retrieve through "
                "langchain_car.CARRetriever, or add langchain_car.CARCompressor to a ContextualCompressionRetriever"
            )
    result, shown = _build(documents, None, None, doc_id_key)  # records past ``shown`` only name what replaced one
    return render_plain(result, k=shown, marked=True)


def create_car_retriever_tool(
    retriever: BaseRetriever,
    name: str,
    description: str,
    *,
    doc_id_key: str = "doc_id",
    response_format: Literal["content", "content_and_artifact"] = "content",
) -> StructuredTool:
    """A tool for an agent, like ``langchain_core.tools.create_retriever_tool``, whose output is
    :func:`format_marked` of what ``retriever`` returns (a :class:`~langchain_car.CARRetriever`,
    or a ``ContextualCompressionRetriever`` with :class:`~langchain_car.CARCompressor`).
    ``response_format="content_and_artifact"`` also hands back the documents themselves."""

    def reply(docs: list[Document]) -> str | tuple[str, list[Document]]:
        content = format_marked(docs, doc_id_key=doc_id_key)
        return (content, docs) if response_format == "content_and_artifact" else content

    def func(query: str, callbacks: Callbacks = None) -> str | tuple[str, list[Document]]:
        return reply(retriever.invoke(query, config={"callbacks": callbacks}))

    async def afunc(query: str, callbacks: Callbacks = None) -> str | tuple[str, list[Document]]:
        return reply(await retriever.ainvoke(query, config={"callbacks": callbacks}))

    return StructuredTool(
        name=name,
        description=description,
        func=func,
        coroutine=afunc,
        args_schema=RetrieverInput,
        response_format=response_format,
    )
