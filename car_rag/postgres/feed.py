"""The change feed: what keeps one process's memory up with what the others commit.

Every process that shares a store on PostgreSQL (:mod:`car_rag.postgres.log`) holds the authority
graph, BM25 and exact-search vectors in memory. A writer's commit sends ``NOTIFY`` on the
store's channel; :class:`ChangeFeed` listens on a connection of its own and, at each signal
(and every ``poll_s`` without one), applies the changes committed since the last it applied
(:meth:`~car_rag.store.CARStore.catch_up`). A second thread hands the vector store what waits in
the outbox, so a slow or stalled vector store never holds up the feed.
Changes are read by number, never from the notifications, so a signal lost while reconnecting
costs at most one poll.

When PostgreSQL cannot be reached the feed says so (``connected``, ``error``: a service reports
itself not ready) and retries with backoff; what was committed meanwhile is applied when it
reconnects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from car_rag.postgres.log import PostgresRecordLog
from car_rag.record_log import Change

__all__ = ["ChangeFeed", "Follower"]

log = logging.getLogger(__name__)

MAX_RETRY_S = 5.0
"""The longest wait between two attempts to reach PostgreSQL again."""
OUTBOX_GRACE_S = 5.0
"""How long a record's vector is left to its writer (which hands it over right after its commit)
before the feed's drainer takes it: a writer waiting for its own vectors never waits behind
another process's call to the vector store."""


class Follower(Protocol):
    """What the feed keeps up: a store over a shared log (:class:`~car_rag.store.CARStore`)."""

    @property
    def location(self) -> str: ...

    def catch_up(self) -> list[Change]: ...

    def drain_outbox(self, *, min_age_s: float) -> int: ...


class ChangeFeed:
    """A thread that applies a shared log's new changes to one store as they are committed."""

    def __init__(self, store: Follower, shared: PostgresRecordLog, *, poll_s: float = 1.0):
        if poll_s <= 0:
            raise ValueError(f"poll_s must be positive, got {poll_s}")
        self.store, self.log, self.poll_s = store, shared, poll_s
        self.connected = False
        """Whether the feed reaches PostgreSQL and has applied everything committed when it connected."""
        self.error: str | None = "not connected yet"
        """Why it is not connected (None while it is)."""
        self.down_since: float | None = time.time()
        self.delays: deque[float] = deque(maxlen=10_000)
        """Seconds from each change's commit (the database's clock) to this process applying it."""
        self.listeners: list[Callable[[list[Change]], None]] = []
        """Called after each step with the changes it applied, often none (a service's metrics)."""
        self._stop = threading.Event()
        self._drain_wanted = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name="car-rag-feed", daemon=True),
            threading.Thread(target=self._drain, name="car-rag-outbox", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._drain_wanted.set()
        for thread in self._threads:
            thread.join(timeout=self.poll_s + 2 * MAX_RETRY_S)

    def _run(self) -> None:
        sql = self.log.psycopg.sql
        retry = 0.1
        while not self._stop.is_set():
            try:
                with self.log.connect(role="feed") as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.log.channel)))
                    self._step()  # what was committed before listening began
                    self._up()
                    retry = 0.1
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=self.poll_s, stop_after=1):
                            pass
                        self._step()
            except Exception as exc:  # the database went away, or a change could not be read
                self._down(exc)
                self._stop.wait(retry)
                retry = min(2 * retry, MAX_RETRY_S)

    def _step(self) -> None:
        applied = self.store.catch_up()
        now = time.time()
        self.delays.extend(now - c.committed_at for c in applied)
        for listener in self.listeners:
            listener(applied)
        self._drain_wanted.set()

    def _drain(self) -> None:
        """After each step (or every ``poll_s``), hand over what waits in the outbox; the vector
        store down, the vectors wait there until a later attempt succeeds."""
        while not self._stop.is_set():
            self._drain_wanted.wait(self.poll_s)
            self._drain_wanted.clear()
            try:
                if not self._stop.is_set() and self.log.outbox and self.log.count_pending():  # pgvector: no outbox
                    self.store.drain_outbox(min_age_s=OUTBOX_GRACE_S)
            except Exception as exc:
                log.debug("%s: the outbox waits: %s: %s", self.store.location, type(exc).__name__, exc)

    def _up(self) -> None:
        if not self.connected:
            if self.down_since is not None and self.error != "not connected yet":
                log.warning("%s: change feed reconnected after %.1f s", self.store.location, time.time() - self.down_since)
            self.connected, self.error, self.down_since = True, None, None

    def _down(self, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if self.connected or self.error != reason:
            log.warning("%s: change feed lost PostgreSQL (%s); retrying", self.store.location, reason)
        if self.connected or self.down_since is None:
            self.down_since = time.time()
        self.connected, self.error = False, reason
