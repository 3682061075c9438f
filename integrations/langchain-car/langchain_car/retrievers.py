"""``CARRetriever``: controlling-authority retrieval over any LangChain retriever.

Stage 1 is the retriever you already run (a vector store retriever, ``BM25Retriever``, an
``EnsembleRetriever``, …): its documents are the anchors, in its order. Stage 2 asks the
vector store, by metadata filter only, for every record that can void an anchor under the
policy (same scope on each rule's ``within`` keys, or naming it in ``supersedes``), and
again from each superseder found, up to the authority closure. Stage 3 is car-rag's own:
the records are loaded into a per-query :class:`car_rag.AuthorityGraph` and ranked by
:func:`car_rag.resolve_authority` (RSSG, active frontier first in
anchor order, superseded records after as provenance). Nothing about the rules is
re-implemented here.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from car_rag import AuthorityGraph, Policy, Record, RetrievalResult, load_policy, resolve_authority
from car_rag.channels import FusedHit
from car_rag.channels.fusion import RRF_K
from car_rag.graph import SupersessionCycleError
from car_rag.policy import WILDCARD
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStoreRetriever
from pydantic import Field, PrivateAttr, field_validator

from langchain_car.documents import document_to_record
from langchain_car.lookup import MetadataLookup, as_lookup

__all__ = ["CARRetriever"]

_SCORED_SEARCH_TYPES = ("similarity", "similarity_score_threshold")
_METADATA_SCORE_KEYS = ("score", "relevance_score", "similarity_score")
_OR_CHUNK = 64


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
                vectorstore=store,
                policy="security-advisory",
                k=5,
            )
            docs = retriever.invoke("Is the lodash prototype pollution still unpatched?")
    """

    base_retriever: RetrieverLike = Field(
        description="Stage 1: any LangChain retriever; its documents become the anchors, in its order."
    )
    vectorstore: Any = Field(
        description="Stage 2: where superseders are looked up by metadata filter: a langchain_chroma.Chroma, "
        "a chromadb collection, a MetadataLookup, or a list of Documents held in memory."
    )
    policy: Policy = Field(description="car-rag policy (or built-in policy name / policy file) deciding what voids what.")
    k: int = Field(default=5, ge=1, description="Number of documents returned (frontier first, then superseded).")
    k1: int | None = Field(
        default=None, ge=1, description="Keep only the first k1 Stage-1 documents as anchors; None keeps them all."
    )
    scope_lookup_limit: int = Field(
        default=20, ge=0, description="Records one scope id named in the query (e.g. a CVE id) may pull in, newest first."
    )
    id_key: str = Field(default="doc_id", description="Metadata key holding the record id (else Document.id).")
    lookup_filter: dict[str, Any] | None = Field(
        default=None,
        description="Extra Chroma-style where filter AND-ed into every Stage-2 lookup (e.g. a tenant restriction).",
    )
    stage1_channel: str | None = Field(
        default=None, description="Name reported for the Stage-1 channel; default from the retriever's type."
    )
    max_rounds: int = Field(default=32, ge=1, description="Safety cap on Stage-2 lookup rounds (closure depth).")

    _lookup: MetadataLookup = PrivateAttr()

    @field_validator("policy", mode="before")
    @classmethod
    def _load_policy(cls, value: Any) -> Any:
        return load_policy(value) if isinstance(value, (str, Path)) else value

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._lookup = as_lookup(self.vectorstore)

    @property
    def lookup(self) -> MetadataLookup:
        """The Stage-2 metadata lookup built from ``vectorstore``."""
        return self._lookup

    # ------------------------------------------------------------------ Stage 1
    def _channel(self) -> str:
        if self.stage1_channel:
            return self.stage1_channel
        name = type(self.base_retriever).__name__
        return {"VectorStoreRetriever": "dense", "BM25Retriever": "bm25", "EnsembleRetriever": "ensemble"}.get(
            name, name.removesuffix("Retriever").lower() or name.lower()
        )

    def _scored_vectorstore(self) -> bool:
        base = self.base_retriever
        return isinstance(base, VectorStoreRetriever) and base.search_type in _SCORED_SEARCH_TYPES

    def _bm25_scores(self, query: str) -> list[tuple[Document, float | None]] | None:
        """``BM25Retriever`` (langchain-community) with its scores: the same documents in the same
        order as its ``get_top_n``, read from one ``get_scores`` call. None for other retrievers."""
        base = self.base_retriever
        vectorizer = getattr(base, "vectorizer", None)
        if type(base).__name__ != "BM25Retriever" or not callable(getattr(vectorizer, "get_scores", None)):
            return None
        scores = np.asarray(vectorizer.get_scores(base.preprocess_func(query)))  # type: ignore[attr-defined]
        top = np.argsort(scores)[::-1][: base.k]  # type: ignore[attr-defined]  # as rank_bm25's get_top_n
        return [(base.docs[i], float(scores[i])) for i in top]  # type: ignore[attr-defined]

    def _stage1(self, query: str, callbacks: Any) -> list[tuple[Document, float | None]]:
        if self._scored_vectorstore():
            base: VectorStoreRetriever = self.base_retriever  # type: ignore[assignment]
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Relevance scores must be between")
                pairs = base.vectorstore.similarity_search_with_relevance_scores(query, **base.search_kwargs)
            return [(doc, float(score)) for doc, score in pairs]
        scored = self._bm25_scores(query)
        if scored is not None:
            return scored
        docs = self.base_retriever.invoke(query, config={"callbacks": callbacks})
        return [(d, _metadata_score(d)) for d in docs]

    async def _astage1(self, query: str, callbacks: Any) -> list[tuple[Document, float | None]]:
        if self._scored_vectorstore():
            base: VectorStoreRetriever = self.base_retriever  # type: ignore[assignment]
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Relevance scores must be between")
                pairs = await base.vectorstore.asimilarity_search_with_relevance_scores(query, **base.search_kwargs)
            return [(doc, float(score)) for doc, score in pairs]
        if type(self.base_retriever).__name__ == "BM25Retriever":
            scored = await run_in_executor(None, self._bm25_scores, query)
            if scored is not None:
                return scored
        docs = await self.base_retriever.ainvoke(query, config={"callbacks": callbacks})
        return [(d, _metadata_score(d)) for d in docs]

    def _anchors(self, stage1: list[tuple[Document, float | None]]) -> tuple[list[Record], list[FusedHit], dict[str, Document]]:
        records: list[Record] = []
        hits: list[FusedHit] = []
        docs: dict[str, Document] = {}
        channel = self._channel()
        for doc, score in stage1:
            record = document_to_record(doc, self.policy, id_key=self.id_key)
            if record.doc_id in docs:
                continue
            if self.k1 is not None and len(records) >= self.k1:
                break
            rank = len(records) + 1
            records.append(record)
            docs[record.doc_id] = doc
            hits.append(
                FusedHit(
                    record.doc_id,
                    1.0 / (RRF_K + rank),
                    rank,
                    channel_scores={channel: score} if score is not None else {},
                    channel_ranks={channel: rank},
                )
            )
        return records, hits, docs

    # ------------------------------------------------------------------ all stages
    def _run(self, query: str, callbacks: Any) -> tuple[_Closure, list[FusedHit]]:
        records, hits, docs = self._anchors(self._stage1(query, callbacks))
        closure = _Closure(self, query, records, docs)
        for _ in range(self.max_rounds):
            filters = closure.next_filters()
            if not filters:
                break
            closure.feed([d for where in filters for d in self._lookup.get(where)])
        else:
            closure.warn_unfinished()
        return closure, hits

    async def _arun(self, query: str, callbacks: Any) -> tuple[_Closure, list[FusedHit]]:
        records, hits, docs = self._anchors(await self._astage1(query, callbacks))
        closure = _Closure(self, query, records, docs)
        for _ in range(self.max_rounds):
            filters = closure.next_filters()
            if not filters:
                break
            found = await asyncio.gather(*(self._lookup.aget(where) for where in filters))
            closure.feed([d for batch in found for d in batch])
        else:
            closure.warn_unfinished()
        return closure, hits

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self._k(k)
        closure, hits = self._run(query, run_manager.get_child())
        return closure.documents(query, hits, k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self._k(k)
        closure, hits = await self._arun(query, run_manager.get_child())
        return closure.documents(query, hits, k)

    def _k(self, k: int | None) -> int:
        if k is None:
            return self.k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        return k

    def retrieve(self, query: str) -> RetrievalResult:
        """The whole car-rag :class:`~car_rag.RetrievalResult` for ``query`` (every record of
        the closure, not capped at ``k``; no callbacks), for diagnostics and evaluation.
        ``invoke`` returns its first ``k`` records as documents."""
        closure, hits = self._run(query, None)
        return closure.result(query, hits)

    def evidence_formatter(self, **options: Any) -> Runnable[list[Document], str]:
        """A runnable turning this retriever's documents into XML evidence, with its policy
        (for rule descriptions); ``options`` go to :func:`langchain_car.evidence_formatter`."""
        from langchain_car.evidence import evidence_formatter

        return evidence_formatter(policy=self.policy, id_key=self.id_key, **options)


def _metadata_score(doc: Document) -> float | None:
    for key in _METADATA_SCORE_KEYS:
        value = (doc.metadata or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


class _Closure:
    """Stage 2 for one query, without I/O: says which filters to look up next, takes the
    documents found, and stops at the authority closure of the anchors (and of the records
    in the scope of ids the query names). Shared by the sync and async paths."""

    def __init__(self, owner: CARRetriever, query: str, anchors: list[Record], docs: dict[str, Document]):
        self.owner = owner
        self.policy = owner.policy
        self.graph = AuthorityGraph(self.policy)
        self.docs: dict[str, Document] = {}
        self.roots: list[str] = []
        self.expanded: set[str] = set()
        self.asked: set[str] = set()
        self.rounds = 0
        for record in anchors:
            if self._add(record, docs[record.doc_id]):
                self.roots.append(record.doc_id)
        self.scope_ids = self.policy.scope_ids_in(query)
        self._scope_pending = bool(self.scope_ids) and owner.scope_lookup_limit > 0

    def _add(self, record: Record, doc: Document) -> bool:
        if record.doc_id in self.graph:
            return True
        try:
            self.graph.add(record)
        except SupersessionCycleError as exc:
            warnings.warn(f"car-rag: skipping {record.doc_id!r}: {exc}", stacklevel=4)
            return False
        self.docs[record.doc_id] = doc
        return True

    # ------------------------------------------------------------------ filters
    def _voider_clauses(self, record: Record) -> list[dict[str, Any]]:
        """Filters matching every record that could void ``record``: per rule, same values on
        its ``within`` keys and a trigger type; and any record naming it in ``supersedes``."""
        triggers: dict[tuple[str, ...], set[str]] = {}
        for rule in self.policy.rules:
            if rule.target not in (WILDCARD, record.doc_type):
                continue
            if any(record.scope.get(key) is None for key in rule.within):
                continue  # the rule needs both records to carry every within key
            triggers.setdefault(tuple(rule.within), set()).add(rule.trigger)
        clauses: list[dict[str, Any]] = [{"supersedes": {"$contains": record.doc_id}}]
        for within, types in triggers.items():
            parts: list[dict[str, Any]] = [{key: record.scope[key]} for key in within]
            if WILDCARD not in types:
                parts.append({"doc_type": sorted(types)[0]} if len(types) == 1 else {"doc_type": {"$in": sorted(types)}})
            clauses.append(_all_of(parts) if parts else {"doc_type": {"$ne": ""}})
        return clauses

    def _filters(self, clauses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # A clause already asked in an earlier round (records of one scope share them) is not asked again.
        fresh = {repr(c): c for c in clauses if repr(c) not in self.asked}
        self.asked.update(fresh)
        unique = list(fresh.values())
        out = []
        for start in range(0, len(unique), _OR_CHUNK):
            part = unique[start : start + _OR_CHUNK]
            where = part[0] if len(part) == 1 else {"$or": part}
            if self.owner.lookup_filter:
                where = _all_of([self.owner.lookup_filter, where])
            out.append(where)
        return out

    def next_filters(self) -> list[dict[str, Any]]:
        """Filters for the next lookup round; empty when the closure is complete."""
        clauses: list[dict[str, Any]] = []
        if self._scope_pending:
            clauses.extend(_all_of([{k: v} for k, v in scope.items()]) for scope in self._scope_lookups())
        pending = [d for d in self.graph.closure(self.roots) if d not in self.expanded and d in self.graph]
        for doc_id in sorted(pending):
            self.expanded.add(doc_id)
            clauses.extend(self._voider_clauses(self.graph.records[doc_id]))
        filters = self._filters(clauses)
        self.rounds += bool(filters)
        return filters

    def feed(self, found: list[Document]) -> None:
        """Add the documents one lookup round returned."""
        for doc in found:
            try:
                record = document_to_record(doc, self.policy, id_key=self.owner.id_key)
            except ValueError as exc:
                warnings.warn(f"car-rag: Stage-2 lookup returned an unusable document: {exc}", stacklevel=3)
                continue
            self._add(record, doc)
        if self._scope_pending:
            # The records the core retriever admits for the scope ids named in the query.
            self._scope_pending = False
            for scope in self._scope_lookups():
                for record in self.graph.lookup(scope)[-self.owner.scope_lookup_limit :]:
                    if record.doc_id not in self.roots:
                        self.roots.append(record.doc_id)

    def _scope_lookups(self) -> list[dict[str, str]]:
        """The entity-index lookups ``car_rag.resolve_authority`` makes for the
        scope ids named in the query: keys named together narrow one lookup."""
        keys = list(self.scope_ids)
        if not keys:
            return []
        return [dict(zip(keys, values)) for values in itertools.product(*(self.scope_ids[k] for k in keys))]

    def warn_unfinished(self) -> None:
        if self.next_filters():
            warnings.warn(
                f"car-rag: Stage 2 stopped after max_rounds={self.owner.max_rounds} lookup rounds "
                "before reaching the authority closure",
                stacklevel=3,
            )

    # ------------------------------------------------------------------ Stage 3
    def result(self, query: str, hits: list[FusedHit]) -> RetrievalResult:
        anchors = [h for h in hits if h.doc_id in self.graph]
        return resolve_authority(self.graph, self.policy, query, anchors, scope_lookup_limit=self.owner.scope_lookup_limit)

    def documents(self, query: str, hits: list[FusedHit], k: int) -> list[Document]:
        result = self.result(query, hits)
        channel = self.owner._channel()
        out = []
        for item in result.top(k):
            source = self.docs[item.doc_id]
            hit = item.stage1
            metadata = dict(source.metadata or {})
            metadata.update(
                {
                    "car_status": item.status,
                    "car_rank": item.rank,
                    "car_role": item.role,
                    "car_anchor_id": item.anchor_id,
                    "car_superseded_by": list(item.superseded_by),
                    "car_rule": _status_rule(item, result),
                    "car_voided_by": [_link(result, e.superseder, e.rule) for e in item.voided_by],
                    "car_voids": [_link(result, e.target, e.rule) for e in item.voids],
                    "car_hidden_superseder": item.hidden_superseder,
                    "car_stage1_rank": hit.rank if hit else None,
                    "car_stage1_score": next(iter(hit.channel_scores.values()), None) if hit else None,
                    "car_stage1_channel": channel if hit else None,
                    "car_policy": self.policy.name,
                    "car_query": query,
                }
            )
            out.append(Document(id=item.doc_id, page_content=item.record.text, metadata=metadata))
        return out


def _all_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return parts[0] if len(parts) == 1 else {"$and": parts}


def _status_rule(item: Any, result: RetrievalResult) -> str | None:
    """The rule of the edge that made ``item`` superseded: a controlling (active) voider's first."""
    if item.status != "superseded":
        return None
    for edge in item.voided_by:
        other = result.get(edge.superseder)
        if other is not None and other.status == "active":
            return edge.rule
    return item.voided_by[0].rule if item.voided_by else None


def _link(result: RetrievalResult, doc_id: str, rule: str) -> dict[str, Any]:
    """One supersession edge as metadata: the record at the other end, enough to cite it."""
    other = result.get(doc_id)
    return {
        "doc_id": doc_id,
        "rule": rule,
        "doc_type": other.record.doc_type if other else None,
        "version": other.record.version if other else None,
        "scope": dict(other.record.scope) if other else {},
        "status": other.status if other else None,
    }

