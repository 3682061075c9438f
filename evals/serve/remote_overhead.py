"""What a remote retriever costs (a command, not a timed test): the same questions answered in
process (``ControllingAuthorityRetriever.retrieve``) and through a `car-rag serve` on loopback by
``car_rag.client.CARServiceClient.retrieve`` and the frameworks' ``CARServiceRetriever``
(LlamaIndex ``retrieve``, LangChain ``invoke``), one request at a time; and whether each remote
ranking equals the in-process one (doc ids and statuses of the top k). Writes a Markdown table.

    python evals/serve/remote_overhead.py --out evals/results/serve/remote-overhead-demo.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from langchain_car import CARServiceRetriever as LangChainServiceRetriever  # noqa: E402
from llama_index.retrievers.car import CARServiceRetriever as LlamaIndexServiceRetriever  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CARStore, ControllingAuthorityRetriever, load_policy  # noqa: E402
from car_rag.client import CARServiceClient  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.serve.service import Service  # noqa: E402
from car_rag_evals.servers import serving  # noqa: E402

DEMO = Path(car_rag.__file__).parent / "data" / "demo"


def _timed(run: Callable[[str], list[tuple[str, str]]], asked: list[str]) -> tuple[list[float], dict[str, list[tuple[str, str]]]]:
    ms, rankings = [], {}
    for question in asked:
        tick = time.perf_counter()
        rankings[question] = run(question)
        ms.append((time.perf_counter() - tick) * 1000)
    return ms, rankings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=Path, default=DEMO / "queries.jsonl", help="JSONL questions (query_id, query)")
    parser.add_argument("--requests", type=int, default=200, help="requests per path")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    questions = [q.query for q in load_queries(args.queries)]
    asked = [questions[i % len(questions)] for i in range(args.requests)]
    k = args.k
    with tempfile.TemporaryDirectory() as folder:
        with CARStore.open(Path(folder), load_policy(DEMO / "policy.toml")) as store:
            store.ingest(DEMO / "corpus.jsonl", progress=False)
            core = ControllingAuthorityRetriever(store)
            with serving(Service(store, timeout_ms=30_000)) as url:
                client = CARServiceClient(url)
                llama = LlamaIndexServiceRetriever(url, k=k)
                chain = LangChainServiceRetriever(url=url, k=k)
                paths: dict[str, Callable[[str], list[tuple[str, str]]]] = {
                    "in process (ControllingAuthorityRetriever)": lambda q: [
                        (r.doc_id, r.status) for r in core.retrieve(q).top(k)
                    ],
                    "CARServiceClient.retrieve": lambda q: [
                        (s.record.doc_id, s.annotations["car_status"]) for s in client.retrieve(q, k)
                    ],
                    "LlamaIndex CARServiceRetriever": lambda q: [
                        (n.node.node_id, n.node.metadata["car_status"]) for n in llama.retrieve(q)
                    ],
                    "LangChain CARServiceRetriever": lambda q: [(str(d.id), d.metadata["car_status"]) for d in chain.invoke(q)],
                }
                for run in paths.values():  # warm up: the model, connections
                    for q in questions:
                        run(q)
                measured = {name: _timed(run, asked) for name, run in paths.items()}
    _, expected = measured["in process (ControllingAuthorityRetriever)"]
    lines = [
        f"# Remote retriever: latency and agreement ({len(asked)} requests per path, k={k}, one at a time)",
        "",
        f"`python evals/serve/remote_overhead.py --requests {args.requests} --k {k} --out {args.out}`; the packaged demo "
        f"corpus (hybrid anchors), `car-rag serve` in a thread of this process on loopback, load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| path | p50 ms | p95 ms | rankings equal to in process |",
        "|---|---:|---:|---:|",
    ]
    for name, (ms, rankings) in measured.items():
        ms.sort()
        same = sum(rankings[q] == expected[q] for q in questions)
        lines.append(f"| {name} | {statistics.median(ms):.1f} | {ms[int(0.95 * (len(ms) - 1))]:.1f} | {same}/{len(questions)} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
