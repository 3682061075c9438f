"""Profiles behind the goals the scale benchmark misses: where a query's and an insert's time goes.

    python evals/perf/profiling.py --store .perf-stores/embedded-100000-onnx --size 100000 --out evals/results/perf

Writes ``profile-query-<size>.txt`` (cProfile of the whole retriever and of the LlamaIndex
hybrid over the same queries) and ``profile-insert-<size>.txt`` (cProfile of single-record
inserts, with wall-clock against CPU time of the Chroma write alone: time Chroma spends
waiting rather than computing). Run it on a store the benchmark built; it adds records.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import time
from pathlib import Path

from measure import DEPTH, K1, SEED  # the phase script beside this one

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag.channels import DenseChannel
from car_rag_evals.perf.corpus import arrivals, generate


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _profile(label: str, fn, runs: list, top: int = 30) -> str:
    profiler = cProfile.Profile()
    wall, cpu = time.perf_counter(), _cpu()
    profiler.enable()
    for item in runs:
        fn(item)
    profiler.disable()
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("cumulative").print_stats(top)
    return (
        f"== {label}: {len(runs)} calls, {1000 * wall / len(runs):.2f} ms wall and {1000 * cpu / len(runs):.2f} ms CPU "
        f"per call (under the profiler)\n{buf.getvalue()}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--out", type=Path, default=Path("evals/results/perf"))
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--inserts", type=int, default=100)
    args = parser.parse_args()
    store = CARStore.open(args.store)
    retriever = ControllingAuthorityRetriever(store, anchors="hybrid", k1=K1, depth=DEPTH)
    queries = [q.query for q in generate(args.size, seed=SEED, queries=args.queries).queries]
    for q in queries[:5]:
        retriever.retrieve(q)
    report = [_profile("car-rag whole retriever", retriever.retrieve, queries)]
    from car_rag_evals.framework_systems import llamaindex_fusion_retriever

    fusion = llamaindex_fusion_retriever(store, DEPTH)
    for q in queries[:5]:
        fusion.retrieve(q)
    report.append(_profile("LlamaIndex QueryFusionRetriever", fusion.retrieve, queries))
    floor_embed = store.embedder.encode
    report.append(_profile("query embedding alone (MiniLM)", lambda q: floor_embed([q]), queries))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"profile-query-{args.size}.txt").write_text("".join(report))

    arriving = [r for r, _ in arrivals(store, args.inserts, seed=99)]
    vectors = dict(zip([r["doc_id"] for r in arriving], store.embedder.encode([r["text"] for r in arriving])))
    inserts = _profile(
        "store.ingest, one record per call (vectors given)",
        lambda r: store.ingest([r], progress=False, embeddings={r["doc_id"]: vectors[r["doc_id"]]}),
        arriving,
    )
    # Chroma's own write, outside car-rag: wall-clock against CPU time of this process.
    probe = [(f"probe:{i}", vectors[arriving[i % len(arriving)]["doc_id"]]) for i in range(50)]
    assert isinstance(store.dense, DenseChannel)  # the scale stores keep their vectors in Chroma
    wall, cpu = time.perf_counter(), _cpu()
    for doc_id, vector in probe:
        store.dense.collection.add(ids=[doc_id], embeddings=[vector], documents=["probe"], metadatas=[{"doc_id": doc_id}])
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    store.dense.collection.delete(ids=[d for d, _ in probe])
    chroma = (
        f"== Chroma collection.add of one record, called directly: {1000 * wall / len(probe):.2f} ms wall, "
        f"{1000 * cpu / len(probe):.2f} ms CPU (all threads of this process) per call\n"
    )
    (args.out / f"profile-insert-{args.size}.txt").write_text(chroma + "\n" + inserts)
    store.close()
    print("wrote", args.out / f"profile-query-{args.size}.txt", args.out / f"profile-insert-{args.size}.txt")


if __name__ == "__main__":
    main()
