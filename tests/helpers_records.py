"""Small builders shared by the record / policy / graph / store tests (plain functions, no fixtures)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from car_rag.channels import DenseChannel
from car_rag.policy import Policy, Rule
from car_rag.postgres.log import PostgresRecordLog
from car_rag.postgres.vectors import PgVectorChannel
from car_rag.records import Record
from car_rag.resolution import RetrievalResult, RetrievedRecord
from car_rag.store import CARStore

BASE = datetime(2024, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    """An aware UTC datetime ``n`` days after 2024-01-01."""
    return BASE + timedelta(days=n)


def rec(doc_id: str, doc_type: str = "note", *, at: int | None = None, text: str | None = None, **fields: Any) -> Record:
    """A Record with a throw-away text; ``at`` is a day offset for ``published_at``."""
    if at is not None:
        fields.setdefault("published_at", day(at))
    return Record(doc_id=doc_id, text=text if text is not None else f"text of {doc_id}", doc_type=doc_type, **fields)


MDRENDER_PATCH = {
    "doc_id": "sec-mdrender-2.0.1-release",
    "doc_type": "patch_release",
    "text": "mdrender 2.0.1: raw HTML in link titles is escaped before rendering.",
    "scope": {"package": "mdrender", "cve_id": "CVE-2099-10009"},
    "published_at": "2025-03-01",
}
"""A release note the demo corpus lacks, worded apart from the disclosure it voids (MDRENDER_VOIDED)."""
MDRENDER_VOIDED = "sec-mdrender-cve-2099-10009-disclosure"


def edge_set(graph: Any) -> set[tuple[str, str, str]]:
    """The graph's edges as comparable (superseder, target, rule) triples."""
    return {(e.superseder, e.target, e.rule) for e in graph.edges()}


def chroma_collection(store: CARStore) -> Any:
    """The store's Chroma collection (``store.dense`` is typed as any vector channel; pgvector has none)."""
    assert isinstance(store.dense, DenseChannel), f"{type(store.dense).__name__} keeps no Chroma collection"
    return store.dense.collection


def retrieved(result: RetrievalResult, doc_id: str) -> RetrievedRecord:
    """``result``'s entry for ``doc_id``, which must be there (``result.get`` may be None)."""
    entry = result.get(doc_id)
    assert entry is not None, f"{doc_id} is not in the result"
    return entry


def policy_rule(policy: Policy, name: str) -> Rule:
    """``policy``'s rule ``name``, which must be there (``policy.rule`` may be None)."""
    found = policy.rule(name)
    assert found is not None, f"{policy.name} has no rule {name!r}"
    return found


def shared_log(store: CARStore) -> PostgresRecordLog:
    """The PostgreSQL log of a store opened on one (``store.replica`` is None for a store in a folder)."""
    assert store.replica is not None, "the store keeps its records in a folder, not in PostgreSQL"
    return store.replica.log


def pgvector_channel(store: CARStore) -> PgVectorChannel:
    """The store's vector channel, which must be pgvector's (``store.dense`` is typed as any channel)."""
    assert isinstance(store.dense, PgVectorChannel), f"{type(store.dense).__name__} is not pgvector's"
    return store.dense
