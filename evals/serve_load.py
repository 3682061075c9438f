"""Load test of `car-rag serve` (a command, not a timed test): the same questions asked in
process (``retriever.retrieve``) and over HTTP (``POST /retrieve``, format json) at concurrency
1 and 8, on a store of your choice or the packaged demo corpus; writes a Markdown table.

    python evals/serve_load.py --out evals/results/serve/load-demo.md
    python evals/serve_load.py --store .perf-stores/embedded-100000 --queries q.jsonl --out ...
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import httpx  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CARStore, ControllingAuthorityRetriever, load_policy  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.serve.service import Service  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402
from car_rag_evals.servers import serving  # noqa: E402

DEMO = Path(car_rag.__file__).parent / "data" / "demo"


def percentiles(ms: list[float]) -> str:
    ms = sorted(ms)
    at = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return f"{statistics.median(ms):.1f} | {at(0.95):.1f} | {at(0.99):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="an existing store (default: the demo corpus in a temporary store)")
    parser.add_argument("--queries", type=Path, default=DEMO / "queries.jsonl", help="JSONL questions (query_id, query)")
    parser.add_argument("--requests", type=int, default=400, help="requests per condition")
    parser.add_argument("--anchors", default="hybrid", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    header = results_header(__file__)  # the load before the run, as the results say
    folder = None
    if args.store is None:
        folder = tempfile.TemporaryDirectory()
        args.store = Path(folder.name) / "store"
        with CARStore.open(args.store, load_policy(DEMO / "policy.toml")) as built:
            built.ingest(DEMO / "corpus.jsonl", progress=False)
    questions = [q.query for q in load_queries(args.queries)]
    asked = [questions[i % len(questions)] for i in range(args.requests)]
    rows = []
    with CARStore.open(args.store) as store:
        retriever = ControllingAuthorityRetriever(store, anchors=args.anchors)
        for q in questions:  # warm up
            retriever.retrieve(q)
        in_process = []
        for q in asked:
            tick = time.perf_counter()
            retriever.retrieve(q)
            in_process.append((time.perf_counter() - tick) * 1000)
        rows.append(("in process", 1, percentiles(in_process), len(asked) / (sum(in_process) / 1000)))
        with (
            serving(Service(store, anchors=args.anchors), ready_s=None) as url,
            httpx.Client(base_url=url, timeout=60, limits=httpx.Limits(max_connections=16)) as client,
        ):

            def ask(q: str) -> float:
                tick = time.perf_counter()
                got = client.post("/retrieve", json={"query": q, "k": 5})
                got.raise_for_status()
                return (time.perf_counter() - tick) * 1000

            for q in questions:
                ask(q)
            for concurrency in (1, 8):
                with ThreadPoolExecutor(concurrency) as pool:
                    tick = time.perf_counter()
                    latencies = list(pool.map(ask, asked))
                    rps = len(asked) / (time.perf_counter() - tick)
                rows.append(("POST /retrieve", concurrency, percentiles(latencies), rps))
        size = len(store)
    lines = [
        f"# car-rag serve: latency ({size} records, anchors {args.anchors}, {args.requests} requests per row)",
        "",
        f"`{header.command}`; one uvicorn worker; load average before: {header.load_text} on {header.cpus} CPUs; "
        f"commit {header.commit}",
        "",
        "| how | concurrency | p50 ms | p95 ms | p99 ms | requests/s |",
        "|---|---|---|---|---|---|",
        *[f"| {how} | {c} | {p} | {rps:.1f} |" for how, c, p, rps in rows],
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    if folder is not None:
        folder.cleanup()


if __name__ == "__main__":
    main()
