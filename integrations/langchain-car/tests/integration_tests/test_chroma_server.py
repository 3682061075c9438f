"""CARRetriever against a real `chroma run` server on loopback (the only network the suite
may use), through langchain_chroma.Chroma(host=..., port=...)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import chromadb
import pytest
from car_rag import load_policy
from chromadb.config import Settings

from langchain_car import CARRetriever
from tests.corpus import ANCHOR, QUERY, SUPERSEDER
from tests.integration_tests import stores

pytestmark = pytest.mark.server
HOST = "127.0.0.1"


def _chroma_cli() -> str:
    beside = Path(sys.executable).parent / "chroma"
    found = str(beside) if beside.is_file() else shutil.which("chroma")
    if found is None:
        pytest.fail("the `chroma` CLI (from chromadb) is not installed")
    return found


@pytest.fixture(scope="module")
def server_port(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chroma-server")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    log = (folder / "server.log").open("wb")
    proc = subprocess.Popen(
        [_chroma_cli(), "run", "--host", HOST, "--port", str(port), "--path", str(folder / "data")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"chroma run exited with {proc.returncode}: {(folder / 'server.log').read_text()[-2000:]}")
            try:
                chromadb.HttpClient(host=HOST, port=port, settings=Settings(anonymized_telemetry=False)).heartbeat()
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail(f"chroma run did not answer in 30 s: {(folder / 'server.log').read_text()[-2000:]}")
                time.sleep(0.25)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def test_server_store_ranks_like_the_embedded_store(server_port) -> None:
    client = chromadb.HttpClient(host=HOST, port=server_port, settings=Settings(anonymized_telemetry=False))
    served = stores.new_chroma(stores.corpus_docs(), client, prefix="served")
    embedded = stores.corpus_chroma()
    policy = load_policy("security-advisory")
    results = []
    for store in (served, embedded):
        retriever = CARRetriever(base_retriever=store.as_retriever(search_kwargs={"k": 3}), store=store, policy=policy, k=4)
        results.append(retriever.invoke(QUERY))
    assert [d.id for d in results[0]] == [d.id for d in results[1]]
    assert results[0][0].id == SUPERSEDER
    assert {d.id: d.metadata["car_status"] for d in results[0]}[ANCHOR] == "superseded"
