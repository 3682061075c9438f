"""Where a store's records and supersession edges are durable: the record log's contract.

A :class:`~car_rag.store.CARStore` keeps its authority graph, BM25 index and exact-search vectors
in memory; the record log is what they are rebuilt from. Two logs implement one contract:

* :class:`~car_rag.store.sqlite_log.SqliteRecordLog`, ``records.sqlite`` in the store's
  directory: one process owns it.
* :class:`~car_rag.postgres.log.PostgresRecordLog`, a PostgreSQL database that several processes
  on several machines share: writers take turns (an advisory lock), each commit is a numbered
  change, and every process follows the changes it did not make (:mod:`car_rag.postgres.feed`).

The contract sits below both (the store opens a log on PostgreSQL; PostgreSQL knows no store).

A write is one transaction (:meth:`RecordLog.transaction`): the records, the supersession edges
that touch them, and (in a shared log) their vectors, all or nothing.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError

from car_rag.graph import Edge
from car_rag.records import Record

__all__ = ["RecordLog", "LogWriter", "LoggedState", "Change", "StoredRecordError", "parse_stored"]


class StoredRecordError(RuntimeError):
    """A stored record that no longer validates (stored before a validation rule existed)."""


@dataclass
class LoggedState:
    """Everything a log holds, read in one snapshot."""

    records: list[Record]
    """In ingest order (the order BM25 indexes them in)."""
    edges: list[Edge]
    disputed: list[Edge]
    """The claims of disputed pairs, both directions."""
    head: int = 0
    """The newest change in the snapshot (0 for a log that numbers none)."""
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    """doc_id → vector, where the log keeps vectors and they were asked for (else empty)."""


@dataclass(frozen=True)
class Change:
    """One record as a commit left it, in a shared log's change feed."""

    number: int
    record: Record
    vector: np.ndarray | None
    committed_at: float
    """When its writer wrote the record, in seconds since the epoch by the database's clock: its
    transaction's remaining statements and commit follow, so a delay measured from it is an
    upper bound."""


def parse_stored(body: str, location: str) -> Record:
    """A stored record, or an error naming it and what no longer validates."""
    try:
        return Record.model_validate_json(body)
    except ValidationError as exc:
        doc_id = json.loads(body).get("doc_id") if body.lstrip().startswith("{") else None
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise StoredRecordError(
            f"{location}: stored record {doc_id!r} no longer validates ({problems}); re-ingest it corrected into a new store"
        ) from None


class LogWriter(ABC):
    """One write transaction of a log, open while the writer holds its turn."""

    committed = False
    """Whether :meth:`commit` has run (what failed before it left nothing stored)."""

    @abstractmethod
    def changes(self, after: int, *, vectors: bool = True) -> list[Change]:
        """Changes committed by other writers after ``after``, oldest first (a log one process
        owns has none); ``vectors``: with the records' vectors, where kept."""

    @abstractmethod
    def fingerprints(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The stored fingerprint of each of ``doc_ids`` that is stored."""

    @abstractmethod
    def write(
        self, records: Sequence[Record], edges: Iterable[Edge], disputed: Iterable[Edge], vectors: np.ndarray | None
    ) -> int:
        """Insert or replace ``records`` (a replaced record keeps its place in ingest order) and
        replace every edge and disputed claim touching them with ``edges`` and ``disputed``;
        ``vectors`` (one row per record) where the log keeps them. Returns the new head."""

    @abstractmethod
    def commit(self) -> None:
        """Make the write durable and visible now, before the transaction's block ends (a store
        commits while its readers wait, so none sees a record its log might still lose)."""


class RecordLog(ABC):
    """The durable side of a store: records in ingest order and supersession edges."""

    shared = False
    """Whether other processes write it too (then a store follows its change feed)."""
    keeps_vectors = False
    """Whether it holds each record's vector (a shared log does: the vector store may lag behind it)."""
    location: str
    """What messages call it (a path, or a URL without its password)."""

    @abstractmethod
    def load(self, *, vectors_up_to: int = 0) -> LoggedState:
        """Everything stored, in one snapshot; with the vectors where the log keeps them and
        holds at most ``vectors_up_to`` records (what exact search holds in memory)."""

    @abstractmethod
    def fingerprints(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The stored fingerprint of each of ``doc_ids`` that is stored."""

    @abstractmethod
    def ordered(self) -> list[tuple[str, str]]:
        """(doc_id, fingerprint) of every record, in ingest order."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[LogWriter]:
        """A write transaction: committed when the block ends, rolled back if it raises."""

    @abstractmethod
    def close(self) -> None: ...
