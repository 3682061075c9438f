"""What a worker maps from files instead of holding in its heap: strings by position, and the
builds of a folder such files are published in.

A ``stage2="sql"`` worker (:class:`~car_rag.store.lean.LeanStore`) must name every record BM25
scores, and find a record's position from its id; a Python list of 10M ids (and a set or a dict
beside it to find them) is over a gigabyte of heap. A :class:`StringColumn` keeps them in files
written once and mapped read-only: shared by the workers mapping them, in the page cache only
where read. Files are never rewritten in place (truncating a file another process maps kills
that process); a new build writes new files, in a new subfolder (:class:`Builds`), and workers
sharing a folder build it one at a time (:func:`building`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

import numpy as np

__all__ = ["Builds", "StringColumn", "building", "hash64"]

CURRENT = "current"
"""The link in a folder of builds to the newest one."""
META = "index.json"
"""The file a build writes last, saying what it holds (:meth:`Builds.current` reads it)."""

_CHUNK = 4096
"""Strings decoded per read of the mapped bytes when iterating."""


def hash64(text: str) -> int:
    """A 64-bit hash of ``text`` that every process computes alike (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _files(path: Path) -> tuple[Path, Path, Path, Path]:
    """The column's UTF-8 bytes, each string's start offset (and the end), its hashes sorted, and their positions."""
    return tuple(path.with_name(f"{path.name}{suffix}") for suffix in (".utf8", "-offsets.npy", "-hashes.npy", "-order.npy"))  # type: ignore[return-value]


class StringColumn(Sequence[str]):
    """Strings by position: those :meth:`write` put in files, mapped, then those :meth:`extend`
    appended since, in the heap until the next write. :meth:`position` finds a string through
    the sorted 64-bit hashes (each hit checked against the string itself), not a dict."""

    def __init__(self, path: Path | None = None) -> None:
        """The column written at ``path`` (:meth:`write`), mapped; an empty one without."""
        self._bytes = np.zeros(0, dtype=np.uint8)
        self._offsets = np.zeros(1, dtype=np.int64)
        self._hashes = np.zeros(0, dtype=np.uint64)
        self._order = np.zeros(0, dtype=np.int64)
        if path is not None:
            data, offsets, hashes, order = _files(path)
            self._offsets = np.load(offsets, mmap_mode="r")
            if self._offsets[-1]:  # an empty file cannot be mapped
                self._bytes = np.memmap(data, dtype=np.uint8, mode="r")
            self._hashes, self._order = np.load(hashes, mmap_mode="r"), np.load(order, mmap_mode="r")
        self._written = len(self._offsets) - 1
        self._tail: list[str] = []
        self._tail_at: dict[str, int] = {}

    @classmethod
    def write(cls, path: Path, strings: Iterable[str]) -> StringColumn:
        """Write ``strings`` (read once, one at a time) as a column at ``path``; the column, mapped."""
        data, offsets_file, hashes_file, order_file = _files(path)
        offsets, hashes = array("q", [0]), array("Q")
        with data.open("wb") as out:
            for text in strings:
                encoded = text.encode()
                out.write(encoded)
                offsets.append(offsets[-1] + len(encoded))
                hashes.append(hash64(text))
        np.save(offsets_file, np.frombuffer(offsets, dtype=np.int64))
        by_hash = np.frombuffer(hashes, dtype=np.uint64)
        order = np.argsort(by_hash, kind="stable")
        np.save(hashes_file, by_hash[order])
        np.save(order_file, order.astype(np.int64, copy=False))
        return cls(path)

    def extend(self, strings: Iterable[str]) -> None:
        """Append ``strings`` after the others (in the heap: a later :meth:`write` puts them in files)."""
        for text in strings:
            self._tail_at.setdefault(text, len(self))
            self._tail.append(text)

    def __len__(self) -> int:
        return self._written + len(self._tail)

    def _decoded(self, start: int, stop: int) -> list[str]:
        """The written strings at positions ``start`` to ``stop`` (within the files)."""
        bounds = self._offsets[start : stop + 1].tolist()
        blob = self._bytes[bounds[0] : bounds[-1]].tobytes()
        base = bounds[0]
        return [blob[a - base : b - base].decode() for a, b in zip(bounds, bounds[1:])]

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(f"position {index} of a column of {len(self)} strings")
        if position >= self._written:
            return self._tail[position - self._written]
        return self._decoded(position, position + 1)[0]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, self._written, _CHUNK):
            yield from self._decoded(start, min(start + _CHUNK, self._written))
        yield from self._tail

    def position(self, text: str) -> int | None:
        """The first position holding ``text``; None where none does."""
        target = np.uint64(hash64(text))
        first = int(np.searchsorted(self._hashes, target, side="left"))
        last = int(np.searchsorted(self._hashes, target, side="right"))
        for position in sorted(int(p) for p in self._order[first:last]):  # the same hash: check the string
            if self._decoded(position, position + 1)[0] == text:
                return position
        return self._tail_at.get(text)

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and self.position(text) is not None

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same strings in the same order (a list of ids included)."""
        if not isinstance(other, Sequence) or isinstance(other, str) or len(other) != len(self):
            return NotImplemented if not isinstance(other, Sequence) else False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


class Builds:
    """The builds under ``folder``: each in a new subfolder, ``current`` naming the newest."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._own: Path | None = None
        """The build this process published last (removed when it publishes the next one)."""

    def current(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest build and its ``index.json``; None where there is none (or it went meanwhile)."""
        try:
            built = (self.folder / CURRENT).resolve(strict=True)
            return built, json.loads((built / META).read_text())
        except FileNotFoundError:
            return None

    def publish(self, save: Callable[[Path], object]) -> Path:
        """A new build that ``save`` writes into the folder it is given (``index.json`` last), made
        the newest by one rename; the folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        built = Path(tempfile.mkdtemp(prefix="index-", dir=self.folder))
        save(built)
        link = self.folder / f".{built.name}.link"
        os.symlink(built.name, link)
        os.replace(link, self.folder / CURRENT)
        earlier, self._own = self._own, built
        if earlier is not None:  # processes mapping it keep reading it
            shutil.rmtree(earlier, ignore_errors=True)
        return built


@contextmanager
def building(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s build lock (an advisory lock on a file in it, let go if the process dies):
    workers starting together build a folder once, the others waiting, then mapping that build."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".building").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
