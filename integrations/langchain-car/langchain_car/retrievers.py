"""``CARRetriever``: controlling-authority retrieval over any LangChain retriever.

Stage 1 is the retriever you already run (a vector store retriever, ``BM25Retriever``, an
``EnsembleRetriever``, …): its documents are the anchors, in its order. Stages 2 and 3 are
car-rag's :class:`car_rag.adapters.AuthorityClosure`: it plans the metadata lookups (same scope on
each rule's ``within`` keys, or naming an anchor in ``supersedes``), which
:class:`~langchain_car.lookup.WhereStore` sends to the vector store as ``where`` filters,
up to the authority closure, and ranks the records found (active frontier first in anchor
order, superseded records after as provenance). This module is the LangChain face only.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, overload

from car_rag import CallerContext, Policy, RetrievalResult, load_policy
from car_rag.adapters import Anchor, AuthorityClosure, LayoutError, RecordLayout, checked_k
from car_rag.annotations import annotations_for, unresolved_annotations
from car_rag.layout import CAR_STAGE1_CHANNEL, CAR_STAGE1_RANK, CAR_STAGE1_SCORE
from car_rag.lookup import aresolve_closure, resolve_closure
from car_rag.policy import PolicyArg
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables import Runnable
from pydantic import Field, PrivateAttr, model_validator

from langchain_car.lookup import MetadataLookup, WhereStore, as_lookup
from langchain_car.store_retriever import CARVectorStoreRetriever

__all__ = ["CARRetriever", "RESOLUTION_EVENT"]

RESOLUTION_EVENT = "car_resolution"
"""Name of the custom event each query dispatches on the ``CARRetriever`` run (tracing and
``astream_events`` show it): anchors, lookups and rounds, what is active and what superseded."""

_METADATA_SCORE_KEYS = ("score", "relevance_score", "similarity_score")


class _Stage1:
    """One query's Stage 1: the closure with its anchors, and the documents passed through."""

    def __init__(self, closure: AuthorityClosure):
        self.closure = closure
        self.positions: dict[str, int] = {}
        self.unresolved: list[tuple[int, Document, int, float | None]] = []  # (position, doc, stage-1 rank, score)


