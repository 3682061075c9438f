"""A throwaway PostgreSQL with pgvector, for the PGVector tests of both integrations, the parity
scripts (``evals/integrations/``) and any test that needs a database: ``car-rag postgres``'s
server (:mod:`car_rag.pg_server`, the ``postgres`` extra) started in a folder of the caller's,
reached over TCP on a free loopback port, stopped on exit. Nothing is installed system-wide."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["pg_databases"]


@contextmanager
def pg_databases(folder: Path | str | None = None) -> Iterator[Callable[[], str]]:
    """Start PostgreSQL in ``folder`` (default: a new temporary folder, removed at the end); yield
    a function that creates a fresh database with the ``vector`` extension and returns its
    SQLAlchemy URI (psycopg 3, usable sync and async). A database per store: PGVector's row ids
    are unique across all its collections, so stores holding the same ids need databases of
    their own.

    Run as root, the server runs as the ``pgserver`` user, which must be able to enter every
    parent of ``folder``; pytest's ``tmp_path`` lives under ``/tmp/pytest-of-<user>``, which any
    other pytest process of that user sets back to mode 700 when it starts, so the default
    folder is not there."""
    import psycopg  # the postgres extra; imported here so the harness loads without it

    from car_rag import pg_server

    own = folder is None
    pgdir = Path(tempfile.mkdtemp(prefix="car-rag-pg-")) if folder is None else Path(folder)
    with socket.socket() as probe:  # a port free now; PostgreSQL binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = pg_server.start(pgdir, port=port)
    count = 0

    def new_database() -> str:
        nonlocal count
        count += 1
        name = f"car_test_{count}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        database_url = url.rsplit("/", 1)[0] + f"/{name}"
        with psycopg.connect(database_url, autocommit=True) as database:
            database.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return database_url.replace("postgresql://", "postgresql+psycopg://", 1)

    try:
        yield new_database
    finally:
        pg_server.stop(pgdir)
        if own:
            shutil.rmtree(pgdir, ignore_errors=True)
