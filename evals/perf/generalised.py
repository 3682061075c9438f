"""Stage 2+3 latency with the generalised rules on (issue 18): the perf corpus under
``security-advisory`` plus a release-source hierarchy (``level_then_later``, disputing
``later_patch`` where a later release comes from a lower source) and an uncertain fix rule
(confidence 0.8), so every query reads edge confidences, levels and disputes.

In memory, without a store: records into an :class:`AuthorityGraph`, then
:func:`resolve_authority` from each query's chain anchor plus nine seeded random anchors
(Stage 1's depth, untimed). Not the harness's "Stage 2+3" column, which adds fusion and
the latent-scope step.

Run:  python evals/perf/generalised.py --size 100000 --out evals/results/perf/generalised-100000.json
      (``--plain``: the built-in policy over the same records, the baseline)
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from car_rag.graph import AuthorityGraph
from car_rag.policy import load_policy
from car_rag.records import Record
from car_rag.resolution import Anchor, resolve_authority
from car_rag_evals.perf.corpus import SOURCES, generalised_policy, generate
from car_rag_evals.results_header import results_header


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plain", action="store_true", help="security-advisory as built in, the same records: the baseline")
    args = parser.parse_args()
    header = results_header(__file__)
    policy, rng = load_policy("security-advisory") if args.plain else generalised_policy(), random.Random(18)
    corpus = generate(args.size, seed=7, queries=args.queries)
    graph = AuthorityGraph(policy)
    tick = time.perf_counter()
    for raw in corpus.records:
        if rng.random() < 0.5:  # half the records name their source
            raw = {**raw, "metadata": {**raw.get("metadata", {}), "source_level": rng.choice(SOURCES)}}
        graph.add(Record.model_validate(raw))
    build_s = time.perf_counter() - tick
    ids = [r["doc_id"] for r in corpus.records]
    runs = [[*q.anchor_doc_ids, *rng.sample(ids, 9)] for q in corpus.queries]
    for anchors, q in zip(runs[:10], corpus.queries, strict=False):  # warm up
        resolve_authority(graph, policy, q.query, [Anchor(d, i) for i, d in enumerate(anchors, 1)])
    times = []
    for anchors, q in zip(runs, corpus.queries, strict=True):
        tick = time.perf_counter()
        resolve_authority(graph, policy, q.query, [Anchor(d, i) for i, d in enumerate(anchors, 1)])
        times.append((time.perf_counter() - tick) * 1000)
    times.sort()
    result = {
        "policy": policy.name,
        "size": args.size,
        "queries": len(times),
        "graph_build_s": round(build_s, 1),
        "edges": len(graph.edges()),
        "disputed_edges": len(graph.disputed_edges()),
        "stage23_ms": {"p50": times[len(times) // 2], "p99": times[min(len(times) - 1, int(len(times) * 0.99))]},
        "load_average_at_start": header.load,
        "command": header.command,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
