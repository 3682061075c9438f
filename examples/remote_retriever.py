"""One car-rag store behind `car-rag serve`, read by a LlamaIndex app and a LangChain app alike.

Each framework's ``CARServiceRetriever`` asks the server's ``/retrieve`` (with an API key,
timeouts and retries) and hands back nodes / documents laid out exactly as its in-process
``CARRetriever``'s: the same ``car_status``, ``car_superseded_by``, ``car_voided_by`` metadata.
N apps share one store this way, a PostgreSQL-backed one included (``car-rag serve --workers N``).

    pip install -e ".[serve,client]" -e ./integrations/llama-index-retrievers-car -e ./integrations/langchain-car
    python examples/remote_retriever.py                          # builds the demo store, serves it for the run
    CAR_RAG_API_KEY=... python examples/remote_retriever.py --url http://127.0.0.1:8000   # your own server
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import httpx  # noqa: E402
from langchain_car import CARServiceRetriever as LangChainServiceRetriever  # noqa: E402
from llama_index.retrievers.car import CARServiceRetriever as LlamaIndexServiceRetriever  # noqa: E402

import car_rag  # noqa: E402

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
QUESTION = "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?"
READY_S = 180


@contextmanager
def demo_server(folder: Path) -> Iterator[str]:
    """`car-rag ingest` the demo corpus into ``folder``, then `car-rag serve` it on a free loopback
    port (no keys: loopback only) until the block ends; yields its URL once /readyz says ready."""
    car_rag_cli = [sys.executable, "-m", "car_rag"]
    store = folder / "store"
    subprocess.run(
        [*car_rag_cli, "ingest", str(DEMO / "corpus.jsonl"), "--store", str(store), "--policy", str(DEMO / "policy.toml")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*car_rag_cli, "serve", "--store", str(store), "--port", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while not _ready(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"car-rag serve did not get ready at {url}")
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def show(url: str, api_key: str | None, question: str) -> None:
    print(f"Q: {question}\n")
    nodes = LlamaIndexServiceRetriever(url, api_key=api_key, k=8).retrieve(question)
    print("LlamaIndex nodes:")
    for n in nodes:
        meta = n.node.metadata
        print(f"  {meta['car_status']:10} {meta['doc_id']}  superseded by: {', '.join(meta['car_superseded_by']) or '-'}")
    docs = LangChainServiceRetriever(url=url, api_key=api_key, k=8).invoke(question)
    print("LangChain documents:")
    for d in docs:
        print(f"  {d.metadata['car_status']:10} {d.id}  superseded by: {', '.join(d.metadata['car_superseded_by']) or '-'}")
    same = [n.node.metadata["doc_id"] for n in nodes] == [d.id for d in docs]
    print(f"\nboth apps read the same ranking from one store: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running car-rag serve (its key from $CAR_RAG_API_KEY); default: the demo store, served")
    parser.add_argument("--question", default=QUESTION)
    args = parser.parse_args()
    if args.url:
        show(args.url, os.environ.get("CAR_RAG_API_KEY"), args.question)
        return
    with tempfile.TemporaryDirectory() as folder, demo_server(Path(folder)) as url:
        show(url, None, args.question)


if __name__ == "__main__":
    main()
