"""Where one ``--stage2 sql`` authority closure spends its time (issue 36).

For each question of the perf corpus, the closure a sql-mode worker reads for it
(:meth:`~car_rag.store.lean.LeanStore.neighbourhood`'s arguments, captured from a whole
retrieval) is read again and taken apart: PostgreSQL's own time per statement (``EXPLAIN
ANALYZE``), the client's wall time for the statement as the worker sends it (PostgreSQL, transfer
and psycopg's rows), then each
decoding step on the rows read: ``json.loads`` of the bodies, ``Record`` validation
(:func:`~car_rag.record_log.parse_stored`, which parses and validates in one call) and the
graph load (:meth:`~car_rag.graph.AuthorityGraph.load_edges`). Medians per closure and per
record. The store is ``stage2_sql_perf.py``'s (built there first); one command, from the
repository root::

    python evals/scale_out/closure_profile.py --work .perf-stores/stage2-sql

``--closures-of 1000000``: the same questions' seeds (captured at 100k), their closures read from
the 1M copies ``stage2_1m.py`` makes beside the store (copy 0 is the 100k store, a named package
reaches every fourth copy).

Results: ``evals/results/scale-out/closure-profile.md`` and ``.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from car_rag import ControllingAuthorityRetriever  # noqa: E402
from car_rag.graph import AuthorityGraph, Edge  # noqa: E402
from car_rag.postgres import PostgresRecordLog  # noqa: E402
from car_rag.postgres.closure import ClosureQuery  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag.record_log import parse_stored  # noqa: E402
from car_rag.store.lean import LeanStore  # noqa: E402
from car_rag_evals.results_header import header_line, load_text, results_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("server_ms", "round_trip_ms", "json_ms", "validate_ms", "graph_ms", "closure_ms")


def captured(store: LeanStore, questions: list[str]) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """The closure arguments (seed ids, scope values) of each question's retrieval."""
    seen: list[tuple[list[str], list[tuple[str, str]]]] = []
    graph = store.closure.graph

    def keep(conn: Any, doc_ids: Any, values: Any) -> AuthorityGraph:
        seen.append((list(doc_ids), sorted(values)))
        return graph(conn, doc_ids, values)

    store.closure.graph = keep  # type: ignore[method-assign]
    retriever = ControllingAuthorityRetriever(store)
    for q in questions:
        retriever.retrieve(q)
    store.closure.graph = graph  # type: ignore[method-assign]
    return seen


def timed(step: Callable[[], Any]) -> tuple[float, Any]:
    tick = time.perf_counter()
    out = step()
    return (time.perf_counter() - tick) * 1000, out


def reuse(closure: ClosureQuery, conn: Any, seeds: list[tuple[list[str], list[tuple[str, str]]]]) -> dict[str, int]:
    """Over one pass of the closures: records read and distinct ones, what a worker's cache of
    parsed records could at best have saved parsing on questions that are all different."""
    read, distinct = 0, set[str]()
    for ids, values in seeds:
        graph = closure.graph(conn, ids, values)
        read += len(graph.records)
        distinct.update(graph.records)
    return {"read": read, "distinct": len(distinct)}


def profile(closure: ClosureQuery, conn: Any, ids: list[str], values: list[tuple[str, str]]) -> dict[str, float]:
    """One closure taken apart (milliseconds, and its record count)."""
    params = {"ids": ids, "keys": [k for k, _ in values], "values": [v for _, v in values]}
    with conn.transaction():
        plan = conn.execute(closure.log._sql("EXPLAIN (ANALYZE, FORMAT JSON) ") + closure.statement, params).fetchone()[0][0]
    server = plan["Planning Time"] + plan["Execution Time"]

    def read() -> list[Any]:
        with conn.transaction():
            return conn.execute(closure.statement, params).fetchall()

    round_trip, rows = timed(read)
    bodies = [row[3] for row in rows if row[0] == 0]
    edges, disputed = ([Edge(*row[4:]) for row in rows if row[0] == part] for part in (1, 2))
    json_ms, _ = timed(lambda: [json.loads(body) for body in bodies])
    validate_ms, records = timed(lambda: [parse_stored(body, closure.log.location) for body in bodies])

    def load() -> None:
        AuthorityGraph(closure.policy).load_edges(records, edges, disputed)

    graph_ms, _ = timed(load)
    closure_ms, _ = timed(lambda: closure.graph(conn, ids, values))
    return {
        "records": len(bodies),
        "body_bytes": sum(map(len, bodies)),
        "server_ms": server,
        "round_trip_ms": round_trip,
        "json_ms": json_ms,
        "validate_ms": validate_ms,
        "graph_ms": graph_ms,
        "closure_ms": closure_ms,
    }


