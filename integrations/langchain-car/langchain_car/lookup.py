"""Filter-only metadata lookups: how Stage 2 asks the vector store for superseders.

Stage 2 is not a similarity search. It asks the store for the records that share an
anchor's scope (``{"$and": [{"package": "lodash"}, {"cve_id": "CVE-…"}]}``) or that name
it in their ``supersedes`` list, with a Chroma-style ``where`` filter. A
:class:`MetadataLookup` answers such filters with ``Document`` objects:

* :class:`ChromaLookup` wraps anything with Chroma's ``get(where=..., include=...)``:
  ``langchain_chroma.Chroma`` or a ``chromadb`` collection (embedded or server).
* :class:`InMemoryLookup` evaluates them over langchain-core's ``InMemoryVectorStore``.
* :class:`PGVectorLookup` answers them from ``langchain_postgres.PGVector`` (PostgreSQL +
  pgvector, metadata in a JSONB column), written in PGVector's own filter syntax.
* :class:`PGVectorStoreLookup` answers them from ``langchain_postgres.PGVectorStore`` (its
  successor) through its public ``get(where=...)``.
* :class:`DocumentListLookup` evaluates the filters over documents held in memory, for
  stores with no filter-only get (e.g. a BM25-only setup) and for tests.

Any other store: subclass :class:`MetadataLookup` (one method, ``get(where)``) in its filter
language; a store that can do neither is refused with a ``TypeError`` naming its class.

The filters used are a small subset of Chroma's: ``$and``, ``$or``, equality (``$eq``),
``$ne``, ``$in``, ``$nin`` and ``$contains`` on list metadata. :class:`WhereStore` is the
adapter car-rag's Stage 2 (:mod:`car_rag.lookup`) runs against: it writes the core's
:class:`~car_rag.adapters.ScopeQuery` values as such filters.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from car_rag.adapters import AuthorityStore, ScopeQuery, StoredItem
from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import InMemoryVectorStore

__all__ = [
    "ChromaLookup",
    "DocumentListLookup",
    "InMemoryLookup",
    "MetadataLookup",
    "PGVectorLookup",
    "PGVectorStoreLookup",
    "WhereStore",
    "as_lookup",
    "matches_where",
]

_OR_CHUNK = 64


class MetadataLookup(ABC):
    """Answers a Chroma-style ``where`` filter with every matching document."""

    @abstractmethod
    def get(self, where: Mapping[str, Any]) -> list[Document]:
        """Documents whose metadata satisfy ``where`` (no similarity, no limit)."""

    async def aget(self, where: Mapping[str, Any]) -> list[Document]:
        """Async :meth:`get`; by default the sync call runs in an executor thread."""
        return await run_in_executor(None, self.get, where)


class ChromaLookup(MetadataLookup):
    """Lookups through ``get(where=...)`` on a ``langchain_chroma.Chroma`` vector store or a
    ``chromadb`` collection."""

    def __init__(self, store: Any):
        if not _filters_by_where(store):
            raise TypeError(_cannot_filter(store))
        self.store = store

    def get(self, where: Mapping[str, Any]) -> list[Document]:
        got = self.store.get(where=dict(where), include=["documents", "metadatas"])
        return [
            Document(id=doc_id, page_content=text or "", metadata=dict(meta or {}))
            for doc_id, text, meta in zip(got["ids"], got["documents"], got["metadatas"])
        ]

    def __repr__(self) -> str:
        return f"ChromaLookup({type(self.store).__name__})"


class DocumentListLookup(MetadataLookup):
    """Evaluates ``where`` filters over an in-memory list of documents."""

    def __init__(self, documents: Iterable[Document]):
        self.documents = list(documents)

    def get(self, where: Mapping[str, Any]) -> list[Document]:
        return [d for d in self.documents if matches_where(d.metadata or {}, where)]

    def __repr__(self) -> str:
        return f"DocumentListLookup({len(self.documents)} documents)"


class InMemoryLookup(MetadataLookup):
    """Evaluates ``where`` filters over langchain-core's ``InMemoryVectorStore`` (its documents
    as they are now, read through ``get_by_ids``)."""

    def __init__(self, store: InMemoryVectorStore):
        self.store = store

    def get(self, where: Mapping[str, Any]) -> list[Document]:
        return [d for d in self.store.get_by_ids(list(self.store.store)) if matches_where(d.metadata or {}, where)]

    def __repr__(self) -> str:
        return f"InMemoryLookup({len(self.store.store)} documents)"


def _pg_where(
    where: Mapping[str, Any], store: str, contains: Callable[[Any], Any], scalar: Callable[[Any], Any]
) -> dict[str, Any]:
    """A Chroma-style ``where`` in the filter syntax of ``store`` (PGVector or PGVectorStore: the
    two differ in how ``$contains`` and a bare value are written, given as ``contains`` and
    ``scalar``); ``$not_contains``, which neither has, is refused naming the field."""
    out: dict[str, Any] = {}
    for key, condition in where.items():
        if key in ("$and", "$or"):
            out[key] = [_pg_where(c, store, contains, scalar) for c in condition]
        elif isinstance(condition, Mapping) and set(condition) == {"$contains"}:
            out[key] = contains(condition["$contains"])
        elif isinstance(condition, Mapping) and set(condition) & {"$not_contains"}:
            raise ValueError(f"{store} has no $not_contains filter (field {key!r})")
        else:
            out[key] = condition if isinstance(condition, Mapping) else scalar(condition)
    return out


def _eq(value: Any) -> dict[str, Any]:
    return {"$eq": value}


def _json_like(value: Any) -> dict[str, Any]:
    """A list holding ``value``, as a text match on the list's JSON (a superset: ``_`` and ``%`` in it match any character)."""
    return {"$like": "%" + json.dumps(value, ensure_ascii=False) + "%"}


