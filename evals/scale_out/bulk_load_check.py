"""The bulk loader against ``car-rag ingest``: the same perf corpus (default 10k records, seed 7, gist
vectors) into two stores on one PostgreSQL with pgvector, one through :meth:`CARStore.ingest`, one
through :class:`~car_rag_evals.perf.bulk_load.BulkLoader`; then every row compared (records with their
vectors and gate columns, edges, disputed claims, entity index, configuration; ``committed_at`` aside,
a clock) and both opened as a worker opens a store and asked the corpus's questions (the same
answers, record for record). Also whether per-run edges equal the whole graph's on a larger corpus.
Run from the repository root::

    python evals/scale_out/bulk_load_check.py            # ~4 min on 2 shared cores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from car_rag import CARStore, ControllingAuthorityRetriever, load_policy  # noqa: E402
from car_rag.embedding import DEFAULT_MODEL, Embedder  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag_evals.perf.bulk_load import STORED_ROWS, BulkLoader, create_store, edges_agree, stored_rows  # noqa: E402
from car_rag_evals.perf.corpus import generate, gist_vectors  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def answers(store: CARStore, questions: list[str]) -> list[list[tuple]]:
    retriever = ControllingAuthorityRetriever(store)
    return [[(r.doc_id, r.status, r.role, r.anchor_id, tuple(r.superseded_by)) for r in retriever.retrieve(q)] for q in questions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--runs-size", type=int, default=200_000, help="corpus on which per-run edges are checked")
    parser.add_argument("--work", type=Path, default=ROOT / ".perf-stores" / "bulk-check")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "scale-out" / "bulk-load-check.json")
    args = parser.parse_args()
    policy = load_policy("security-advisory")
    embedder = Embedder(DEFAULT_MODEL)
    corpus = generate(args.size)
    vectors = gist_vectors(corpus, embedder)
    questions = [q.query for q in corpus.queries]
    header = results_header(__file__)
    result: dict = {
        "command": header.command,
        "when": header.when,
        "commit": header.commit,
        "load_average": header.load,
        "size": args.size,
    }
    shutil.rmtree(args.work, ignore_errors=True)  # the stores' own folders (caches) of an earlier run
    args.work.mkdir(parents=True)
    with throwaway_postgres() as pg:
        url = pg.url
        tick = time.perf_counter()
        with CARStore.open(
            args.work / "ingested",
            policy,
            authority_url=url,
            authority_schema="ingested",
            vector_store="pgvector",
            embedder=embedder,
            follow=False,
        ) as store:
            given = {r["doc_id"]: vectors[i] for i, r in enumerate(corpus.records)}
            report = store.ingest(corpus.records, progress=False, embeddings=given)
            assert not report.errors, report.errors[:3]
        result["ingest_s"] = time.perf_counter() - tick
        tick = time.perf_counter()
        create_store(url, "loaded", policy, args.work / "loaded", embedder)
        loaded = BulkLoader(url, "loaded", policy).load(corpus.records, vectors)
        result["bulk_load_s"] = time.perf_counter() - tick
        result["bulk_load"] = loaded.__dict__
        a, b = stored_rows(url, "ingested"), stored_rows(url, "loaded")
        result["rows"] = {t: {"ingest": len(a[t]), "bulk": len(b[t]), "identical": a[t] == b[t]} for t in STORED_ROWS}
        stores = [
            CARStore.open(args.work / s, authority_url=url, authority_schema=s, embedder=embedder, follow=False)
            for s in ("ingested", "loaded")
        ]
        try:
            got = [answers(s, questions) for s in stores]
        finally:
            for s in stores:
                s.close()
        result["answers"] = {"questions": len(questions), "identical": sum(x == y for x, y in zip(*got))}
    big = generate(args.runs_size)
    result["runs_equal_graph"] = {"records": args.runs_size, "equal": edges_agree(big.records, policy)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
