"""as_of equals a rebuild (issue 35), on the benchmark suites: for each suite's store and 5
dates (the 10th, 30th, 50th, 70th and 90th percentiles of its records' dates), the store's
answer ``retrieve(q, as_of=date)`` must equal, field for field (ranking, statuses, edges,
Stage-1 scores, scope posterior, ambiguity; not the timings), the answer of a store rebuilt
from only the records dated up to it. An answer is *identical* when every field is; *equal* when
every field but a score is, and every score is within a relative 1e-6 of the rebuilt store's:
the dense dot products are float32 sums whose last bit may differ with the size of the matrix
they are read from (the live store holds more rows), so a fused score can move in its 8th digit
while no rank, status or edge does. An answer that is not equal is replayed: the live store's
channel runs through the rebuilt store's graph and Stages 2-3; if that is identical, the two
differ only in the order the dense channel gave records whose scores are 1 ulp apart. Exits 1 if
any answer differs otherwise.

The rebuilt store is held in memory (``car_rag_evals.memory_store``): the same policy, the
records that existed (undated ones included) in the store's order, a BM25 index of the store's
backend built over them, and the store's own vectors for exact dense search, so neither side
embeds a record again. Both run the same retriever (defaults) over the same ``--queries``
questions per suite (spread evenly over its query set), embedded once.

    python evals/asof_rebuild.py --stores .car-stores --mirrors ../main/evals/mirrors --out evals/results/asof

Stores are opened where they are and only read (no ingest). Writes ``rebuild.md`` (per suite
and date: records that existed, queries, equal answers) and ``rebuild.json`` (the same, with
the first difference of any answer that is not identical).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from car_rag.eligibility import as_of_label, instant
from car_rag.graph import exists_at
from car_rag.queries import load_queries
from car_rag.resolution import RetrievalResult
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CONFIG_FILE, CARStore
from car_rag_evals.memory_store import MemoryStore
from car_rag_evals.results_header import results_header
from car_rag_evals.suites import DEV_SUITES, SUITES, load_suite, store_path

PERCENTILES = (10, 30, 50, 70, 90)


def answer(result: RetrievalResult) -> dict[str, Any]:
    """A result as compared: all it says but its timings and the date it was asked as of."""
    out = result.to_dict()
    out.pop("timings_ms")
    out.pop("as_of", None)
    return out


SCORE_TOLERANCE = 1e-6


def close(a: Any, b: Any) -> bool:
    """Equal, but floats within :data:`SCORE_TOLERANCE` of each other (relative)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=SCORE_TOLERANCE, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return bool(a == b)


def first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {json.dumps(a, default=str)[:200]} against {json.dumps(b, default=str)[:200]}"


UNDATED_SUITE_DATES = (date(2000, 1, 1), date(2010, 1, 1), date(2020, 1, 1), date(2025, 1, 1), date(2030, 1, 1))
"""Where no record has a date, every record exists at every date: these dates check that."""