def _as_given(value: Any) -> Any:
    return value


class PGVectorLookup(MetadataLookup):
    """Lookups on ``langchain_postgres.PGVector`` (one collection; metadata in its JSONB
    ``cmetadata`` column), filter only: a ``SELECT`` of the collection's rows matching the
    filter, with no similarity ordering and no limit.

    The ``where`` filter is rewritten in PGVector's own filter syntax and compiled by the
    store itself (the compiler its ``similarity_search(filter=...)`` uses), so a filter means
    here what it means to PGVector: ``$and``, ``$or``, ``$eq``, ``$ne``, ``$in``, ``$nin``.
    ``{"supersedes": {"$contains": id}}`` becomes ``{"supersedes": {"$eq": id}}``: PGVector
    compares with a lax-mode SQL/JSON path (``$.supersedes == $value``), which is true when
    any element of a JSON array equals the value, so explicit edges are found across scopes
    when ``supersedes`` is list metadata (car-rag's LangChain layout writes it so). A
    ``supersedes`` written as a JSON string is not matched: such edges are then found within
    a scope only. PGVector in ``async_mode`` answers :meth:`aget` on its async engine."""

    def __init__(self, store: Any):
        # An async_mode PGVector builds its table classes on its first async call (aget_collection here).
        needed: tuple[str, ...] = ("session_maker", "get_collection", "aget_collection", "_create_filter_clause")
        if not getattr(store, "async_mode", False):
            needed += ("EmbeddingStore",)
        missing = [name for name in needed if not hasattr(store, name)]
        if missing:
            raise TypeError(
                f"{type(store).__name__} is not a langchain_postgres.PGVector this lookup knows (no {', '.join(missing)}); "
                "pass a MetadataLookup of your own"
            )
        self.store = store

    @staticmethod
    def pg_filter(where: Mapping[str, Any]) -> dict[str, Any]:
        """A Chroma-style ``where`` in PGVector's filter syntax."""
        return _pg_where(where, "PGVector", _eq, _eq)

    def _statement(self, collection: Any, where: Mapping[str, Any]) -> Any:
        from sqlalchemy import select

        table = self.store.EmbeddingStore
        clause = self.store._create_filter_clause(self.pg_filter(where))
        return select(table).where(table.collection_id == collection.uuid, clause)

    @staticmethod
    def _documents(rows: Iterable[Any]) -> list[Document]:
        return [Document(id=str(r.id), page_content=r.document or "", metadata=dict(r.cmetadata or {})) for r in rows]

    def get(self, where: Mapping[str, Any]) -> list[Document]:
        if getattr(self.store, "async_mode", False):
            raise RuntimeError("this PGVector is in async_mode: use the async path (ainvoke)")
        with self.store.session_maker() as session:
            collection = self.store.get_collection(session)
            if collection is None:
                raise ValueError(f"PGVector collection {self.store.collection_name!r} not found")
            return self._documents(session.execute(self._statement(collection, where)).scalars().all())

    async def aget(self, where: Mapping[str, Any]) -> list[Document]:
        if not getattr(self.store, "async_mode", False):
            return await super().aget(where)
        async with self.store.session_maker() as session:
            collection = await self.store.aget_collection(session)
            if collection is None:
                raise ValueError(f"PGVector collection {self.store.collection_name!r} not found")
            return self._documents((await session.execute(self._statement(collection, where))).scalars().all())

    def __repr__(self) -> str:
        return f"PGVectorLookup({getattr(self.store, 'collection_name', '?')!r})"


