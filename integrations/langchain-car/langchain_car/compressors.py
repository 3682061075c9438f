"""``CARCompressor``: car-rag's Stages 2 and 3 as a LangChain document compressor.

For users who keep their ``ContextualCompressionRetriever``: the documents its base retriever
returned are the anchors; the compressor looks up in ``store`` what voids them (up to the
authority closure) and returns the records in car-rag's order, active frontier first, each
marked with its status (``car_status``, ``car_superseded_by``, …), exactly as
:class:`~langchain_car.CARRetriever` over that base retriever would::

    retriever = ContextualCompressionRetriever(
        base_compressor=CARCompressor(store=vector_store, policy="security-advisory"),
        base_retriever=vector_store.as_retriever(),
    )

It expands rather than compresses: a superseder the base retriever missed is added.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from car_rag import CallerContext
from car_rag.policy import PolicyArg
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.runnables import RunnableLambda
from pydantic import ConfigDict, Field, PrivateAttr

from langchain_car.lookup import MetadataLookup, as_lookup
from langchain_car.retrievers import CARRetriever

__all__ = ["CARCompressor"]


class CARCompressor(BaseDocumentCompressor):
    """Resolves the documents a base retriever returned against ``store`` (car-rag's Stages 2–3)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: Any = Field(description="Where Stage 2 looks up what voids the documents: what CARRetriever's store takes.")
    policy: PolicyArg = Field(description="car-rag policy (or built-in policy name / policy file) deciding what voids what.")
    k: int | None = Field(default=None, ge=1, description="Documents returned at most (None: the whole closure).")
    caller: CallerContext | None = Field(default=None, description="Who is asking: the caller gate of every lookup.")
    doc_id_key: str = Field(default="doc_id", description="Metadata key holding the record id (else Document.id).")
    lookup_filter: dict[str, Any] | None = Field(default=None, description="Extra filter on every Stage-2 lookup.")

    _lookup: MetadataLookup = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._lookup = as_lookup(self.store)  # once: a list of documents is indexed here, not per query

    def _retriever(self, documents: Sequence[Document]) -> CARRetriever:
        """A CARRetriever whose Stage 1 is the documents given, in their order."""
        given = list(documents)
        return CARRetriever(
            base_retriever=RunnableLambda(lambda _query: given, name="compressed_documents"),
            store=self._lookup,
            policy=self.policy,
            k=self.k or sys.maxsize,
            caller=self.caller,
            doc_id_key=self.doc_id_key,
            lookup_filter=self.lookup_filter,
            stage1_channel="compressor",
        )

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return self._retriever(documents).invoke(query, config={"callbacks": callbacks})

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return await self._retriever(documents).ainvoke(query, config={"callbacks": callbacks})
