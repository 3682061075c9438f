"""``CARVectorStoreRetriever``: car-rag's own Stage 1 over a LangChain vector store, then Stages 2 and 3.

The store's dense search (its embeddings) and BM25 over its documents' texts are fused by the
core's calibrated fusion; scope linking and the scope posterior pick the anchors; the core
resolves authority over the records the documents carry (:class:`car_rag.adapters.FrameworkCorpus`).
What stays here is document glue: reading the store's documents once, keeping them in step
with its inserts and deletes, and writing the result back onto the documents.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from car_rag import CallerContext, ControllingAuthorityRetriever, RetrievalResult
from car_rag.adapters import FrameworkCorpus, RecordLayout, StoreItem, group_records
from car_rag.annotations import annotations_for
from car_rag.eligibility import RecordFilter, instant
from car_rag.policy import PolicyArg
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field, PrivateAttr

from langchain_car.filters import record_filter
from langchain_car.lookup import is_pgvectorstore

__all__ = ["CARVectorStoreRetriever", "VectorStoreDenseSearch"]

_EXTRACTION_ROUTE = "Give the documents car-rag's metadata with langchain_car.CARAuthorityTransformer before adding them"


def _is_chroma(store: Any) -> bool:
    return type(store).__name__ == "Chroma"


class VectorStoreDenseSearch:
    """A LangChain vector store's own dense search as car-rag's dense channel, scored by cosine
    similarity (Chroma, PGVector and PGVectorStore report cosine distance); it hands its vectors out where it can
    (``InMemoryVectorStore``, Chroma, ``PGVectorStore``) for exact search, as car-rag's own store does."""

    def __init__(self, store: Any):
        embeddings = getattr(store, "embeddings", None)
        if embeddings is None:
            raise TypeError(f"{type(store).__name__} has no embeddings to embed a query with")
        self.store, self.embeddings = store, embeddings

    def embed_query(self, query: str) -> Sequence[float]:
        return self.embeddings.embed_query(query)  # type: ignore[no-any-return]

    def search(self, vector: Sequence[float], k: int) -> list[tuple[str, float]]:
        store, vector = self.store, list(map(float, vector))
        if isinstance(store, InMemoryVectorStore):
            return [(d.id or "", s) for d, s in store.similarity_search_with_score_by_vector(vector, k)]
        if _is_chroma(store):
            found = store.similarity_search_by_vector_with_relevance_scores(vector, k)
        elif hasattr(store, "similarity_search_with_score_by_vector"):
            found = store.similarity_search_with_score_by_vector(vector, k)
        else:
            raise TypeError(f"{type(store).__name__} cannot search by vector with scores")
        return [(d.id or "", 1.0 - float(distance)) for d, distance in found]

    def vectors(self, item_ids: Sequence[str]) -> dict[str, Sequence[float]] | None:
        store = self.store
        if isinstance(store, InMemoryVectorStore):
            return {i: store.store[i]["vector"] for i in item_ids if i in store.store}
        if _is_chroma(store):
            got = store.get(ids=list(item_ids), include=["embeddings"])
            return dict(zip(got["ids"], got["embeddings"]))
        if is_pgvectorstore(store):  # pgvector's text form, '[0.1,0.2,…]', is JSON
            got = store.get(ids=list(item_ids), include=["embeddings"])
            return {i: json.loads(v) if isinstance(v, str) else v for i, v in zip(got["ids"], got["embeddings"])}
        return None


def store_documents(store: Any) -> list[Document]:
    """Every document a vector store holds, in its order, where it can list them."""
    if isinstance(store, InMemoryVectorStore):
        return [Document(id=i, page_content=e["text"], metadata=dict(e["metadata"])) for i, e in store.store.items()]
    if _is_chroma(store) or is_pgvectorstore(store):
        got = store.get(include=["documents", "metadatas"])
        return [
            Document(id=i, page_content=t or "", metadata=dict(m or {}))
            for i, t, m in zip(got["ids"], got["documents"], got["metadatas"])
        ]
    raise TypeError(f"{type(store).__name__} cannot list its documents: pass them as documents=[...]")