def dates_of(store: CARStore) -> list[date]:
    """The suite's dates: percentiles of its records' dates (days)."""
    days = sorted(r.time.date() for r in store.records.values() if r.time is not None)
    if not days:
        return list(UNDATED_SUITE_DATES)
    return sorted({days[min(len(days) - 1, len(days) * p // 100)] for p in PERCENTILES})


def check_suite(name: str, stores: Path, per_suite: int, mirrors: Path | None = None) -> list[dict[str, Any]]:
    suite = load_suite(name, mirrors_dir=mirrors)
    path = store_path(suite, stores)
    if not (path / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{name}: no store at {path} (build it with `car-rag bench --stores {stores}` first)")
    queries = load_queries(suite.queries)
    chosen = [queries[i * len(queries) // per_suite] for i in range(min(per_suite, len(queries)))]
    texts = [q.query for q in chosen]
    rows_out = []
    with CARStore.open(path, follow=False) as store:
        held = store.dense.held()
        if held is None:
            raise RuntimeError(f"{name}: the store's vectors are not searched exactly (over the exact-search limit)")
        rows = dict(zip(held[0], held[1]))
        order = [store.records[d] for d in store.lexical.doc_ids]
        live = ControllingAuthorityRetriever(store)
        vectors = store.embedder.encode(texts)
        for day in dates_of(store):
            when = instant(day)
            tick = time.perf_counter()
            existed = [r for r in order if exists_at(r, when)]
            rebuilt = MemoryStore(
                store.policy, existed, embedder=store.embedder, rows=rows, bm25_backend=store.config["bm25_backend"]
            )
            again = ControllingAuthorityRetriever(rebuilt)  # type: ignore[arg-type]  # what a retriever reads of a store
            differences: list[dict[str, str]] = []
            rounded: list[dict[str, str]] = []
            tie_order: list[dict[str, str]] = []
            identical = 0
            for query, vector in zip(chosen, vectors):
                asked = answer(live._retrieve(query.query, vector, None, time.perf_counter(), when))
                fresh = answer(again._retrieve(query.query, vector, None, time.perf_counter()))
                if asked == fresh:
                    identical += 1
                    continue
                found = {"query_id": query.query_id, "first_difference": first_difference(asked, fresh)}
                if close(asked, fresh):
                    rounded.append(found)
                    continue
                # The live store's own channel runs through the rebuilt store's graph and Stages 2-3:
                # equal, the answers differ only in the order of near-tied dense hits.
                runs = live.channel_runs(query.query, as_of=when)
                replayed = answer(again.resolve_runs(query.query, runs))
                (tie_order if replayed == answer(live.resolve_runs(query.query, runs, as_of=when)) else differences).append(found)
            rows_out.append(
                {
                    "suite": name,
                    "as_of": as_of_label(when),
                    "records": len(existed),
                    "of": len(order),
                    "queries": len(chosen),
                    "identical": identical,
                    "equal": identical + len(rounded),
                    "dense_tie_order": len(tie_order),
                    "score_rounding": rounded,
                    "tie_order": tie_order,
                    "differences": differences,
                    "seconds": round(time.perf_counter() - tick, 1),
                }
            )
            print(
                f"{name} as of {day}: {len(existed)}/{len(order)} records, {identical} identical, "
                f"{rows_out[-1]['equal']}/{len(chosen)} equal, {len(tie_order)} dense tie order, {len(differences)} different",
                flush=True,
            )
    return rows_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=Path, default=Path(".car-stores"), help="the suites' stores (read only)")
    parser.add_argument("--out", type=Path, default=Path("evals/results/asof"))
    parser.add_argument("--suites", default=",".join(SUITES + DEV_SUITES), help="comma-separated (default: every suite)")
    parser.add_argument("--queries", type=int, default=20, help="questions per suite, spread over its query set")
    parser.add_argument("--mirrors", type=Path, help="where evals/mirror_suites.py wrote the mirrors (default: evals/mirrors)")
    args = parser.parse_args(argv)
    results = [row for name in args.suites.split(",") for row in check_suite(name, args.stores, args.queries, args.mirrors)]
    args.out.mkdir(parents=True, exist_ok=True)
    command = results_header(__file__, argv).command
    (args.out / "rebuild.json").write_text(json.dumps({"command": command, "results": results}, indent=2) + "\n")
    lines = [
        "# as_of equals a store rebuilt from the records of that date",
        "",
        f"`{command}`: each suite's store asked `as_of` each date against a store rebuilt in memory from the records",
        "dated up to it (same policy, same vectors, a BM25 index of the same backend), default retriever,",
        "every field of the answer but its timings compared: *identical* (every field), *equal* (every field, scores",
        f"within a relative {SCORE_TOLERANCE:g}: float32 dot products may differ in their last bit with the matrix size).",
        "",
        "Undated records exist at every date; a suite with no dated record is checked at "
        + ", ".join(d.isoformat() for d in UNDATED_SUITE_DATES)
        + ".",
        "",
        "*dense tie order*: not equal, but the live store's own channel runs replayed through the rebuilt store's",
        "graph and Stages 2-3 give the identical answer: the dense channel ranked near-tied records (scores 1 ulp",
        "apart, float32 dot products over matrices of different sizes) in another order. *different*: any other.",
        "",
        "| suite | as of | records that existed | queries | identical | equal | dense tie order | different |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['suite']} | {r['as_of']} | {r['records']} / {r['of']} | {r['queries']} | {r['identical']} | {r['equal']} "
            f"| {r['dense_tie_order']} | {len(r['differences'])} |"
            for r in results
        ),
        "",
        f"**{sum(r['equal'] for r in results)} of {sum(r['queries'] for r in results)} answers equal** "
        f"({sum(r['identical'] for r in results)} identical), {sum(r['dense_tie_order'] for r in results)} differ in "
        f"dense tie order only, {sum(len(r['differences']) for r in results)} otherwise, over "
        f"{len({r['suite'] for r in results})} suites.",
    ]
    (args.out / "rebuild.md").write_text("\n".join(lines) + "\n")
    return 0 if not any(r["differences"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
