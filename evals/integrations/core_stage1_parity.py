"""Parity of the frameworks' default retrievers (car-rag's own Stage 1 inside LlamaIndex and
LangChain) with the core retriever at the CLI's defaults, on a benchmark suite.

* core: ``ControllingAuthorityRetriever`` over a copy of the suite's benchmark store
  (``--stores``, copied into ``--work``: the original is never written), defaults (calibrated
  hybrid, latent scope, k1 10, depth 50), top 5.
* framework × store: ``CARRetriever.from_index(index, policy)`` (LlamaIndex) or
  ``CARRetriever.from_vector_store(store, policy)`` (LangChain), defaults, on the framework's
  in-memory store (``memory``) or Chroma (``chroma``), holding the core store's own vectors (or,
  with ``--embed``, vectors the framework embeds with ``CAREmbedding`` / ``CAREmbeddings``).

Per row: how many queries get the core's top 5 exactly (ids and statuses, in order), TCA@5 of
both (a gold record in the top 5), and latency: per query the median of ``--repeats`` runs of
each side, taken alternately in one process; the table gives the median over queries and the ratio.

Run:  python evals/integrations/core_stage1_parity.py --suite ghsa-freeform --framework llamaindex --store memory --embed
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from parity_support import machine, timed

from car_rag import CARStore, ControllingAuthorityRetriever, Embedder, load_records
from car_rag.queries import load_queries
from car_rag_evals.results_header import results_header
from car_rag_evals.suites import load_suite, store_path

ROOT = Path(__file__).resolve().parents[2]
K = 5


def framework_retriever(
    framework: str, store: str, records: list[Any], vectors: Any, embedder: Embedder, work: Path, policy: Any, pg: Any = None
):
    """The framework's default car-rag retriever over the records, in ``store`` (``pgvector``: LangChain's
    ``PGVectorStore`` in a database of ``pg``, a throwaway PostgreSQL)."""
    if framework == "llamaindex":
        import chromadb
        from chromadb.config import Settings
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.retrievers.car import CAREmbedding, CARRetriever, records_to_nodes
        from llama_index.vector_stores.chroma import ChromaVectorStore

        from car_rag.store import DEFAULT_HNSW

        nodes = records_to_nodes(records)
        if vectors is not None:
            for node, vector in zip(nodes, vectors):
                node.embedding = vector.tolist()
        embed_model = CAREmbedding(embedder=embedder)
        if store == "memory":
            index = VectorStoreIndex(nodes, embed_model=embed_model, show_progress=False)
        else:
            client = chromadb.PersistentClient(path=str(work / "li-chroma"), settings=Settings(anonymized_telemetry=False))
            collection = client.create_collection("parity", embedding_function=None, configuration={"hnsw": DEFAULT_HNSW})
            storage = StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection))
            index = VectorStoreIndex(nodes, storage_context=storage, embed_model=embed_model)
        retriever = CARRetriever.from_index(index, policy, k=K)
        return lambda q: [(n.node.metadata["doc_id"], n.node.metadata["car_status"]) for n in retriever.retrieve(q)]
    from langchain_car import CAREmbeddings, records_to_documents
    from langchain_car import CARRetriever as LangChainRetriever
    from langchain_core.vectorstores import InMemoryVectorStore

    docs = records_to_documents(records)
    embeddings = CAREmbeddings(embedder=embedder)
    ids = [d.metadata["doc_id"] for d in docs]
    if store == "memory":
        vs: Any = InMemoryVectorStore(embeddings)
    elif store == "pgvector":
        from langchain_postgres import Column, PGEngine, PGVectorStore

        from car_rag.postgres.fixture import sqlalchemy_url

        engine = PGEngine.from_connection_string(url=sqlalchemy_url(pg.new_database()))
        engine.init_vectorstore_table(table_name="parity", vector_size=384, id_column=Column("langchain_id", "TEXT"))
        vs = PGVectorStore.create_sync(engine=engine, table_name="parity", embedding_service=embeddings)
    else:
        from langchain_chroma import Chroma

        from car_rag.store import DEFAULT_HNSW

        vs = Chroma(
            collection_name="parity",
            embedding_function=embeddings,
            persist_directory=str(work / "lc-chroma"),
            collection_configuration={"hnsw": DEFAULT_HNSW},
        )
    if vectors is None:
        vs.add_documents(docs, ids=ids)
    elif store == "pgvector":
        for start in range(0, len(docs), 1000):
            part = slice(start, start + 1000)
            texts = [d.page_content for d in docs[part]]
            vs.add_embeddings(texts, vectors[part].tolist(), [d.metadata for d in docs[part]], ids[part])
    elif store == "memory":
        vs.store.update(
            {
                i: {"id": i, "vector": v.tolist(), "text": d.page_content, "metadata": d.metadata}
                for i, v, d in zip(ids, vectors, docs)
            }
        )
    else:
        for start in range(0, len(docs), 1000):
            part = slice(start, start + 1000)
            vs._collection.add(
                ids=ids[part],
                embeddings=vectors[part],
                documents=[d.page_content for d in docs[part]],
                metadatas=[d.metadata for d in docs[part]],
            )
    lc = LangChainRetriever.from_vector_store(vs, policy, k=K)
    return lambda q: [(d.metadata["doc_id"], d.metadata["car_status"]) for d in lc.invoke(q)]


def write_summary(out: Path) -> None:
    """``core_stage1.md``: one row per result file in ``out``."""
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("core_stage1_*.json"))]
    lines = [
        "# car-rag's own Stage 1 inside the frameworks vs the core CLI's defaults",
        "",
        "Written by `evals/integrations/core_stage1_parity.py` (each row's command below). Same top 5: queries whose",
        "top 5 (ids and statuses, in order) is the core's. Latency: per query the median of `runs` runs of each side,",
        "alternating in one process; the median over queries. Timings were taken on 2 shared cores beside other",
        "jobs (load average 8.3 when sampled at 17:23 UTC), so they vary between rows; each ratio compares two sides",
        "measured together.",
        "",
        "| suite | framework | store | vectors | same top 5 | TCA@5 core | TCA@5 framework "
        "| runs | p50 ms core | p50 ms framework | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['suite']} | {r['framework']} | {r['store']} | {r['vectors']} | {r['same_top5']}/{r['queries']} | "
            f"{r['tca5_core']:.3f} | {r['tca5_framework']:.3f} | {r['repeats']} | "
            f"{r['p50_ms_core']:.1f} | {r['p50_ms_framework']:.1f} | {r['latency_ratio']:.2f}x |"
        )
    lines += ["", "Commands and machine:", ""]
    lines += [f"- `{r['command']}` ({r['when']}; {r['machine']})" for r in rows]
    (out / "core_stage1.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--framework", choices=("llamaindex", "langchain"), required=True)
    parser.add_argument("--store", choices=("memory", "chroma", "pgvector"), default="memory", help="pgvector: LangChain only")
    parser.add_argument(
        "--embed", action="store_true", help="the framework embeds the corpus (CAREmbedding); else the store's vectors"
    )
    parser.add_argument("--stores", type=Path, default=ROOT / ".car-stores", help="the benchmark stores (copied, never written)")
    parser.add_argument(
        "--work", type=Path, default=None, help="where the store copy and Chroma go (default: a temporary folder)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "integrations")
    args = parser.parse_args()

    suite = load_suite(args.suite)
    policy = suite.policy
    records = load_records(suite.corpus).records
    queries = load_queries(suite.queries)[: args.limit]
    work = args.work or Path(tempfile.mkdtemp(prefix="car-parity-"))
    source = store_path(suite, args.stores, policy)
    copy = work / source.name
    if not copy.exists():
        shutil.copytree(source, copy)
    core_store = CARStore.open(copy)
    embedder = core_store.embedder
    core = ControllingAuthorityRetriever(core_store)
    vectors = None
    if not args.embed:
        import numpy as np

        saved = np.load(copy / "dense-exact.npz")
        position = {d: i for i, d in enumerate(saved["ids"].tolist())}
        vectors = saved["vectors"][[position[r.doc_id] for r in records]]
    print(f"{args.suite}: {len(records)} records, {len(queries)} queries; building {args.framework} {args.store}", flush=True)
    with ExitStack() as stack:
        pg = None
        if args.store == "pgvector":
            if args.framework != "langchain":
                sys.exit("--store pgvector: LangChain's PGVectorStore only")
            from car_rag.postgres.fixture import throwaway_postgres

            pg = stack.enter_context(throwaway_postgres())
        framework = framework_retriever(args.framework, args.store, records, vectors, embedder, work, policy, pg)
        row = compare(args, framework, core, queries)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"core_stage1_{args.suite}_{args.framework}_{args.store}{'_embedded' if args.embed else ''}.json"
    (args.out / name).write_text(json.dumps(row, indent=1) + "\n")
    write_summary(args.out)
    core_store.close()
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


def compare(args: argparse.Namespace, framework: Any, core: ControllingAuthorityRetriever, queries: list[Any]) -> dict[str, Any]:
    """Both sides on every query, alternately: the row of the results table."""

    same, tca_core, tca_fw, core_ms, fw_ms, differ = 0, 0, 0, [], [], []
    for n, query in enumerate(queries):
        c_times, f_times = [], []
        for _ in range(args.repeats):
            ours, ms = timed(framework, query.query)
            f_times.append(ms)
            result, ms = timed(core.retrieve, query.query)
            c_times.append(ms)
        theirs = [(r.doc_id, r.status) for r in result][:K]
        core_ms.append(statistics.median(c_times))
        fw_ms.append(statistics.median(f_times))
        same += ours == theirs
        if ours != theirs:
            differ.append({"query_id": query.query_id, "core": theirs, "framework": ours})
        gold = set(query.gold_doc_ids)
        tca_core += bool(gold & {d for d, _ in theirs})
        tca_fw += bool(gold & {d for d, _ in ours})
        if (n + 1) % 50 == 0:
            print(f"  {n + 1}/{len(queries)}: same top 5 on {same}", flush=True)
    total = len(queries)
    header = results_header(__file__)
    row: dict[str, Any] = {
        "suite": args.suite,
        "framework": args.framework,
        "store": args.store,
        "vectors": "framework-embedded (CAREmbedding)" if args.embed else "the core store's",
        "queries": total,
        "repeats": args.repeats,
        "same_top5": same,
        "tca5_core": tca_core / total,
        "tca5_framework": tca_fw / total,
        "p50_ms_core": statistics.median(core_ms),
        "p50_ms_framework": statistics.median(fw_ms),
        "latency_ratio": statistics.median(fw_ms) / statistics.median(core_ms),
        "differ": differ,
        "machine": machine(),
        "when": header.when,
        "command": header.command,
    }
    print(json.dumps({k: v for k, v in row.items() if k != "differ"}, indent=1))
    return row


if __name__ == "__main__":
    main()
