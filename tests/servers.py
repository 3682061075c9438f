"""What the integration tests add to the servers they start (:mod:`car_rag_evals.servers`: `chroma run`,
`car-rag serve` in a thread; PostgreSQL: :mod:`car_rag.postgres.fixture`, which every suite uses):
a `chroma run` laid out in a test's folder, polling with a deadline, the degraded answer's label, the row
a PostgreSQL query must return."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from car_rag_evals.servers import ChromaServer

DENSE_LEFT_OUT = re.compile(r"dense: (timeout after \d+ ms|unavailable \(\w+\))")
"""How an answer labels the dense channel left out: its deadline passed, or the vector store refused."""


def assert_dense_left_out(degraded: list[str]) -> None:
    """The answer left the dense channel out and says so, with either reason: whether a vector
    store that is gone refuses the connection before the dense deadline passes depends on the
    machine's load, not on the code (a busy machine once gave 'timeout after 1125 ms')."""
    assert len(degraded) == 1 and DENSE_LEFT_OUT.fullmatch(degraded[0]), degraded


@contextmanager
def chroma_run(folder: Path) -> Iterator[tuple[str, int, subprocess.Popen]]:
    """`chroma run` with its data in ``folder/data`` and its output in ``folder/server.log``; yields
    (url, port, process) once it answers, and stops it (however the test left it) at the end."""
    with ChromaServer(folder / "data", log=folder / "server.log") as chroma:
        yield chroma.url, chroma.port, chroma.proc


def wait_for(condition, what: str, timeout_s: float = 60.0, every_s: float = 0.02):
    """Poll ``condition`` until it returns something true (returned), or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        time.sleep(every_s)


def fetch_one(cursor: Any) -> Any:
    """The row a query (a psycopg cursor) must return: ``fetchone()`` is None when there is none."""
    row = cursor.fetchone()
    assert row is not None, "the query returned no row"
    return row
