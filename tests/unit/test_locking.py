"""The store's readers-writer lock: shared reads, exclusive writes, no self-deadlock."""

from __future__ import annotations

import threading
import time

import pytest

from car_rag.store.locking import ReadWriteLock


def test_a_reader_may_read_again_while_a_writer_waits() -> None:
    lock = ReadWriteLock()
    entered_again = threading.Event()
    wrote = threading.Event()

    def write() -> None:
        with lock.write():
            wrote.set()

    with lock.read():
        writer = threading.Thread(target=write)
        writer.start()
        while not lock._writers_waiting:  # the writer now queues behind this reader
            time.sleep(0.001)
        with lock.read():  # a query's stages nest reads: this must not wait for the writer
            entered_again.set()
        assert not wrote.is_set()
    writer.join(5)
    assert entered_again.is_set() and wrote.is_set()


def test_new_readers_wait_behind_a_waiting_writer_and_the_writer_is_alone() -> None:
    lock = ReadWriteLock()
    order: list[str] = []
    first_reader_in = threading.Event()
    release_first = threading.Event()

    def first_reader() -> None:
        with lock.read():
            first_reader_in.set()
            release_first.wait(5)
            order.append("reader-1 out")

    def writer() -> None:
        with lock.write():
            order.append("writer in")
            assert not lock._reads
            order.append("writer out")

    def late_reader() -> None:
        with lock.read():
            order.append("reader-2 in")

    threads = [threading.Thread(target=first_reader)]
    threads[0].start()
    first_reader_in.wait(5)
    threads.append(threading.Thread(target=writer))
    threads[1].start()
    while not lock._writers_waiting:
        time.sleep(0.001)
    threads.append(threading.Thread(target=late_reader))
    threads[2].start()
    # both wait on the lock's condition (CPython's Condition keeps its waiters in _waiters, untyped), or one got in (wrongly)
    while len(lock._cond._waiters) < 2 and not order:  # type: ignore[attr-defined]
        time.sleep(0.001)
    assert order == []  # the late reader queues behind the writer, which waits for reader 1
    release_first.set()
    for t in threads:
        t.join(5)
    assert order == ["reader-1 out", "writer in", "writer out", "reader-2 in"]


def test_write_is_not_reentrant_and_cannot_be_taken_while_reading() -> None:
    lock = ReadWriteLock()
    with lock.write():
        with lock.read():  # the writer may read what it writes
            pass
        with pytest.raises(RuntimeError, match="not re-entrant"):
            with lock.write():
                pass
    with lock.read():
        with pytest.raises(RuntimeError, match="holding the read lock"):
            with lock.write():
                pass
    with lock.write():  # released cleanly after both refusals
        pass