class CARRetriever(BaseRetriever):
    """Controlling Authority Retrieval over a LangChain retriever and the vector store behind it.

    Returns documents of the active frontier first (each in its anchor's Stage-1 order),
    then the superseded ones as provenance, at most ``k`` in all. Every returned document
    keeps its store metadata and gains car-rag annotations: ``car_status`` (``active`` /
    ``superseded``), ``car_superseded_by`` (the active records that control it),
    ``car_rule`` (the rule that made it superseded), ``car_voided_by`` / ``car_voids``
    (edges with their rule), ``car_role``, ``car_anchor_id``, ``car_rank`` and its Stage-1
    ``car_stage1_rank`` / ``car_stage1_score`` / ``car_stage1_channel``.

    Example:
        .. code-block:: python

            from langchain_chroma import Chroma
            from langchain_car import CARRetriever, CAREmbeddings

            store = Chroma(collection_name="advisories", embedding_function=CAREmbeddings())
            retriever = CARRetriever(
                base_retriever=store.as_retriever(search_kwargs={"k": 10}),
                store=store,
                policy="security-advisory",
                k=5,
            )
            docs = retriever.invoke("Is the lodash prototype pollution still unpatched?")
    """

    base_retriever: RetrieverLike = Field(
        description="Stage 1: any LangChain retriever; its documents become the anchors, in its order."
    )
    store: Any = Field(
        description="Stage 2: where superseders are looked up by metadata filter: a langchain_chroma.Chroma, "
        "a chromadb collection, an InMemoryVectorStore, a langchain_postgres PGVector, a MetadataLookup, or a list of "
        "Documents held in memory."
    )
    policy: PolicyArg = Field(description="car-rag policy (or built-in policy name / policy file) deciding what voids what.")
    k: int = Field(default=5, ge=1, description="Number of documents returned (frontier first, then superseded).")
    k1: int | None = Field(
        default=None, ge=1, description="Keep only the first k1 Stage-1 documents as anchors; None keeps them all."
    )
    scope_lookup_limit: int = Field(
        default=20, ge=0, description="Records one scope id named in the query (e.g. a CVE id) may pull in, newest first."
    )
    doc_id_key: str = Field(default="doc_id", description="Metadata key holding the record id (else Document.id).")
    caller: CallerContext | None = Field(
        default=None,
        exclude=True,
        description="The reader results are for: records they may not read are never returned, and a record voided "
        "only by such a record is reported superseded with car_hidden_superseder. None: unrestricted.",
    )
    lookup_filter: dict[str, Any] | None = Field(
        default=None,
        description="Extra Chroma-style where filter AND-ed into every Stage-2 lookup (e.g. a tenant restriction).",
    )
    stage1_channel: str | None = Field(
        default=None, description="Name reported for the Stage-1 channel; default from the retriever's type."
    )
    max_rounds: int = Field(default=32, ge=1, description="Safety cap on Stage-2 lookup rounds (closure depth).")

    _lookup: MetadataLookup = PrivateAttr()
    _store: WhereStore = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and "vectorstore" in data:
            warnings.warn("CARRetriever(vectorstore=...) is deprecated: use store=", DeprecationWarning, stacklevel=4)
            data = dict(data)
            data.setdefault("store", data.pop("vectorstore"))
        if isinstance(data, dict) and "id_key" in data:
            warnings.warn("CARRetriever(id_key=...) is deprecated: use doc_id_key=", DeprecationWarning, stacklevel=4)
            data = {k: v for k, v in data.items() if k != "id_key"} | {"doc_id_key": data["id_key"]}
        return data

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._lookup = as_lookup(self.store)
        self._store = WhereStore(self._lookup, self.lookup_filter)

    @overload
    @classmethod
    def from_vector_store(
        cls, store: Any, policy: Policy | str | Path, *, retriever: RetrieverLike, **kwargs: Any
    ) -> CARRetriever: ...

    @overload
    @classmethod
    def from_vector_store(
        cls, store: Any, policy: Policy | str | Path, *, retriever: None = None, **kwargs: Any
    ) -> CARVectorStoreRetriever: ...

    @classmethod
    def from_vector_store(
        cls, store: Any, policy: Policy | str | Path, *, retriever: RetrieverLike | None = None, **kwargs: Any
    ) -> CARRetriever | CARVectorStoreRetriever:
        """car-rag over a vector store: by default the core's own Stage 1 (the store's dense search
        and BM25 over its documents, calibrated fusion, scope linking and the scope posterior;
        :class:`~langchain_car.store_retriever.CARVectorStoreRetriever`, ``kwargs`` go to it; the
        core retriever's Stage-1 options as ``options={...}``).

        Wrapping a retriever of your own stays available: pass ``retriever`` (e.g.
        ``store.as_retriever(search_kwargs={"k": 10})``); authority is then resolved on ``store``."""
        if retriever is None:
            return CARVectorStoreRetriever(store=store, policy=load_policy(policy), **kwargs)
        return cls(base_retriever=retriever, store=store, policy=load_policy(policy), **kwargs)

    @property
    def lookup(self) -> MetadataLookup:
        """The Stage-2 metadata lookup built from ``store``."""
        return self._lookup

    # ------------------------------------------------------------------ Stage 1
    def _channel(self) -> str:
        if self.stage1_channel:
            return self.stage1_channel
        name = type(self.base_retriever).__name__
        return {"VectorStoreRetriever": "dense", "BM25Retriever": "bm25", "EnsembleRetriever": "ensemble"}.get(
            name, name.removesuffix("Retriever").lower() or name.lower()
        )

    def _stage1(self, query: str, callbacks: Any) -> list[tuple[Document, float | None]]:
        """The wrapped retriever, invoked as a child run; scores from its documents' metadata, if any."""
        docs = self.base_retriever.invoke(query, config={"callbacks": callbacks})
        return [(d, _metadata_score(d)) for d in docs]

    async def _astage1(self, query: str, callbacks: Any) -> list[tuple[Document, float | None]]:
        docs = await self.base_retriever.ainvoke(query, config={"callbacks": callbacks})
        return [(d, _metadata_score(d)) for d in docs]

    def _closure(self, query: str, stage1: list[tuple[Document, float | None]]) -> _Stage1:
        """Stage 2's state for one query, its anchors admitted (the first ``k1`` documents).

        A Stage-1 document without a ``doc_type`` (not laid out by car-rag) is passed through
        unresolved, as in the LlamaIndex retriever: marked ``car_status="unresolved"``, it keeps
        its Stage-1 place among the records nothing displaced. One whose car-rag metadata does
        not validate is passed through the same way, with a warning naming the field."""
        layout = self._layout()
        closure = AuthorityClosure(
            self.policy, query, layout=layout, scope_lookup_limit=self.scope_lookup_limit, max_rounds=self.max_rounds
        )
        state = _Stage1(closure)
        channel = self._channel()
        for stage1_rank, (doc, score) in enumerate(stage1, 1):
            meta = doc.metadata or {}
            doc_id = layout.doc_id(meta, None) or doc.id or f"stage1-{stage1_rank}"
            if doc_id in state.positions:
                continue
            if self.k1 is not None and len(state.positions) >= self.k1:
                break
            state.positions[doc_id] = position = len(state.positions) + 1
            record = None
            if layout.doc_type(meta) is not None:
                try:
                    record = layout.record(meta, doc.page_content, self.policy, default_id=doc.id)
                except LayoutError as exc:
                    warnings.warn(f"car-rag: {exc}; the document is passed through unresolved", stacklevel=2)
            if record is None or not closure.add_anchor(record, Anchor(record.doc_id, position, score, channel), doc):
                state.unresolved.append((position, doc, stage1_rank, score))
        return state

    def _layout(self) -> RecordLayout:
        return RecordLayout(doc_id_key=self.doc_id_key, json_lists=False)

    def _documents(self, result: RetrievalResult, state: _Stage1, k: int) -> list[Document]:
        """The result as documents, at most ``k``: unresolved ones keep their Stage-1 place among
        the records nothing displaced."""
        closure, channel = state.closure, self._channel()
        unresolved = unresolved_annotations(result.query, result.policy)
        anchor_rank = {h.doc_id: h.rank for h in result.anchors}
        pending = list(state.unresolved)
        out: list[Document] = []

        def passed(entry: tuple[int, Document, int, float | None]) -> Document:
            _, doc, rank, score = entry
            meta = {
                **(doc.metadata or {}),
                **unresolved,
                CAR_STAGE1_RANK: rank,
                CAR_STAGE1_SCORE: score,
                CAR_STAGE1_CHANNEL: channel,
            }
            return Document(id=doc.id, page_content=doc.page_content, metadata=meta)

        for item in result.ranked:
            group = item.stage1.rank if item.stage1 is not None else anchor_rank.get(item.anchor_id or "", 0)
            while pending and (item.displaced or group > pending[0][0]):
                out.append(passed(pending.pop(0)))
            metadata = {**(closure.sources[item.doc_id].metadata or {}), **annotations_for(item, result)}
            out.append(Document(id=item.doc_id, page_content=item.record.text, metadata=metadata))
        out += [passed(entry) for entry in pending]
        return out[:k]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self._k(k)
        state = self._closure(query, self._stage1(query, run_manager.get_child()))
        result = resolve_closure(state.closure, self._store, self.caller)
        run_manager.get_child().on_custom_event(RESOLUTION_EVENT, _event(result, state), run_id=run_manager.run_id)
        return self._documents(result, state, k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self._k(k)
        state = self._closure(query, await self._astage1(query, run_manager.get_child()))
        result = await aresolve_closure(state.closure, self._store, self.caller)
        await run_manager.get_child().on_custom_event(RESOLUTION_EVENT, _event(result, state), run_id=run_manager.run_id)
        return self._documents(result, state, k)

    def _k(self, k: int | None) -> int:
        return self.k if k is None else checked_k(k)

    def retrieve(self, query: str) -> RetrievalResult:
        """The whole car-rag :class:`~car_rag.RetrievalResult` for ``query`` (every record of
        the closure, not capped at ``k``; no callbacks), for diagnostics and evaluation.
        ``invoke`` returns its first ``k`` records as documents."""
        return resolve_closure(self._closure(query, self._stage1(query, None)).closure, self._store, self.caller)

    def evidence_formatter(self, **options: Any) -> Runnable[list[Document], str]:
        """A runnable turning this retriever's documents into evidence (plain documents by
        default), with its policy (for rule descriptions); ``options`` go to
        :func:`langchain_car.evidence_formatter`."""
        from langchain_car.evidence import evidence_formatter

        return evidence_formatter(policy=self.policy, doc_id_key=self.doc_id_key, **options)


def _event(result: RetrievalResult, state: _Stage1) -> dict[str, Any]:
    """What the resolution did, for tracing (the ``car_resolution`` custom event)."""
    return {
        "query": result.query,
        "policy": result.policy.name if result.policy is not None else None,
        "anchors": [h.doc_id for h in result.anchors],
        "unresolved": [doc.id for _, doc, _, _ in state.unresolved],
        "lookups": state.closure.lookups,
        "rounds": state.closure.rounds,
        "active": [r.doc_id for r in result.ranked if r.status == "active"],
        "superseded": {r.doc_id: list(r.superseded_by) for r in result.ranked if r.status == "superseded"},
        "hidden_superseder": [r.doc_id for r in result.ranked if r.hidden_superseder],
    }


def _metadata_score(doc: Document) -> float | None:
    for key in _METADATA_SCORE_KEYS:
        value = (doc.metadata or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None
