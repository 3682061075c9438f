"""A readers-writer lock: queries share a store, an insert has it alone.

An insert touches the vector store, the BM25 index, the records table and the authority
graph in turn; a query that ran between two of those steps could see a record in one
channel and not in another, or a superseder whose target is still reported active.
Queries hold the read side, inserts the write side. Writers are preferred, so a stream of
queries cannot starve inserts; a thread that already reads (or writes) may read again
without waiting, since making it queue behind a waiting writer would deadlock both.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reads: dict[int, int] = {}  # reading thread -> how many times it holds the read side
        self._writer: int | None = None
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if me not in self._reads and self._writer != me:
                while self._writer is not None or self._writers_waiting:
                    self._cond.wait()
            self._reads[me] = self._reads.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._reads[me] -= 1
                if not self._reads[me]:
                    del self._reads[me]
                    if not self._reads:
                        self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                raise RuntimeError("the write lock is not re-entrant")
            if me in self._reads:
                raise RuntimeError("a thread holding the read lock cannot take the write lock")
            self._writers_waiting += 1
            try:
                while self._writer is not None or self._reads:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = me
        try:
            yield
        finally:
            with self._cond:
                self._writer = None
                self._cond.notify_all()
