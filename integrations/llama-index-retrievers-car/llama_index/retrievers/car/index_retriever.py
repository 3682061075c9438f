"""CARIndexRetriever: car-rag's own Stage 1 over a LlamaIndex ``VectorStoreIndex``, then Stages 2 and 3.

The index's dense search (its vector store, its embedding model) and BM25 over its node texts
are fused by the core's calibrated fusion; scope linking and the scope posterior pick the
anchors; the core resolves authority over the records the nodes carry
(:class:`car_rag.adapters.FrameworkCorpus`). What stays here is node glue: reading the index's
nodes once, keeping them in step with its inserts and deletes, and writing the result back
onto the nodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

from car_rag import CallerContext, Policy, Record, RetrievalResult, load_policy
from car_rag.adapters import FrameworkCorpus, MissingAuthorityMetadata, StoreItem, checked_k, group_records
from car_rag.annotations import annotations_for
from car_rag.eligibility import RecordFilter, instant
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery

from llama_index.retrievers.car.filters import record_filter
from llama_index.retrievers.car.layout import LLAMA_INDEX_KEYS, MetadataLayout
from llama_index.retrievers.car.resolver import annotate

__all__ = ["CARIndexRetriever", "IndexDenseSearch", "MissingAuthorityMetadata"]

_EXTRACTION_ROUTE = (
    "Give the nodes car-rag's metadata with llama_index.retrievers.car.CARAuthorityExtractor in the ingestion pipeline"
)


def _item(node: BaseNode) -> StoreItem:
    return StoreItem(node.node_id, node.metadata, node.get_content(), node.ref_doc_id)


def _cosine(store: Any, similarity: float) -> float:
    """The store's similarity as the cosine similarity the core's calibrated fusion is tuned on:
    LlamaIndex's Chroma store reports ``exp(-distance)``; the others report ``1 - distance`` or
    the cosine itself."""
    if type(store).__name__ == "ChromaVectorStore":
        return 1.0 + math.log(similarity) if similarity > 0 else -1.0
    return similarity


class IndexDenseSearch:
    """The index's own dense search as car-rag's dense channel: its embedding model embeds the
    query, its vector store answers, and hands its vectors out where it can (the in-memory
    default and Chroma), for exact search as in car-rag's own store."""

    def __init__(self, index: Any):
        self.index = index
        self.embed_model = index._embed_model  # VectorStoreIndex has no public name for the model it embeds with

    def embed_query(self, query: str) -> Sequence[float]:
        return self.embed_model.get_query_embedding(query)  # type: ignore[no-any-return]

    def search(self, vector: Sequence[float], k: int) -> list[tuple[str, float]]:
        store = self.index.vector_store
        found = store.query(VectorStoreQuery(query_embedding=list(map(float, vector)), similarity_top_k=k))
        return [(node_id, _cosine(store, float(s))) for node_id, s in zip(found.ids or [], found.similarities or [])]

    def vectors(self, item_ids: Sequence[str]) -> dict[str, Sequence[float]] | None:
        store = self.index.vector_store
        if isinstance(store, SimpleVectorStore):
            held = store.data.embedding_dict
            return {i: held[i] for i in item_ids if i in held}
        if type(store).__name__ == "ChromaVectorStore":
            collection = store.client
            space = ((collection.configuration_json or {}).get("hnsw") or {}).get("space", "cosine")
            if space != "cosine":
                return None
            got = collection.get(ids=list(item_ids), include=["embeddings"])
            return dict(zip(got["ids"], got["embeddings"]))
        return None


