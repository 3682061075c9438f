"""Servers the measuring scripts and the tests start on loopback and stop: ``chroma run``
(:class:`ChromaServer`), a :class:`car_rag.serve.service.Service` in a uvicorn thread
(:func:`serving`) and ``car-rag serve`` in a process of its own (:func:`car_rag_serve`). PostgreSQL
is the library's own (:mod:`car_rag.postgres.server`, :mod:`car_rag.postgres.fixture`)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from car_rag.serve.service import Service

HOST = "127.0.0.1"


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def chroma_cli() -> str:
    """The ``chroma`` command of this Python's environment (beside the interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / "chroma"
    if beside.is_file():
        return str(beside)
    found = shutil.which("chroma")
    if found is None:
        raise FileNotFoundError(f"the `chroma` CLI (from chromadb) is neither at {beside} nor on PATH")
    return found


def chroma_http_client(port: int) -> Any:
    """A Chroma client of the server on ``port`` (loopback), sending no telemetry."""
    import chromadb
    from chromadb.config import Settings

    return chromadb.HttpClient(host=HOST, port=port, settings=Settings(anonymized_telemetry=False))


class ChromaServer:
    """``chroma run`` on loopback for the duration of a ``with`` block: its data in ``data``, its
    output appended to ``log`` (default ``<data>.log`` beside it), on ``port`` (default: a free one;
    a store remembers its Chroma URL, so a store built before is reopened on the port it was built
    with). Entered once it answers a heartbeat (``ready_s`` at most); stopped at the end however
    the block left it (a test may have killed it)."""

    def __init__(self, data: Path, *, port: int | None = None, log: Path | None = None, ready_s: float = 60.0):
        self.data, self.port, self.ready_s = data, free_port() if port is None else port, ready_s
        self.log_path = data.parent / f"{data.name}.log" if log is None else log
        self.url = f"http://{HOST}:{self.port}"
        self.proc: subprocess.Popen[bytes]
        self._log: IO[bytes]

    def __enter__(self) -> ChromaServer:
        command = [chroma_cli(), "run", "--host", HOST, "--port", str(self.port), "--path", str(self.data)]
        self.data.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.ready_s
        while True:
            if self.proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"chroma run exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                chroma_http_client(self.port).heartbeat()
                return self
            except Exception:
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"chroma run did not answer within {self.ready_s:.0f} s: {self._log_tail()}") from None
                time.sleep(0.25)

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]


@contextmanager
def serving(
    service: Service, *, log_level: str = "warning", access_log: bool = True, ready_s: float | None = 60.0, **app_options: Any
) -> Iterator[str]:
    """``service`` in a uvicorn thread on a free loopback port (``app_options``: :func:`create_app`'s,
    e.g. ``max_body_bytes``); yields its URL once /readyz answers 200, and stops it at the end.
    Not ready within ``ready_s`` (``None``: however long a large store takes to load), or the
    server stopped, raises ``RuntimeError``."""
    import httpx
    import uvicorn

    from car_rag.serve.app import create_app

    config = uvicorn.Config(
        create_app(service, **app_options), host=HOST, port=free_port(), log_level=log_level, access_log=access_log
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://{HOST}:{config.port}"
    deadline = None if ready_s is None else time.monotonic() + ready_s
    while not (server.started and httpx.get(f"{url}/readyz", timeout=30).status_code == 200):
        if not thread.is_alive():
            raise RuntimeError("the server stopped before it was ready")
        if deadline is not None and time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not get ready within {ready_s:.0f} s")
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def car_rag_serve(folder: Path, *options: str, env: dict[str, str] | None = None, ready_s: float = 120.0) -> Iterator[str]:
    """``python -m car_rag serve OPTIONS`` on a free loopback port, in a process of its own (its
    output in ``folder/serve-PORT.log``, ``env`` added to this process's environment); yields its
    URL once /readyz answers 200 and interrupts it at the end (killed after 30 s). The server
    exiting first, or not ready within ``ready_s``, raises ``RuntimeError`` with its log's tail."""
    import httpx

    port = free_port()
    log_path = folder / f"serve-{port}.log"
    url = f"http://{HOST}:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "car_rag", "serve", *options, "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        try:
            deadline = time.monotonic() + ready_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"car-rag serve exited with {proc.returncode}: {log_path.read_text()[-3000:]}")
                try:
                    if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"car-rag serve did not get ready within {ready_s:.0f} s: {log_path.read_text()[-3000:]}")
                time.sleep(0.1)
            yield url
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