class PGVectorStoreLookup(MetadataLookup):
    """Lookups on ``langchain_postgres.PGVectorStore`` (the successor of ``PGVector``) through its
    public ``get(where=...)``, filter only (no similarity, no limit).

    Metadata kept in the store's JSON column (its default) is filtered there: equality, ``$in``,
    ``$and``, ``$or``. The store's filter language has no array containment, so
    ``{"supersedes": {"$contains": id}}`` is sent as a ``$like`` on the list's JSON text
    (``%"id"%``: a superset, as ``_`` and ``%`` in an id match any character there) and the
    rows are then checked against the filter itself (:func:`matches_where`), so explicit edges
    are found across scopes. Keep ``supersedes`` in the JSON column (not a typed metadata column)."""

    def __init__(self, store: Any):
        if not _filters_by_where(store):
            raise TypeError(_cannot_filter(store))
        self.store = store

    @staticmethod
    def pg_filter(where: Mapping[str, Any]) -> dict[str, Any]:
        """A Chroma-style ``where`` in PGVectorStore's filter syntax (``$contains`` widened to a ``$like``)."""
        return _pg_where(where, "PGVectorStore", _json_like, _as_given)

    @staticmethod
    def _documents(got: Mapping[str, Any], where: Mapping[str, Any]) -> list[Document]:
        docs = (
            Document(id=i, page_content=t or "", metadata=dict(m or {}))
            for i, t, m in zip(got["ids"], got["documents"], got["metadatas"])
        )
        return [d for d in docs if matches_where(d.metadata, where)]

    def get(self, where: Mapping[str, Any]) -> list[Document]:
        got = self.store.get(where=self.pg_filter(where), include=["documents", "metadatas"])
        return self._documents(got, where)

    async def aget(self, where: Mapping[str, Any]) -> list[Document]:
        got = await self.store.aget(where=self.pg_filter(where), include=["documents", "metadatas"])
        return self._documents(got, where)

    def __repr__(self) -> str:
        return f"PGVectorStoreLookup({self.store.get_table_name()!r})"


def is_pgvectorstore(store: Any) -> bool:
    """Whether ``store`` is a ``langchain_postgres.PGVectorStore``."""
    return any(c.__module__.startswith("langchain_postgres") and c.__name__ == "PGVectorStore" for c in type(store).__mro__)


def _is_pgvector(store: Any) -> bool:
    return any(c.__module__.startswith("langchain_postgres") and c.__name__ == "PGVector" for c in type(store).__mro__)


def _filters_by_where(store: Any) -> bool:
    get = getattr(store, "get", None)
    if not callable(get):
        return False
    try:
        return "where" in inspect.signature(get).parameters
    except (TypeError, ValueError):  # a builtin without a signature (dict.get)
        return False


def _cannot_filter(store: Any) -> str:
    return (
        f"{type(store).__name__} cannot be filtered by metadata: Stage 2 needs a filter-only lookup and it has no "
        "get(where=...) (Chroma's) and is no InMemoryVectorStore, langchain_postgres PGVector or PGVectorStore, or list of "
        "Documents; "
        "pass a MetadataLookup "
        "subclass that answers Chroma-style where filters in the store's own filter language"
    )


