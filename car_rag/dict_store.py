"""The smallest authority-lookup adapter: a dict of doc_id -> flat metadata and text.

It is the third adapter written against :mod:`car_rag.lookup` (after LlamaIndex and
LangChain) and the proof of the contract: records in car-rag's flat layout, queries
matched in memory, Stage-1 hits from any ranking. The fast test tier uses it; so can a
user whose records already sit in a key-value store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from car_rag.eligibility import CallerContext
from car_rag.layout import RecordLayout
from car_rag.lookup import AuthorityClosure, AuthorityStore, ScopeQuery, StoredItem, resolve_closure
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, Anchor, RetrievalResult

__all__ = ["DictStore"]


class DictStore(AuthorityStore):
    """Records held as ``{doc_id: (flat metadata, text)}``, looked up by scanning them."""

    def __init__(self, items: dict[str, tuple[dict[str, Any], str]] | None = None, layout: RecordLayout | None = None):
        self.items: dict[str, tuple[dict[str, Any], str]] = dict(items or {})
        self.layout = layout or RecordLayout()
        self.fetched: list[list[ScopeQuery]] = []
        """Every round of queries answered, for inspection."""

    @classmethod
    def of(cls, records: Iterable[Record], layout: RecordLayout | None = None) -> DictStore:
        """A store holding ``records`` in ``layout`` (car-rag's flat layout by default)."""
        store = cls(layout=layout)
        for record in records:
            store.items[record.doc_id] = (store.layout.metadata(record), record.text)
        return store

    def fetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        self.fetched.append(list(queries))
        return [
            StoredItem(meta, text, doc_id, source=doc_id)
            for doc_id, (meta, text) in self.items.items()
            if any(q.matches(meta, self.layout) for q in queries)
        ]

    def resolve(
        self,
        policy: Policy,
        query: str,
        ranked_ids: Sequence[str],
        *,
        caller: CallerContext | None = None,
        max_rounds: int = 32,
        scope_lookup_limit: int = 20,
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    ) -> RetrievalResult:
        """Stages 2-3 for Stage-1 hits given as doc ids in rank order (ids not held are skipped)."""
        closure = AuthorityClosure(
            policy,
            query,
            layout=self.layout,
            max_rounds=max_rounds,
            scope_lookup_limit=scope_lookup_limit,
            min_confidence=min_confidence,
        )
        for doc_id in ranked_ids:
            if doc_id in self.items:
                meta, text = self.items[doc_id]
                record = closure.read(StoredItem(meta, text, doc_id))
                closure.add_anchor(record, Anchor(doc_id, len(closure.anchors) + 1, channel="ids"), doc_id)
        return resolve_closure(closure, self, caller)