class CARVectorStoreRetriever(BaseRetriever):
    """Controlling-authority retrieval over a LangChain vector store with car-rag's own Stage 1.

    Stage 1 is the core's: the store's dense search and BM25 over its documents, calibrated
    fusion, scope linking and the scope posterior; then the core's Stages 2 and 3 over the
    records the documents carry. Returns the documents of the first ``k`` records (active
    frontier first, superseded provenance after), each with the ``car_*`` metadata, including
    ``car_scope_probability`` and, when the question names several scopes it does not tell
    apart, ``car_ambiguity``.

    The documents are read once (``InMemoryVectorStore``, Chroma, ``PGVectorStore``; other stores: ``documents``);
    documents added to or deleted from an ``InMemoryVectorStore`` are followed on the next query.
    For another store add and delete through :meth:`add_documents` / :meth:`delete`, or :meth:`refresh`.

    Example:
        .. code-block:: python

            from langchain_car import CARRetriever

            retriever = CARRetriever.from_vector_store(store, "security-advisory")
            docs = retriever.invoke("Is the lodash prototype pollution still unpatched?")
    """

    store: Any = Field(description="The vector store whose documents carry car-rag's metadata.")
    policy: PolicyArg = Field(description="car-rag policy (or built-in policy name / policy file) deciding what voids what.")
    k: int = Field(default=5, ge=1, description="Records returned (frontier first, then superseded).")
    doc_id_key: str = Field(default="doc_id", description="Metadata key holding the record id (else Document.id).")
    caller: CallerContext | None = Field(
        default=None, exclude=True, description="The reader results are for; every stage keeps to what they may read."
    )
    as_of: date | datetime | str | None = Field(
        default=None,
        description="Answer as of this date: records dated after it are not candidates in any channel and void nothing.",
    )
    filters: dict[str, Any] | RecordFilter | None = Field(
        default=None,
        description="What every query may return: a filter dict ($and of $eq, $in; $gte, $lte on published_at) or a "
        "car_rag RecordFilter, compiled into every channel and Stage 2 (never a top k filtered afterwards).",
    )
    min_confidence: float = Field(default=DEFAULT_MIN_CONFIDENCE, ge=0.0, le=1.0, description="τ: only edges this sure void.")
    documents: list[Document] | None = Field(
        default=None, description="The store's documents, for a store that cannot list them."
    )
    bm25_backend: str | None = Field(default=None, description="BM25 over the documents (default: the core store's).")
    options: dict[str, Any] = Field(
        default_factory=dict, description="The core retriever's Stage-1 options (k1, depth, fusion, …)."
    )

    _corpus: FrameworkCorpus = PrivateAttr()
    _core: ControllingAuthorityRetriever = PrivateAttr()
    _chunks: dict[str, list[Document]] = PrivateAttr(default_factory=dict)
    _seen: set[str] = PrivateAttr(default_factory=set)
    _as_of: datetime | None = PrivateAttr(default=None)
    _filter: RecordFilter | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        # Translated once, here: a filter that cannot be compiled is refused before any query.
        self._as_of = None if self.as_of is None else instant(self.as_of)
        self._filter = (
            self.filters
            if self.filters is None or isinstance(self.filters, RecordFilter)
            else record_filter(self.filters, self.policy, self._layout())
        )
        self.refresh()  # after validation: a store car-rag cannot read raises its own error, not pydantic's

    @property
    def corpus(self) -> FrameworkCorpus:
        """The records and indexes car-rag's Stage 1 reads."""
        return self._corpus

    @property
    def core(self) -> ControllingAuthorityRetriever:
        """The core's :class:`~car_rag.ControllingAuthorityRetriever` over :attr:`corpus`."""
        return self._core

    def _layout(self) -> RecordLayout:
        return RecordLayout(doc_id_key=self.doc_id_key, json_lists=False)

    def _follows(self) -> bool:
        return self.documents is None and isinstance(self.store, InMemoryVectorStore)

    def refresh(self) -> None:
        """Read the store's documents again and rebuild car-rag's Stage 1 over them."""
        self._chunks = {}
        documents = list(self.documents) if self.documents is not None else store_documents(self.store)
        records, items = self._records(documents)
        self._corpus = FrameworkCorpus(
            self.policy, records, VectorStoreDenseSearch(self.store), items=items, bm25_backend=self.bm25_backend
        )
        self._core = self._corpus.retriever(min_confidence=self.min_confidence, **self.options)
        self._seen = set(self.store.store) if self._follows() else set()

    def _records(self, documents: Sequence[Document]) -> tuple[list[Any], dict[str, str]]:
        """The records ``documents`` belong to (with the chunks already held), and each chunk's record."""
        layout = self._layout()
        changed: dict[str, None] = {}
        for doc in documents:
            doc_id = _item(doc).doc_id(layout)
            held = self._chunks.setdefault(doc_id, [])
            held[:] = [d for d in held if d.id != doc.id or doc.id is None] + [doc]
            changed[doc_id] = None
        return group_records(
            [_item(d) for doc_id in changed for d in self._chunks[doc_id]], self.policy, layout, extraction=_EXTRACTION_ROUTE
        )

    def _forget(self, ids: Sequence[str]) -> None:
        """Drop deleted documents; a record that lost only some of its chunks is taken again with the rest."""
        wanted = set(ids)
        touched = [d for d, docs in self._chunks.items() if any(c.id in wanted for c in docs)]
        for doc_id in touched:
            self._chunks[doc_id] = [c for c in self._chunks[doc_id] if c.id not in wanted]
        self._corpus.remove(touched)
        rest = [c for d in touched for c in self._chunks.pop(d)]
        self._corpus.add(*self._records(rest))

    def _sync(self) -> None:
        """Follow documents added to or deleted from an ``InMemoryVectorStore``."""
        if not self._follows():
            return
        now = set(self.store.store)
        if now == self._seen:
            return
        removed = self._seen - now
        if removed:
            self._forget(sorted(removed))
        added = [i for i in self.store.store if i not in self._seen]
        if added:
            entries = [self.store.store[i] for i in added]
            docs = [Document(id=e["id"], page_content=e["text"], metadata=dict(e["metadata"])) for e in entries]
            self._corpus.add(*self._records(docs))
        self._seen = now

    def add_documents(self, documents: Sequence[Document], **kwargs: Any) -> list[str]:
        """Add to the store and to car-rag's Stage 1 together; returns the store's ids."""
        ids: list[str] = self.store.add_documents(list(documents), **kwargs)
        if self._follows():
            self._sync()
            return ids
        added = [Document(id=i, page_content=d.page_content, metadata=dict(d.metadata)) for i, d in zip(ids, documents)]
        if self.documents is not None:
            self.documents = [*self.documents, *added]
        self._corpus.add(*self._records(added))
        return ids

    def delete(self, ids: Sequence[str], **kwargs: Any) -> None:
        """Delete from the store and from car-rag's Stage 1 together (by the store's ids)."""
        self.store.delete(list(ids), **kwargs)
        if self.documents is not None:
            self.documents = [d for d in self.documents if d.id not in set(ids)]
        self._forget(ids)
        if self._follows():
            self._seen = set(self.store.store)

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, query: str) -> RetrievalResult:
        """The core's whole :class:`~car_rag.RetrievalResult` for ``query`` (every record, not capped at ``k``)."""
        self._sync()
        return self._core.retrieve(query, self.caller, as_of=self._as_of, filters=self._filter)

    def documents_for(self, result: RetrievalResult) -> list[Document]:
        """The first ``k`` records of ``result`` as annotated documents (all of a record's chunks)."""
        out = []
        for item in result.ranked[: self.k]:
            car = annotations_for(item, result)
            for doc in self._chunks.get(item.doc_id, []):
                out.append(Document(id=doc.id, page_content=doc.page_content, metadata={**doc.metadata, **car}))
        return out

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self.documents_for(self.retrieve(query))


def _item(doc: Document) -> StoreItem:
    return StoreItem(doc.id or "", doc.metadata or {}, doc.page_content)
