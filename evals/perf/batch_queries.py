"""What batching a query set buys: ``retrieve`` one query at a time against ``retrieve_many``.

    python evals/perf/batch_queries.py --store .perf-stores/embedded-10000-onnx --size 10000

Opens a store built by ``run.py`` (with its own encoder), answers the perf corpus's queries
both ways, alternating, three rounds each, and writes ``<out>/batch-<size>-<encoder>.json``
with the median seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag_evals.perf.corpus import generate
from car_rag_evals.results_header import results_header


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--size", type=int, required=True, help="the size the store was built with (for its queries)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("evals/results/perf"))
    args = parser.parse_args()
    store = CARStore.open(args.store)
    retriever = ControllingAuthorityRetriever(store)
    queries = [q.query for q in generate(args.size, seed=7, queries=args.queries).queries]
    retriever.retrieve_many(queries[:20])
    for q in queries[:20]:
        retriever.retrieve(q)
    seconds: dict[str, list[float]] = {"one at a time": [], "retrieve_many": []}
    for _ in range(3):
        tick = time.perf_counter()
        for q in queries:
            retriever.retrieve(q)
        seconds["one at a time"].append(time.perf_counter() - tick)
        tick = time.perf_counter()
        retriever.retrieve_many(queries)
        seconds["retrieve_many"].append(time.perf_counter() - tick)
    median = {way: float(np.median(s)) for way, s in seconds.items()}
    header = results_header(__file__)
    result = {
        "size": args.size,
        "encoder": store.embedder.encoder,
        "queries": len(queries),
        "median_s": median,
        "ratio": median["retrieve_many"] / median["one at a time"],
        "load_1_5_15": header.load,
        "command": header.command,
    }
    store.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"batch-{args.size}-{result['encoder']}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
