"""``--stage2 sql`` against the graph in memory on every benchmark suite (issue 36, item 3).

For each of the paper's eight suites (:data:`car_rag_evals.suites.SUITES`) the suite's store
(``--stores``, built there on first use, as ``car_rag_evals`` builds it) is copied into its own
PostgreSQL database with pgvector (records in ingest order, its vectors: nothing embedded again);
then every query of the suite is asked of that one database twice, by a retriever over a
:class:`~car_rag.store.CARStore` (graph and records in memory) and over a
:class:`~car_rag.store.lean.LeanStore` (``stage2="sql"``: each query's closure read from
PostgreSQL), and the two answers are compared whole (:func:`~car_rag_evals.stage2_sql.answer_of`:
records, statuses, roles, chains, controllers, order, posterior, links, ambiguity, anchors).
Both modes search the same pgvector store (exact search: the suites are under the exact-search
limit), so any difference is Stage 2's. Run from the repository root::

    python evals/scale_out/stage2_sql_equality.py --stores .car-stores

Results: ``evals/results/scale-out/stage2-equality.md`` and ``.json``; with ``--mapped`` the
``LeanStore``'s BM25 is memory-mapped from a folder (``bm25_folder``), results
``stage2-equality-mapped.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from car_rag import CARStore, ControllingAuthorityRetriever  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.store.lean import LeanStore  # noqa: E402
from car_rag_evals.results_header import header_line, results_header  # noqa: E402
from car_rag_evals.stage2_sql import answer_of, copy_into_postgres  # noqa: E402
from car_rag_evals.suites import SUITES, load_suite, open_suite_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def check_suite(name: str, stores: Path, url: str, work: Path, mapped: bool) -> dict[str, Any]:
    suite = load_suite(name)
    with open_suite_store(suite, stores, progress=False) as built:
        queries = load_queries(suite.queries, built.graph)
        tick = time.perf_counter()
        copy_into_postgres(built, url, work / f"{name}-writer").close()
        copied_s = time.perf_counter() - tick
    memory = CARStore.open(work / f"{name}-memory", authority_url=url, follow=False)
    lean = LeanStore.open(url, embedder=memory.embedder, follow=False, bm25_folder=work / f"{name}-bm25" if mapped else None)
    try:
        in_memory, in_sql = ControllingAuthorityRetriever(memory), ControllingAuthorityRetriever(lean)
        differing, fetched = [], []
        for query in queries:
            if answer_of(in_sql.retrieve(query.query)) != answer_of(in_memory.retrieve(query.query)):
                differing.append(query.query_id)
            assert lean.closure.last is not None
            fetched.append(lean.closure.last.records)
        return {
            "records": len(memory),
            "queries": len(queries),
            "same": len(queries) - len(differing),
            "differing": differing,
            "closure_records": {"mean": statistics.fmean(fetched), "max": max(fetched)},
            "exact_search": memory.dense.exact and lean.dense.exact,
            "copy_s": round(copied_s, 1),
        }
    finally:
        lean.close()
        memory.close()


def write_md(results: dict[str, Any], path: Path) -> None:
    lines = [
        "# `--stage2 sql` against the graph in memory, every benchmark suite (issue 36)",
        "",
        f"{header_line(results)}. Each suite's store copied into "
        "its own PostgreSQL database (pgvector, its own vectors); every query asked of it by a retriever holding "
        "the graph in memory (`CARStore`) and by one reading each query's closure from PostgreSQL (`LeanStore`, "
        f'`stage2="sql"`{", BM25 memory-mapped from a folder" if results.get("mapped") else ""}), hybrid anchors, '
        "latent scope, default settings; answers compared whole (records, "
        "statuses, roles, chains, controllers, order, scope posterior, links, ambiguity, anchors).",
        "",
        "| suite | records | queries | same answer | closure records read per query (mean, max) | exact search |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["suites"].items():
        c = r["closure_records"]
        lines.append(
            f"| {name} | {r['records']:,} | {r['queries']} | {r['same']} of {r['queries']} | "
            f"{c['mean']:.1f}, {c['max']} | {'yes' if r['exact_search'] else 'no'} |"
        )
    total = sum(r["queries"] for r in results["suites"].values())
    same = sum(r["same"] for r in results["suites"].values())
    lines += ["", f"In all: {same} of {total} queries get the same answer in both modes."]
    for name, r in results["suites"].items():
        if r["differing"]:
            lines.append(f"- {name}: differing {', '.join(r['differing'][:20])}")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", nargs="+", default=list(SUITES), choices=list(SUITES))
    parser.add_argument("--stores", type=Path, default=ROOT / ".car-stores", help="where suite stores are kept")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "scale-out")
    parser.add_argument("--mapped", action="store_true", help="the LeanStore's BM25 memory-mapped (bm25_folder)")
    args = parser.parse_args()
    name = "stage2-equality-mapped" if args.mapped else "stage2-equality"
    args.out.mkdir(parents=True, exist_ok=True)
    header = results_header(__file__)
    results: dict[str, Any] = {
        "command": header.command,
        "commit": header.commit,
        "when": header.when,
        "mapped": args.mapped,
        "suites": {},
    }
    with tempfile.TemporaryDirectory() as work, throwaway_postgres() as pg:
        for suite in args.suites:
            print(suite, flush=True)
            results["suites"][suite] = check_suite(suite, args.stores, pg.new_database(), Path(work), args.mapped)
            print(json.dumps(results["suites"][suite]), flush=True)
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_md(results, args.out / f"{name}.md")
    print("wrote", args.out / f"{name}.md")


if __name__ == "__main__":
    main()
