"""``records.sqlite``: the record log of a store in a folder, which one process owns."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from car_rag.graph import Edge
from car_rag.record_log import Change, LoggedState, LogWriter, RecordLog, parse_stored
from car_rag.records import Record

__all__ = ["SqliteRecordLog"]


class SqliteRecordLog(RecordLog):
    """``records.sqlite``: records (in ingest order) and supersession edges, owned by one process."""

    def __init__(self, path: Path):
        self.location = str(path)
        # Used from whichever thread ingests or queries; the store's lock serializes writers.
        self._db = sqlite3.connect(path, check_same_thread=False)
        # Write-ahead log without a sync per commit: a streamed insert costs ~0.1 ms instead
        # of two fsyncs. A commit survives the process crashing; one lost to a power cut is
        # restored by re-ingesting (idempotent), as is a crash between vectors and records.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(
            """
            CREATE TABLE IF NOT EXISTS records (
                doc_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, fingerprint TEXT NOT NULL, body TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS edges (
                superseder TEXT NOT NULL, target TEXT NOT NULL, rule TEXT NOT NULL,
                confidence REAL NOT NULL DEFAULT 1.0, PRIMARY KEY (superseder, target));
            CREATE INDEX IF NOT EXISTS edges_by_target ON edges (target);
            CREATE TABLE IF NOT EXISTS disputed_edges (
                superseder TEXT NOT NULL, target TEXT NOT NULL, rule TEXT NOT NULL,
                confidence REAL NOT NULL DEFAULT 1.0, PRIMARY KEY (superseder, target));
            """
        )
        if "confidence" not in {row[1] for row in self._db.execute("PRAGMA table_info(edges)")}:
            # A store from before edge confidence: every edge it holds is certain.
            with self._db:
                self._db.execute("ALTER TABLE edges ADD COLUMN confidence REAL NOT NULL DEFAULT 1.0")

    def load(self, *, vectors_up_to: int = 0) -> LoggedState:
        records = [parse_stored(body, self.location) for (body,) in self._db.execute("SELECT body FROM records ORDER BY seq")]
        edges, disputed = (
            [Edge(*row) for row in self._db.execute(f"SELECT superseder, target, rule, confidence FROM {table}")]
            for table in ("edges", "disputed_edges")
        )
        return LoggedState(records, edges, disputed)

    def fingerprints(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return _fingerprints(self._db, doc_ids)

    def ordered(self) -> list[tuple[str, str]]:
        return list(self._db.execute("SELECT doc_id, fingerprint FROM records ORDER BY seq"))

    @contextmanager
    def transaction(self) -> Iterator[LogWriter]:
        with self._db:
            yield _SqliteWriter(self._db)

    def close(self) -> None:
        self._db.close()


class _SqliteWriter(LogWriter):
    def __init__(self, db: sqlite3.Connection):
        self._db = db

    def changes(self, after: int, *, vectors: bool = True) -> list[Change]:
        return []

    def fingerprints(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return _fingerprints(self._db, doc_ids)

    def write(
        self, records: Sequence[Record], edges: Iterable[Edge], disputed: Iterable[Edge], vectors: np.ndarray | None
    ) -> int:
        seq = (self._db.execute("SELECT MAX(seq) FROM records").fetchone()[0] or 0) + 1
        self._db.executemany(
            "INSERT INTO records (doc_id, seq, fingerprint, body) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(doc_id) DO UPDATE SET fingerprint = excluded.fingerprint, body = excluded.body",
            [(r.doc_id, seq + i, r.fingerprint(), r.model_dump_json()) for i, r in enumerate(records)],
        )
        ids = [r.doc_id for r in records]
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            for table in ("edges", "disputed_edges"):
                self._db.execute(f"DELETE FROM {table} WHERE superseder IN ({marks}) OR target IN ({marks})", part + part)
        for table, rows in (("edges", edges), ("disputed_edges", disputed)):
            self._db.executemany(
                f"INSERT INTO {table} (superseder, target, rule, confidence) VALUES (?, ?, ?, ?)",
                [(e.superseder, e.target, e.rule, e.confidence) for e in rows],
            )
        return 0

    def commit(self) -> None:
        self._db.commit()
        self.committed = True


def _fingerprints(db: sqlite3.Connection, doc_ids: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for start in range(0, len(doc_ids), 500):
        part = list(doc_ids[start : start + 500])
        marks = ",".join("?" * len(part))
        found.update(db.execute(f"SELECT doc_id, fingerprint FROM records WHERE doc_id IN ({marks})", part))
    return found
