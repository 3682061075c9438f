"""One phase of the scale benchmark, in a process of its own (so memory figures are its own).

    python evals/perf/measure.py build  --size N --store DIR --out FILE [--chroma-url URL] [--embed real|gist|cached]
                                        [--encoder onnx|torch]
    python evals/perf/measure.py query  --size N --store DIR --out FILE [--frameworks] [--queries Q]
    python evals/perf/measure.py stream --size N --store DIR --out FILE [--inserts M]

``build`` generates the seeded corpus (:mod:`car_rag_evals.perf.corpus`), measures raw MiniLM encode
throughput on a sample of its texts, ingests it in chunks (embedding, graph, Chroma,
records table and BM25 time from the store's own ingest report) and measures the
authority index (entity index + graph) with tracemalloc. ``query`` opens the store and
times, query by query and side by side, the floor (query embedding + a bm25s lookup),
car-rag's Stage 1, Stage 2+3 and whole retriever, and optionally the LlamaIndex and
LangChain hybrids over the same Chroma collection, each twice: with its own default MiniLM
embedding (sentence-transformers on PyTorch, as its users run it) and with the store's encoder.
The whole retriever is timed twice more beside itself: asked as of a new date each query (a
day of the corpus's span, none asked twice) and under a filter (disclosures and patch releases
only), what issue 35's ≤ 10% goal is measured by.
``stream`` inserts records into the loaded store one at a time, then in batches of 10, 100
and 1,000, with precomputed vectors (embedding excluded).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag.channels import DenseChannel
from car_rag.eligibility import RecordFilter
from car_rag.graph import AuthorityGraph
from car_rag_evals.perf.corpus import arrivals, generate, gist_vectors
from car_rag_evals.perf.stats import percentiles, proc_status_mb

POLICY = "security-advisory"
LLAMA, LANG = "LlamaIndex QueryFusionRetriever", "LangChain EnsembleRetriever"
DEPTH, K1, K = 50, 10, 5
SEED = 7
AS_OF = "car-rag whole retriever, as of a new date each query"
FILTERED = "car-rag whole retriever, with a filter (disclosures and patch releases)"
KEPT = RecordFilter(doc_types=["vulnerability_disclosure", "patch_release"])
"""The filter timed: a fixed one, as an application asks it, leaving the maintenance releases out."""
BATCH_SIZES = (1, 10, 100, 1000)
"""Records per ``store.ingest`` call in the stream phase: one at a time, then micro-batches."""


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --------------------------------------------------------------------------- build


def _vector_cache(args: argparse.Namespace) -> Path:
    """Where a real-embedding build leaves its vectors (in corpus order) for ``--embed cached``."""
    return Path(args.store).parent / f"vectors-{args.size}.npy"


def build(args: argparse.Namespace) -> dict:
    corpus = generate(args.size, seed=SEED)
    store = CARStore.open(args.store, POLICY, chroma_url=args.chroma_url, encoder=args.encoder)
    embedder = store.embedder
    embedder.encode(["warm up"])
    sample = [r["text"] for r in random.Random(SEED).sample(corpus.records, min(2000, len(corpus)))]
    tick = time.perf_counter()
    embedder.encode(sample)
    encode_rate = len(sample) / (time.perf_counter() - tick)

    vectors = None
    precompute_s = 0.0
    cached = _vector_cache(args)
    if args.embed == "gist":
        tick = time.perf_counter()
        vectors = gist_vectors(corpus, embedder, seed=SEED)
        precompute_s = time.perf_counter() - tick
    elif args.embed == "cached":
        vectors = np.load(cached)
        if len(vectors) != len(corpus):
            raise SystemExit(f"{cached} holds {len(vectors)} vectors for {len(corpus)} records")

    from tqdm.auto import tqdm

    steps: dict[str, float] = {}
    tick = time.perf_counter()
    with tqdm(total=len(corpus), desc=f"ingest {args.size:,}", unit="rec", disable=args.quiet) as bar:
        for start in range(0, len(corpus), args.chunk):
            chunk = corpus.records[start : start + args.chunk]
            given = None if vectors is None else {r["doc_id"]: vectors[start + i] for i, r in enumerate(chunk)}
            report = store.ingest(chunk, progress=False, embeddings=given)
            if report.errors:
                raise SystemExit(f"ingest rejected records: {report.errors[:3]}")
            for step, seconds in report.timings_s.items():
                steps[step] = steps.get(step, 0.0) + seconds
            bar.update(len(chunk))
    ingest_s = time.perf_counter() - tick
    peak_ingest_mb = proc_status_mb("VmHWM")
    if args.embed == "real":  # the same vectors for a later run against a Chroma server
        ids = [r["doc_id"] for r in corpus.records]
        rows = []
        assert isinstance(store.dense, DenseChannel)  # the scale stores keep their vectors in Chroma
        for start in range(0, len(ids), 5000):
            got = store.dense.collection.get(ids=ids[start : start + 5000], include=["embeddings"])
            by_id = dict(zip(got["ids"], got["embeddings"]))
            rows += [by_id[d] for d in ids[start : start + 5000]]
        np.save(cached, np.asarray(rows, dtype=np.float32))
    store.close()

    # The authority index alone: a graph rebuilt over records already in memory.
    reopened = CARStore.open(args.store)
    records = list(reopened.records.values())
    edges = reopened.graph.edges()
    tracemalloc.start()
    graph = AuthorityGraph(reopened.policy)
    graph.load_edges(records, edges)
    index_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del graph
    reopened.close()

    store_path = Path(args.store)
    return {
        "size": args.size,
        "embedding": args.embed,
        "encoder": embedder.encoder,
        "chroma": "server" if args.chroma_url else "embedded",
        "records": len(records),
        "edges": len(edges),
        "doc_types": {t: sum(r.doc_type == t for r in records) for t in sorted({r.doc_type for r in records})},
        "raw_encode_per_s": encode_rate,
        "ingest_s": ingest_s,
        "ingest_per_s": len(corpus) / ingest_s,
        "ingest_steps_s": steps,
        "precompute_vectors_s": precompute_s,
        "ingest_per_s_note": "embedding included" if args.embed == "real" else "precomputed vectors: embedding excluded",
        "authority_index_bytes": index_bytes,
        "authority_index_bytes_per_record": index_bytes / len(records),
        "peak_rss_ingest_mb": peak_ingest_mb,
        "disk_bytes": _du(store_path),
        "disk_bytes_by_part": {p.name: _du(p) if p.is_dir() else p.stat().st_size for p in store_path.iterdir()},
    }


# --------------------------------------------------------------------------- query


def _framework_doc_ids(retrieve: Callable[[str], Any], query: str) -> list[str]:
    from car_rag.eval.audit import doc_ids_of

    return doc_ids_of(retrieve(query))


def _new_days(store: CARStore) -> Iterator[str]:
    """Days of the records' span in a seeded order, none repeated before all were given: each
    query asked as of one no earlier query used (nothing cached for its date)."""
    times = [r.time for r in store.records.values() if r.time is not None]
    first = min(times).date()
    days = [(first + timedelta(days=i)).isoformat() for i in range((max(times).date() - first).days + 1)]
    random.Random(SEED).shuffle(days)
    return itertools.cycle(days)


def _systems(
    store: CARStore, retriever: ControllingAuthorityRetriever, frameworks: bool
) -> tuple[dict[str, Callable[[str], list[str]]], dict[str, dict[str, float]]]:
    from car_rag.channels import make_lexical_index

    floor_index = make_lexical_index("bm25s")
    floor_index.build(store.lexical.doc_ids, [store.records[d].text for d in store.lexical.doc_ids])
    embed = store.embedder.encode
    runs: dict[str, dict] = {}
    previous = ControllingAuthorityRetriever(store, anchors="hybrid", k1=K1, depth=DEPTH, fusion="rrf", latent_scope=False)
    days = _new_days(store)

    def stage23(q: str) -> list[str]:
        if q not in runs:  # the channels' hits, computed untimed on first use (the warm-up)
            runs[q] = retriever.channel_runs(q)
        return retriever.resolve_runs(q, runs[q]).doc_ids()

    systems: dict[str, Callable[[str], list[str]]] = {
        "floor: query embedding + bm25s": lambda q: (embed([q]), [h.doc_id for h in floor_index.search(q, DEPTH)])[1],
        "car-rag Stage 1 (hybrid)": lambda q: [h.doc_id for h in retriever.stage1(q)],
        "car-rag Stage 2+3": stage23,  # with fusion and the latent-scope step, given the channels' hits
        "car-rag whole retriever": lambda q: retriever.retrieve(q).doc_ids(),
        "car-rag whole retriever, RRF without latent scope (before)": lambda q: previous.retrieve(q).doc_ids(),
        AS_OF: lambda q: retriever.retrieve(q, as_of=next(days)).doc_ids(),
        FILTERED: lambda q: retriever.retrieve(q, filters=KEPT).doc_ids(),
    }
    memory: dict[str, dict[str, float]] = {}
    if frameworks:
        from car_rag_evals.framework_systems import langchain_ensemble_retriever, llamaindex_fusion_retriever

        encoder = {"onnx": "ONNX Runtime", "torch": "PyTorch"}[store.embedder.encoder]
        for name, make, call, embedding in (
            (
                f"{LLAMA}, its default embedding (HuggingFaceEmbedding, PyTorch)",
                llamaindex_fusion_retriever,
                "retrieve",
                "framework",
            ),
            (f"{LLAMA}, car-rag's encoder ({encoder})", llamaindex_fusion_retriever, "retrieve", "store"),
            (
                f"{LANG}, its default embedding (HuggingFaceEmbeddings, PyTorch)",
                langchain_ensemble_retriever,
                "invoke",
                "framework",
            ),
            (f"{LANG}, car-rag's encoder ({encoder})", langchain_ensemble_retriever, "invoke", "store"),
        ):
            before = proc_status_mb("VmRSS")
            tick = time.perf_counter()
            method = getattr(make(store, DEPTH, embedding), call)
            memory[name] = {"build_s": time.perf_counter() - tick, "rss_added_mb": proc_status_mb("VmRSS") - before}
            systems[name] = functools.partial(_framework_doc_ids, method)
    return systems, memory


def query(args: argparse.Namespace) -> dict:
    corpus = generate(args.size, seed=SEED, queries=args.queries)
    rss_start = proc_status_mb("VmRSS")
    tick = time.perf_counter()
    store = CARStore.open(args.store)
    open_s = time.perf_counter() - tick
    retriever = ControllingAuthorityRetriever(store, anchors="hybrid", k1=K1, depth=DEPTH)  # loads the model
    rss_open = proc_status_mb("VmRSS")
    queries = [q.query for q in corpus.queries]
    for q in queries:
        retriever.retrieve(q)
    rss_loaded = proc_status_mb("VmRSS")  # the store as a service holds it: before any comparison system is built
    systems, framework_memory = _systems(store, retriever, frameworks=False)
    for q in queries[:10]:  # warm up every path
        for fn in systems.values():
            fn(q)
    for q in queries:  # Stage-2 anchors, computed untimed
        systems["car-rag Stage 2+3"](q)
    if args.frameworks:
        more, framework_memory = _systems(store, retriever, frameworks=True)
        systems.update({k: v for k, v in more.items() if k not in systems})
        for q in queries[:5]:
            for name in framework_memory:
                systems[name](q)

    names = list(systems)
    times: dict[str, list[float]] = {n: [] for n in names}
    hits: dict[str, int] = {n: 0 for n in names}
    from tqdm.auto import tqdm

    for i, asked in enumerate(tqdm(corpus.queries, desc=f"queries {args.size:,}", disable=args.quiet)):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate who goes first
            tick = time.perf_counter()
            got = systems[name](asked.query)
            times[name].append((time.perf_counter() - tick) * 1000)
            hits[name] += bool(set(asked.gold_doc_ids) & set(got[:K]))
    store.close()
    return {
        "size": args.size,
        "chroma": "server" if store.config.get("chroma_url") else "embedded",
        "encoder": store.embedder.encoder,
        "queries": len(queries),
        "open_s": open_s,
        "rss_mb": {"process_start": rss_start, "after_open": rss_open, "loaded_and_queried": rss_loaded},
        "latency_ms": {n: percentiles(v) for n, v in times.items()},
        "gold_in_top5": {n: hits[n] / len(queries) for n in names if not n.startswith(("floor", "car-rag Stage 1"))},
        "frameworks": framework_memory,
    }


# --------------------------------------------------------------------------- stream


def stream(args: argparse.Namespace) -> dict:
    store = CARStore.open(args.store)
    retriever = ControllingAuthorityRetriever(store, anchors="hybrid", k1=K1, depth=DEPTH)
    by_size = {size: arrivals(store, args.inserts, seed=i) for i, size in enumerate(BATCH_SIZES, 1)}
    records = [r for batch in by_size.values() for r, _ in batch]
    vectors = dict(zip([r["doc_id"] for r in records], store.embedder.encode([r["text"] for r in records])))  # not timed

    def run(batches: list[list[dict]]) -> dict:
        wall: list[float] = []
        steps: dict[str, list[float]] = {}
        voided = 0
        for batch in batches:
            tick = time.perf_counter()
            report = store.ingest(batch, progress=False, embeddings={r["doc_id"]: vectors[r["doc_id"]] for r in batch})
            wall.append((time.perf_counter() - tick) * 1000 / len(batch))
            voided += len(report.newly_superseded)
            for step, seconds in report.timings_s.items():
                steps.setdefault(step, []).append(seconds * 1000 / len(batch))
        return {
            "records": sum(map(len, batches)),
            "batch_size": len(batches[0]),
            "newly_superseded": voided,
            "per_record_ms": percentiles(wall),
            "mean_per_record_ms_by_step": {s: statistics.fmean(v) for s, v in steps.items()},
        }

    by_batch = {
        str(size): run([[r for r, _ in batch[i : i + size]] for i in range(0, len(batch), size)])
        for size, batch in by_size.items()
    }
    # A query issued after the inserts: asked in the words of a disclosure a streamed fix
    # voided, it must report that disclosure superseded whenever it retrieves it.
    retrieved = superseded = 0
    for _fix, target in [(r, t) for r, t in by_size[1] if r["doc_type"] == "patch_release"][:50]:
        found = retriever.retrieve(store.records[target].text).get(target)
        if found is not None:
            retrieved += 1
            superseded += found.status == "superseded"
    store.close()
    return {
        "size": args.size,
        "by_batch_size": by_batch,
        "after_inserts": {"queries": 50, "voided_target_retrieved": retrieved, "reported_superseded": superseded},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["build", "query", "stream"])
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chroma-url")
    parser.add_argument(
        "--embed",
        choices=["real", "gist", "cached"],
        default="real",
        help="MiniLM on every text; gist vectors (car_rag_evals.perf.corpus); or the vectors a real build saved",
    )
    parser.add_argument("--encoder", choices=["onnx", "torch"], default="onnx", help="MiniLM encoder of the store built")
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--frameworks", action="store_true")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--inserts", type=int, default=1000)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    result = {"build": build, "query": query, "stream": stream}[args.phase](args)
    result["phase"] = args.phase
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
