"""A store's side of a shared log: taking other processes' commits into what this process holds,
and handing the vector store the vectors that wait in the outbox.

Every process sharing a store on PostgreSQL (:mod:`car_rag.postgres`) holds the graph, BM25 and
exact-search vectors in memory; its change feed (:class:`~car_rag.postgres.ChangeFeed`) calls
:meth:`Replica.catch_up` when a commit is signalled, and :meth:`Replica.drain_outbox` for what a
writer could not hand over. A writer's own ingest applies the changes committed before its turn
(:meth:`Replica.apply`) and hands over its own vectors right after its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from car_rag.graph import SupersessionCycleError
from car_rag.postgres import Outbox, PostgresRecordLog
from car_rag.record_log import Change
from car_rag.store import chroma
from car_rag.store.indexes import Indexes
from car_rag.store.locking import ReadWriteLock

__all__ = ["Replica"]

log = logging.getLogger(__package__)  # car_rag.store: one logger for all the store says, whichever module


class Replica:
    """The ``indexes`` of one process kept up with ``shared``, under the store's ``lock``; ``client``:
    the Chroma client where the vectors reach a Chroma server after each commit (None: pgvector)."""

    def __init__(self, indexes: Indexes, shared: PostgresRecordLog, lock: ReadWriteLock, client: Any):
        self.indexes, self.log, self.lock, self.client = indexes, shared, lock, client

    @property
    def outbox(self) -> bool:
        """Whether the vectors reach the vector store after the commit, from the shared log's
        outbox (a Chroma server; pgvector takes them in the commit)."""
        return self.log.outbox

    def apply(self, changes: Sequence[Change]) -> list[Change]:
        """Other processes' commits to the shared log, oldest first, taken into the graph, BM25 and
        exact search as their writers took them (the same records make the same edges); returns
        those not applied before. Caller holds the write lock."""
        held = self.indexes
        fresh = [c for c in changes if c.number > held.head]
        if not fresh:
            return []
        replaces = False
        for change in fresh:
            replaces = replaces or change.record.doc_id in held.graph.records
            try:
                held.graph.add(change.record)
            except SupersessionCycleError:
                log.error(
                    "%s: change %d closes a cycle in this process's graph, which its writer's did not: re-reading the store",
                    self.log.location,
                    change.number,
                )
                held.reload()
                return fresh
        vectors = {c.record.doc_id: c.vector for c in fresh if c.vector is not None}
        if vectors:
            held.dense.put(list(vectors), np.vstack(list(vectors.values())))
        held.take([c.record.doc_id for c in fresh], [c.record.text for c in fresh], None, replaces)
        held.head = fresh[-1].number
        return fresh

    def catch_up(self) -> list[Change]:
        """Apply what other processes committed since this process last looked; the changes applied."""
        changes = self.log.changes(self.indexes.head, vectors=self.indexes.dense.exact)
        if not changes:
            return []
        with self.lock.write():
            applied = self.apply(changes)
        if applied:
            log.debug("%s: applied %d changes up to %d", self.log.location, len(applied), self.indexes.head)
        return applied

    def drain_outbox(self, doc_ids: Sequence[str] | None = None, *, batch: int = 500, min_age_s: float = 0.0) -> int:
        """Hand the vector store what waits in the outbox (see :meth:`~car_rag.store.CARStore.drain_outbox`)."""
        if not self.outbox:
            return 0
        if doc_ids is not None:
            return sum(self._hand_over(self.log.pending(batch, doc_ids[i : i + batch])) for i in range(0, len(doc_ids), batch))
        done = 0
        while handed := self._hand_over(self.log.pending(batch, min_age_s=min_age_s)):
            done += handed
        return done

    def drain_after_ingest(self, doc_ids: list[str]) -> str | None:
        """The vectors of what was just committed, to the vector store; a failure leaves them in
        the outbox (the records are stored: their vectors follow when the vector store answers),
        and is returned as the ingest's warning."""
        try:
            self.drain_outbox(doc_ids)
        except Exception as exc:
            waiting = self.log.count_pending()
            log.warning(
                "%s: vector store failed (%s: %s); %d vectors wait in the outbox",
                self.log.location,
                type(exc).__name__,
                exc,
                waiting,
            )
            return (
                f"{waiting} vectors wait in the outbox: the vector store failed ({type(exc).__name__}); "
                "they are written when it answers"
            )
        return None

    def _hand_over(self, pending: Outbox) -> int:
        """Upsert an outbox's vectors into the vector store; they stop being pending when it ends."""
        with pending as outbox:
            if outbox.rows:
                records = [r for _, _, r, _ in outbox.rows]
                chroma.write(self.indexes.chroma, self.client, records, np.vstack([v for *_, v in outbox.rows]), exact=False)
                outbox.done([(doc_id, change) for doc_id, change, _, _ in outbox.rows])
            return len(outbox.rows)