def as_lookup(store: Any) -> MetadataLookup:
    """A :class:`MetadataLookup` for ``store``: a lookup as is, an ``InMemoryVectorStore``, a
    ``langchain_postgres.PGVector`` or ``PGVectorStore``, a list of documents held in memory, or anything with
    Chroma's ``get(where=...)``; anything else is a ``TypeError`` naming the store's class and
    what it lacks."""
    if isinstance(store, MetadataLookup):
        return store
    if isinstance(store, InMemoryVectorStore):
        return InMemoryLookup(store)
    if _is_pgvector(store):
        return PGVectorLookup(store)
    if is_pgvectorstore(store):
        return PGVectorStoreLookup(store)
    if isinstance(store, Sequence) and not isinstance(store, (str, bytes)) and all(isinstance(d, Document) for d in store):
        return DocumentListLookup(store)
    if not _filters_by_where(store):
        raise TypeError(_cannot_filter(store))
    return ChromaLookup(store)


def _compare(value: Any, condition: Any) -> bool:
    if not isinstance(condition, Mapping):
        return bool(value == condition)
    if len(condition) != 1:
        raise ValueError(f"a field condition takes exactly one operator, got {dict(condition)}")
    ((op, operand),) = condition.items()
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op == "$in":
        return value in operand
    if op == "$nin":
        return value not in operand
    if op == "$contains":
        return isinstance(value, (list, tuple)) and operand in value
    if op == "$not_contains":
        return not (isinstance(value, (list, tuple)) and operand in value)
    raise ValueError(f"unsupported filter operator {op!r}")


def matches_where(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` satisfies a Chroma-style ``where`` filter (the subset above)."""
    for key, condition in where.items():
        if key == "$and":
            if not all(matches_where(metadata, c) for c in condition):
                return False
        elif key == "$or":
            if not any(matches_where(metadata, c) for c in condition):
                return False
        elif key.startswith("$"):
            raise ValueError(f"unsupported filter operator {key!r}")
        elif key not in metadata:
            if not (isinstance(condition, Mapping) and next(iter(condition), None) in ("$ne", "$nin", "$not_contains")):
                return False
        elif not _compare(metadata[key], condition):
            return False
    return True


def _all_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return parts[0] if len(parts) == 1 else {"$and": parts}


def scope_where(query: ScopeQuery) -> dict[str, Any]:
    """One core lookup as a Chroma-style ``where`` clause."""
    if query.naming is not None:
        return {"supersedes": {"$contains": query.naming}}
    parts: list[dict[str, Any]] = [{key: value} for key, value in query.scope]
    if query.doc_types is not None:
        types = list(query.doc_types)
        parts.append({"doc_type": types[0]} if len(types) == 1 else {"doc_type": {"$in": types}})
    return _all_of(parts)


class WhereStore(AuthorityStore):
    """Stage 2's adapter over a :class:`MetadataLookup`: core queries become ``where``
    filters (OR-ed, ``_OR_CHUNK`` per call, each AND-ed with ``extra``), documents become
    stored items, each once."""

    def __init__(self, lookup: MetadataLookup, extra: Mapping[str, Any] | None = None):
        self.lookup = lookup
        self.extra = dict(extra) if extra else None

    def filters(self, queries: Sequence[ScopeQuery]) -> list[dict[str, Any]]:
        clauses = [scope_where(q) for q in queries]
        out = []
        for start in range(0, len(clauses), _OR_CHUNK):
            part = clauses[start : start + _OR_CHUNK]
            where = part[0] if len(part) == 1 else {"$or": part}
            out.append(_all_of([self.extra, where]) if self.extra else where)
        return out

    @staticmethod
    def _items(batches: Iterable[list[Document]]) -> list[StoredItem]:
        seen: set[object] = set()
        out = []
        for doc in (d for batch in batches for d in batch):
            key = doc.id if doc.id is not None else id(doc)
            if key not in seen:
                seen.add(key)
                out.append(StoredItem(doc.metadata or {}, doc.page_content, doc.id, source=doc))
        return out

    def fetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        return self._items(self.lookup.get(where) for where in self.filters(queries))

    async def afetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        return self._items(await asyncio.gather(*(self.lookup.aget(where) for where in self.filters(queries))))