def write_md(results: dict[str, Any], path: Path) -> None:
    m, per = results["median"], results["per_record_us"]
    lines = [
        f"# Where a `--stage2 sql` closure spends its time, {results['records']:,} records (issue 36)",
        "",
        f"{header_line(results)}; load average {load_text(results['load'])} at the end. PostgreSQL "
        "(`car_rag.postgres.fixture`) on loopback on the same machine. The closures of the perf corpus's "
        f"{results['questions']} questions as a sql-mode worker reads them (seeds captured from whole retrievals), "
        f"each read {results['passes']} times; medians over all reads. Records per closure: median {m['records']:.0f}, "
        f"body {m['body_bytes'] / max(m['records'], 1):.0f} "
        "bytes per record.",
        "",
        "| step | median ms per closure | µs per record (median of each closure's) |",
        "| --- | --- | --- |",
    ]
    names = {
        "server_ms": "PostgreSQL's own time (EXPLAIN ANALYZE: planning + execution)",
        "round_trip_ms": "the statement, client wall (PostgreSQL + transfer + psycopg rows)",
        "json_ms": "`json.loads` of the bodies alone",
        "validate_ms": "`parse_stored` (parse + `Record` validation, what the worker runs)",
        "graph_ms": "`AuthorityGraph.load_edges` on the parsed records",
        "closure_ms": "the whole `ClosureQuery.graph` (what a query pays)",
    }
    for step in STEPS:
        lines.append(f"| {names[step]} | {m[step]:.2f} | {per[step]:.1f} |")
    r = results["reuse"]
    lines += [
        "",
        f"One pass over the {results['questions']} closures: {r['read']:,} records read, {r['distinct']:,} distinct "
        f"({r['distinct'] / r['read']:.0%}): a worker's cache of parsed records would parse at least that share "
        "again on questions that are all different.",
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=ROOT / ".perf-stores" / "stage2-sql")
    parser.add_argument("--size", type=int, default=100_000, help="the store's size (its schema perf_<size>)")
    parser.add_argument(
        "--closures-of", type=int, help="read the closures from this store instead (schema perf_<n>: copies, stage2_1m.py)"
    )
    parser.add_argument("--url", help="a running server holding the store (default: start one in --work/pg)")
    parser.add_argument("--passes", type=int, default=3, help="reads of each closure")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "scale-out")
    parser.add_argument("--name", default="closure-profile", help="the results' file name (.md, .json) under --out")
    args = parser.parse_args()
    questions = json.loads((args.work / "questions.json").read_text())
    rows: list[dict[str, float]] = []
    with ExitStack() as stack:
        url = args.url or stack.enter_context(throwaway_postgres(args.work / "pg")).url
        store = stack.enter_context(LeanStore.open(url, f"perf_{args.size}", follow=False))
        seeds = captured(store, questions)
        closure = store.closure
        if args.closures_of:  # the questions' seeds (the copies' first copy is the store), another store's closures
            closure = ClosureQuery(PostgresRecordLog(url, f"perf_{args.closures_of}"), store.policy)
        with closure.log.connect(autocommit=False, role="profile") as conn:
            reused = reuse(closure, conn, seeds)
            for _ in range(args.passes):
                rows += [profile(closure, conn, ids, values) for ids, values in seeds]
    median = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    per_record = {k: float(np.median([r[k] / r["records"] * 1000 for r in rows if r["records"]])) for k in STEPS}
    header = results_header(__file__)
    results = {
        **header.fields(),
        "load": header.load,
        "records": args.closures_of or len(store),
        "questions": len(questions),
        "passes": args.passes,
        "median": median,
        "reuse": reused,
        "per_record_us": per_record,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_md(results, args.out / f"{args.name}.md")
    print((args.out / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
