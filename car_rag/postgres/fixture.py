"""The throwaway PostgreSQL with pgvector that every suite uses: the core's tests, the harness and
its evals (``evals/``), both integrations' PGVector tests and the parity scripts.

:mod:`car_rag.postgres.server` (``car-rag postgres``, the ``postgres`` extra) started in a folder
(by default a new temporary one, removed at the end), reached over TCP on a free loopback port,
stopped on exit. Nothing is installed system-wide. Tests make their fixtures from
:func:`throwaway_postgres`, so that one server setup serves them all.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from car_rag.postgres import server

__all__ = ["HOST", "ThrowawayPostgres", "sqlalchemy_url", "throwaway_postgres"]

HOST = "127.0.0.1"


class ThrowawayPostgres:
    """A running server of :func:`throwaway_postgres`: its ``url`` (the ``postgres`` database, as
    superuser), ``folder`` and ``port``; fresh databases on demand, and a stop and start again on
    the same address (a test of what clients do while PostgreSQL is down)."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.url = server.start(folder, host=HOST, port=port)
        self._made = 0

    def new_database(self) -> str:
        """A new database with the ``vector`` extension; its ``postgresql://`` URL. A database per
        store: PGVector's row ids are unique across all its collections, so stores holding the
        same ids need databases of their own."""
        import psycopg

        self._made += 1
        name = f"car_test_{self._made}"
        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        url = self.url.rsplit("/", 1)[0] + f"/{name}"
        with psycopg.connect(url, autocommit=True) as database:
            database.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return url

    def stop(self) -> None:
        server.stop(self.folder)

    def start(self) -> None:
        """Start it again after :meth:`stop`: the same data, address and URL."""
        server.start(self.folder, host=HOST, port=self.port)


@contextmanager
def throwaway_postgres(folder: Path | str | None = None) -> Iterator[ThrowawayPostgres]:
    """Start PostgreSQL in ``folder`` (default: a new temporary folder, removed at the end) on a free
    loopback port, yield it, and stop it however the block ends.

    Run as root, the server runs as the ``pgserver`` user, which must be able to enter every
    parent of ``folder``; pytest's ``tmp_path`` lives under ``/tmp/pytest-of-<user>``, which any
    other pytest process of that user sets back to mode 700 when it starts, so the default
    folder is not there."""
    own = folder is None
    pgdir = Path(tempfile.mkdtemp(prefix="car-rag-pg-")) if folder is None else Path(folder)
    with socket.socket() as probe:  # a port free now; PostgreSQL binds it a moment later
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    try:
        running = ThrowawayPostgres(pgdir, port)
        try:
            yield running
        finally:
            server.stop(pgdir)
    finally:
        if own:
            shutil.rmtree(pgdir, ignore_errors=True)


def sqlalchemy_url(url: str) -> str:
    """``url`` as SQLAlchemy names psycopg 3 (sync and async), for LangChain's ``PGVector`` and
    LlamaIndex's ``PGVectorStore``."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)