class CARIndexRetriever(BaseRetriever):
    """Controlling-authority retrieval over a ``VectorStoreIndex`` with car-rag's own Stage 1.

    Stage 1 is the core's: the index's dense search and BM25 over its node texts, calibrated
    fusion, scope linking and the scope posterior; then the core's Stages 2 and 3 over the
    records the nodes carry. Returns the nodes of the first ``k`` records (active frontier
    first, superseded provenance after), each with the ``car_*`` metadata, including
    ``car_scope_probability`` and, when the question names several scopes it does not tell
    apart, ``car_ambiguity``.

    The nodes are read once: from the docstore when the vector store keeps no text (the
    in-memory default; inserts and deletes through the index are then followed on the next
    query), else from the vector store (``get_nodes``) or ``nodes``; after changing such a store,
    insert and delete through :meth:`insert_nodes` / :meth:`delete_ref_doc`, or :meth:`refresh`.

    Args:
        index: a ``VectorStoreIndex`` whose nodes carry car-rag's metadata (``CARAuthorityExtractor``,
            ``records_to_nodes``).
        policy: a car-rag policy, or the name or path of one.
        k: the most records returned (a record's chunks count once).
        layout: where node metadata keeps ``doc_id``, ``doc_type`` and the rest.
        caller: the reader the results are for (every stage keeps to what they may read).
        as_of: answer as of this date (a day, an ISO time, a ``date``): records dated after it are
            not candidates in any channel and void nothing (``docs/point-in-time.md``).
        filters: what every query may return: ``MetadataFilters`` (``==`` / ``in`` on type,
            source, scope keys and metadata; ``>=`` / ``<=`` on ``published_at``, AND-ed) or a
            :class:`car_rag.eligibility.RecordFilter`; compiled into every channel and Stage 2,
            never applied to a top k afterwards. Translated here, once: what cannot be compiled
            is a ValueError naming it. (LlamaIndex has no per-query place for filters.)
        min_confidence: τ, as for :class:`car_rag.ControllingAuthorityRetriever`.
        nodes: the index's nodes, for a vector store that cannot list them.
        bm25_backend: the BM25 over the node texts (the core store's default).
        **options: the core retriever's Stage-1 options (``k1``, ``depth``, ``fusion``, …).
    """

    def __init__(
        self,
        index: Any,
        policy: Policy | str | Path,
        *,
        k: int = 5,
        layout: MetadataLayout | None = None,
        caller: CallerContext | None = None,
        as_of: date | datetime | str | None = None,
        filters: MetadataFilters | RecordFilter | None = None,
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
        nodes: Sequence[BaseNode] | None = None,
        bm25_backend: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **options: Any,
    ) -> None:
        checked_k(k)
        self.index, self.policy, self.k, self.caller = index, load_policy(policy), k, caller
        self.layout = layout or MetadataLayout()
        self.as_of = None if as_of is None else instant(as_of)
        self.filters = (
            filters if filters is None or isinstance(filters, RecordFilter) else record_filter(filters, self.policy, self.layout)
        )
        self._given = list(nodes) if nodes is not None else None
        self.bm25_backend = bm25_backend
        self._options = {"min_confidence": min_confidence, **options}
        self.refresh()
        super().__init__(callback_manager=callback_manager or CallbackManager(), verbose=verbose)

    # ------------------------------------------------------------------ the index's nodes
    def _follows_docstore(self) -> bool:
        return not self.index.vector_store.stores_text or bool(getattr(self.index, "_store_nodes_override", False))

    def _indexed_ids(self) -> set[str]:
        return set(self.index.index_struct.nodes_dict.values())

    def _read_nodes(self) -> list[BaseNode]:
        if self._given is not None:
            return list(self._given)
        if self._follows_docstore():
            ids = self.index.index_struct.nodes_dict.values()
            return list(self.index.docstore.get_nodes(list(ids)))
        try:
            return list(self.index.vector_store.get_nodes(None))
        except Exception as exc:  # a store that lists nothing without ids or filters (e.g. PGVectorStore)
            raise ValueError(
                f"{type(self.index.vector_store).__name__} cannot list its nodes ({exc}): pass them as nodes=..."
            ) from exc

    def refresh(self) -> None:
        """Read the index's nodes again and rebuild car-rag's Stage 1 over them."""
        self.chunks: dict[str, list[BaseNode]] = {}
        self.doc_of: dict[str, str] = {}
        records, items = self._records(self._read_nodes())
        self.corpus = FrameworkCorpus(
            self.policy, records, IndexDenseSearch(self.index), items=items, bm25_backend=self.bm25_backend
        )
        self.core = self.corpus.retriever(**self._options)
        self._seen = self._indexed_ids() if self._given is None and self._follows_docstore() else set()

    def _records(self, nodes: Sequence[BaseNode]) -> tuple[list[Record], dict[str, str]]:
        """The records ``nodes`` belong to (with the chunks already held), and each chunk's record;
        nodes without car-rag's metadata are refused, naming the keys and how to add them."""
        for node in nodes:
            doc_id = _item(node).doc_id(self.layout)
            held = self.chunks.setdefault(doc_id, [])
            held[:] = [n for n in held if n.node_id != node.node_id] + [node]
        changed = dict.fromkeys(_item(n).doc_id(self.layout) for n in nodes)
        records, items = group_records(
            [_item(n) for d in changed for n in self.chunks[d]],
            self.policy,
            self.layout,
            extraction=_EXTRACTION_ROUTE,
            foreign_keys=LLAMA_INDEX_KEYS,
        )
        self.doc_of.update(items)
        return records, items

    def _forget(self, node_ids: Sequence[str]) -> None:
        """Drop deleted nodes; a record that lost only some of its chunks is taken again with the rest."""
        touched: dict[str, None] = {}
        for node_id in node_ids:
            doc_id = self.doc_of.pop(node_id, None)
            if doc_id is not None:
                self.chunks[doc_id] = [n for n in self.chunks[doc_id] if n.node_id != node_id]
                touched[doc_id] = None
        for doc_id in [d for d in touched if not self.chunks[d]]:
            del self.chunks[doc_id]
        self.corpus.remove(touched)  # a record that keeps some chunks is taken again below, with those alone
        self.corpus.add(*self._records([c for d in touched if d in self.chunks for c in self.chunks.pop(d)]))

    def _sync(self) -> None:
        """Follow inserts and deletes made through an index whose nodes live in its docstore."""
        if self._given is not None or not self._follows_docstore():
            return
        now = self._indexed_ids()
        if now == self._seen:
            return
        added, removed = now - self._seen, self._seen - now
        if removed:
            self._forget(sorted(removed))
        if added:
            order = [i for i in self.index.index_struct.nodes_dict.values() if i in added]
            self.corpus.add(*self._records(list(self.index.docstore.get_nodes(order))))
        self._seen = now

    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Insert into the index and into car-rag's Stage 1 together."""
        self.index.insert_nodes(nodes, **insert_kwargs)
        if self._given is not None:
            self._given += list(nodes)
        if self._follows_docstore() and self._given is None:
            self._sync()
        else:
            self.corpus.add(*self._records(nodes))

    def delete_ref_doc(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete a source document's nodes from the index and from car-rag's Stage 1."""
        node_ids = [n for n, d in self.doc_of.items() if d == ref_doc_id] or [
            n.node_id for c in self.chunks.values() for n in c if n.ref_doc_id == ref_doc_id
        ]
        self.index.delete_ref_doc(ref_doc_id, **delete_kwargs)
        if self._given is not None:
            self._given = [n for n in self._given if n.node_id not in node_ids]
        self._forget(node_ids)
        if self._given is None and self._follows_docstore():
            self._seen = self._indexed_ids()

    # ------------------------------------------------------------------ retrieval
    def retrieve_result(self, query: str) -> RetrievalResult:
        """The core's whole :class:`~car_rag.RetrievalResult` for ``query`` (every record, not capped at ``k``)."""
        self._sync()
        return self.core.retrieve(query, self.caller, as_of=self.as_of, filters=self.filters)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.nodes_for(self.retrieve_result(query_bundle.query_str))

    def nodes_for(self, result: RetrievalResult) -> list[NodeWithScore]:
        """The first ``k`` records of ``result`` as annotated nodes (all of a record's chunks);
        a record Stage 1 did not find scores like the hit that brought it in."""
        out: list[NodeWithScore] = []
        for item in result.ranked[: self.k]:
            anchor = result.get(item.anchor_id) if item.anchor_id is not None else None
            hit = item.stage1 or (anchor.stage1 if anchor is not None else None)
            score = hit.score if hit is not None else None
            stage1_rank = item.stage1.rank if item.stage1 is not None else None
            car = annotations_for(item, result)
            for node in self.chunks.get(item.doc_id, []):
                out.append(annotate(NodeWithScore(node=node, score=score), car, score, stage1_rank))
        return out
