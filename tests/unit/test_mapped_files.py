"""Strings mapped from files (car_rag.mapped_files): by position, found by hash, checked against the string."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from car_rag import mapped_files
from car_rag.mapped_files import Builds, StringColumn, building, hash64

STRINGS = ["r0", "", "naïve-café", "日本語の記録", "r0", "CVE-2019-10744", "emoji 🙂 id"]


def test_a_written_column_reads_back_every_string_by_position_slice_and_iteration(tmp_path: Path) -> None:
    column = StringColumn.write(tmp_path / "ids", iter(STRINGS))
    assert len(column) == len(STRINGS)
    assert [column[i] for i in range(len(STRINGS))] == STRINGS
    assert column[-1] == STRINGS[-1] and column[2:5] == STRINGS[2:5]
    assert list(column) == STRINGS and column == STRINGS and column != STRINGS[:-1]
    assert isinstance(column._bytes, np.memmap)
    with pytest.raises(IndexError, match="position 7 of a column of 7 strings"):
        column[7]


def test_position_finds_the_first_holder_and_nothing_for_an_absent_string(tmp_path: Path) -> None:
    column = StringColumn.write(tmp_path / "ids", STRINGS)
    assert column.position("r0") == 0 and column.position("") == 1
    assert column.position("日本語の記録") == 3 and "emoji 🙂 id" in column
    assert column.position("r1") is None and "R0" not in column and None not in column


def test_strings_sharing_a_hash_are_told_apart_by_the_string_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped_files, "hash64", lambda text: 42)  # every string collides
    column = StringColumn.write(tmp_path / "ids", ["a", "b", "c"])
    assert [column.position(s) for s in ("a", "b", "c", "d")] == [0, 1, 2, None]


def test_appended_strings_follow_the_written_ones_until_the_next_write(tmp_path: Path) -> None:
    column = StringColumn.write(tmp_path / "ids", ["a", "b"])
    column.extend(["c", "a", "d"])
    assert list(column) == ["a", "b", "c", "a", "d"] and column[4] == "d"
    assert column.position("a") == 0 and column.position("d") == 4
    again = StringColumn.write(tmp_path / "more", column)
    assert again == ["a", "b", "c", "a", "d"] and again._tail == []


def test_an_empty_column_writes_and_reads(tmp_path: Path) -> None:
    column = StringColumn.write(tmp_path / "ids", [])
    assert len(column) == 0 and list(column) == [] and column.position("a") is None
    assert len(StringColumn()) == 0


def test_the_hash_is_fixed_not_salted_per_process() -> None:
    """Files written by one process are read by others: the hash must not depend on the process."""
    assert hash64("r0") == 0x253F0AA7CC5A555A and hash64("日本") == 0x3A9B54E1CF3533E8


def test_a_folder_is_built_by_one_holder_of_its_lock_at_a_time(tmp_path: Path) -> None:
    events: list[str] = []

    def second() -> None:
        with building(tmp_path / "bm25"):
            events.append("second")

    with building(tmp_path / "bm25"):
        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(timeout=0.5)
        assert waiting.is_alive() and events == []  # blocked while the first holds the lock
        events.append("first")
    waiting.join()
    assert events == ["first", "second"]


def test_builds_publish_a_new_folder_each_time_and_remove_their_own_earlier_one(tmp_path: Path) -> None:
    builds = Builds(tmp_path)
    assert builds.current() is None
    first = builds.publish(lambda folder: (folder / "index.json").write_text('{"change": 1}'))
    assert builds.current() == (first, {"change": 1})
    second = builds.publish(lambda folder: (folder / "index.json").write_text('{"change": 2}'))
    assert builds.current() == (second, {"change": 2}) and not first.exists()
