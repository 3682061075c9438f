"""Servers the integration tests start on loopback and stop: `chroma run`, `car-rag serve` (PostgreSQL:
:mod:`car_rag.postgres.fixture`, which every suite uses)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

HOST = "127.0.0.1"

DENSE_LEFT_OUT = re.compile(r"dense: (timeout after \d+ ms|unavailable \(\w+\))")
"""How an answer labels the dense channel left out: its deadline passed, or the vector store refused."""


def assert_dense_left_out(degraded: list[str]) -> None:
    """The answer left the dense channel out and says so, with either reason: whether a vector
    store that is gone refuses the connection before the dense deadline passes depends on the
    machine's load, not on the code (a busy machine once gave 'timeout after 1125 ms')."""
    assert len(degraded) == 1 and DENSE_LEFT_OUT.fullmatch(degraded[0]), degraded


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def chroma_cli() -> str:
    beside = Path(sys.executable).parent / "chroma"
    if beside.is_file():
        return str(beside)
    found = shutil.which("chroma")
    if found is None:
        pytest.fail(f"the `chroma` CLI (from chromadb) is neither at {beside} nor on PATH")
    return found


def chroma_http_client(port: int):
    import chromadb
    from chromadb.config import Settings

    return chromadb.HttpClient(host=HOST, port=port, settings=Settings(anonymized_telemetry=False))


@contextmanager
def chroma_run(folder: Path) -> Iterator[tuple[str, int, subprocess.Popen]]:
    """`chroma run` on a free loopback port with its data in ``folder``; yields (url, port, process)
    once it answers (30 s at most), and stops it (however the test left it) at the end."""
    port = free_port()
    log = (folder / "server.log").open("wb")
    proc = subprocess.Popen(
        [chroma_cli(), "run", "--host", HOST, "--port", str(port), "--path", str(folder / "data")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"chroma run exited with {proc.returncode}: {(folder / 'server.log').read_text()[-2000:]}")
            try:
                chroma_http_client(port).heartbeat()
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail(f"chroma run did not answer within 30 s: {(folder / 'server.log').read_text()[-2000:]}")
                time.sleep(0.25)
        yield f"http://{HOST}:{port}", port, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        log.close()


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


@contextmanager
def serving(service: Any, **options: Any) -> Iterator[str]:
    """``service`` (a :class:`car_rag.serve.service.Service`) in a uvicorn thread on a free loopback port;
    yields its URL once /readyz answers 200 (60 s at most), and stops it at the end."""
    import httpx
    import uvicorn

    from car_rag.serve.app import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(service, **options), host=HOST, port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://{HOST}:{server.config.port}"
    deadline = time.monotonic() + 60
    while not (server.started and httpx.get(f"{url}/readyz", timeout=30).status_code == 200):
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not get ready within 60 s"
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
