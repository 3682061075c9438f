"""Can Stage 1's two channels of one query run at the same time? (bm25s / Chroma and the GIL)

    python evals/perf/concurrency.py --store .perf-stores/embedded-10000-onnx --size 10000

Opens a store built by ``run.py`` and, for the perf corpus's queries (vectors embedded
beforehand, untimed), times query by query and interleaved: the BM25 channel alone, the dense
channel alone, both one after the other (what the retriever does), and both at once (dense on
a worker thread of a pool started beforehand, BM25 on the calling thread). Running both at once
can only pay if each channel releases the GIL for most of its time; the figures say whether it
does. Writes ``<out>/concurrency-<size>.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from car_rag import CARStore
from car_rag_evals.perf.corpus import generate
from car_rag_evals.results_header import results_header

DEPTH = 50
SEED = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--size", type=int, required=True, help="the size the store was built with (for its queries)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("evals/results/perf"))
    args = parser.parse_args()
    store = CARStore.open(args.store)
    queries = [q.query for q in generate(args.size, seed=SEED, queries=args.queries).queries]
    vectors = store.embedder.encode(queries)
    pool = ThreadPoolExecutor(max_workers=1)

    def bm25(i: int) -> object:
        return store.lexical.search(queries[i], DEPTH)

    def dense(i: int) -> object:
        return store.dense.search(vectors[i], DEPTH)

    def sequential(i: int) -> object:
        return bm25(i), dense(i)

    def concurrent(i: int) -> object:
        pending = pool.submit(dense, i)
        return bm25(i), pending.result()

    ways = {
        "BM25 alone": bm25,
        "dense alone": dense,
        "both, one after the other": sequential,
        "both at once (dense on a worker thread)": concurrent,
    }
    for i in range(min(10, len(queries))):  # warm up every path
        for fn in ways.values():
            fn(i)
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for i in range(len(queries)):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate who goes first
            tick = time.perf_counter()
            ways[name](i)
            times[name].append((time.perf_counter() - tick) * 1000)
    pool.shutdown()
    store.close()
    p50 = {name: float(np.median(v)) for name, v in times.items()}
    header = results_header(__file__)
    result = {
        "size": args.size,
        "store": str(args.store),
        "dense_search": "exact (in memory)" if store.dense.exact else "Chroma HNSW",
        "lexical": store.config["bm25_backend"],
        "queries": len(queries),
        "load_1_5_15": header.load,
        "command": header.command,
        "p50_ms": p50,
        "p95_ms": {name: float(np.percentile(v, 95)) for name, v in times.items()},
        "at_once_over_one_after_the_other": p50["both at once (dense on a worker thread)"] / p50["both, one after the other"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"concurrency-{args.size}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.size:,} records, dense: {result['dense_search']}, BM25: {result['lexical']}, load {result['load_1_5_15']}")
    for name in ways:
        print(f"  {name:<42} p50 {p50[name]:7.3f} ms   p95 {result['p95_ms'][name]:7.3f} ms")
    print(f"  at once / one after the other: {result['at_once_over_one_after_the_other']:.2f}")


if __name__ == "__main__":
    main()
