"""Streaming single inserts over HTTP (a command, not a timed test): ``POST /records`` with one
record each, from 1, 8 and 32 client threads, with the insert window at 0 (one store ingest per
request) and at the default (concurrent requests grouped into one ingest); each condition on a
fresh copy of the packaged demo store (embedded Chroma). Writes a Markdown table: inserts/s,
latency p50/p95/p99, and store ingests per request; and where a single insert's time goes in
process (``store.ingest``'s own timings).

    python evals/serve_inserts.py --out evals/results/serve/inserts-demo.md
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402

from car_rag import CARStore, Embedder, IngestReport, load_policy  # noqa: E402
from car_rag.serve import INSERT_WINDOW_MS  # noqa: E402
from car_rag.serve.service import Service  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402
from car_rag_evals.servers import serving  # noqa: E402
from serve_load import DEMO, percentiles  # noqa: E402  (the load test beside this script)


def patch(n: int) -> dict[str, Any]:
    """A patch release for a package of its own (no supersession: every insert costs the same)."""
    return {
        "doc_id": f"bench-pkg{n}-1.0.1-release",
        "doc_type": "patch_release",
        "text": f"bench-pkg{n} 1.0.1: request bodies are size-checked before parsing (build {n}).",
        "scope": {"package": f"bench-pkg{n}", "cve_id": f"CVE-2098-{n:05d}"},
        "published_at": "2025-05-01",
    }


def run(store_dir: Path, embedder: Embedder, window: float, concurrency: int, inserts: int) -> tuple[list[float], float, int]:
    """Latencies (ms), wall seconds and store ingests of ``inserts`` single-record POSTs."""
    with CARStore.open(store_dir, embedder=embedder) as store:
        ingests = [0]
        ingest = store.ingest

        def counted(*args: Any, **kwargs: Any) -> IngestReport:
            ingests[0] += 1
            return ingest(*args, **kwargs)

        store.ingest = counted  # type: ignore[method-assign]
        with (
            serving(Service(store, anchors="bm25", insert_window_ms=window)) as url,
            httpx.Client(base_url=url, timeout=60, limits=httpx.Limits(max_connections=64)) as client,
        ):

            def insert(n: int) -> float:
                tick = time.perf_counter()
                got = client.post("/records", json=patch(n))
                got.raise_for_status()
                return (time.perf_counter() - tick) * 1000

            for n in range(-8, 0):  # warm up: the connection pool, the encoder's first batches
                insert(n)
            ingests[0] = 0
            with ThreadPoolExecutor(concurrency) as pool:
                tick = time.perf_counter()
                latencies = list(pool.map(insert, range(inserts)))
                wall = time.perf_counter() - tick
    return latencies, wall, ingests[0]


def in_process(store_dir: Path, embedder: Embedder, inserts: int) -> dict[str, float]:
    """Median milliseconds per step of a single-record ``store.ingest`` (its ``timings_s``), and in all."""
    steps: dict[str, list[float]] = {}
    with CARStore.open(store_dir, embedder=embedder) as store:
        for n in range(-8, inserts):
            tick = time.perf_counter()
            report = store.ingest([patch(n)], progress=False)
            if n >= 0:
                steps.setdefault("all", []).append((time.perf_counter() - tick) * 1000)
                for step, seconds in report.timings_s.items():
                    steps.setdefault(step, []).append(seconds * 1000)
    return {step: statistics.median(ms) for step, ms in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inserts", type=int, default=400, help="inserts per row")
    parser.add_argument("--windows", default=f"0,{INSERT_WINDOW_MS:g}", help="insert windows (ms), comma-separated")
    parser.add_argument("--concurrency", default="1,8,32", help="client threads, comma-separated")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    header = results_header(__file__)
    embedder = Embedder()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        built = Path(folder) / "demo"
        with CARStore.open(built, load_policy(DEMO / "policy.toml"), embedder=embedder) as store:
            store.ingest(DEMO / "corpus.jsonl", progress=False)
            size = len(store)
        shutil.copytree(built, Path(folder) / "in-process")
        steps = in_process(Path(folder) / "in-process", embedder, min(args.inserts, 200))
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for window in (float(w) for w in args.windows.split(",")):
                copy = Path(folder) / f"run-{window}-{concurrency}"
                shutil.copytree(built, copy)
                latencies, wall, ingests = run(copy, embedder, window, concurrency, args.inserts)
                rows.append((window, concurrency, args.inserts / wall, percentiles(latencies), ingests / args.inserts))
                print(rows[-1], flush=True)
    lines = [
        f"# car-rag serve: streaming single inserts ({size}-record demo store, embedded Chroma, {args.inserts} per row)",
        "",
        f"`{header.command}`; one uvicorn worker, each insert a new patch release "
        f"(one record, voiding nothing); load average before: {header.load_text} on "
        f"{header.cpus} CPUs; commit {header.commit}",
        "",
        "| insert window ms | client threads | inserts/s | p50 ms | p95 ms | p99 ms | store ingests per insert |",
        "|---|---|---|---|---|---|---|",
        *[f"| {w:g} | {c} | {rate:.1f} | {p} | {per:.2f} |" for w, c, rate, p, per in rows],
        "",
        f"One record by `store.ingest` in process, median ms per step ({min(args.inserts, 200)} inserts): "
        + ", ".join(f"{step} {ms:.2f}" for step, ms in steps.items()),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
