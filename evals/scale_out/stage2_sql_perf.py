"""``--stage2 sql`` against the graph in memory at 100k records: latency, memory, start, feed (issue 36).

The perf corpus (:mod:`car_rag_evals.perf.corpus`, seed 7, gist vectors: nothing embedded per
record) in a store on PostgreSQL with pgvector (``car_rag.postgres.fixture``'s server in
``--work``), then, in fresh processes one at a time, a worker of each mode
(:func:`~car_rag.store.lean.open_for_queries` with ``stage2="memory"`` and ``"sql"``, the
defaults of ``ControllingAuthorityRetriever``: hybrid anchors, latent scope, k1 10, depth 50;
``gc.freeze()`` after loading, as ``car-rag serve`` does): its start (open, model), its RSS and
peak RSS, and the whole retriever's latency over the corpus's questions, ``--rounds`` times
alternating the modes; every answer of the first pass compared between the modes
(:func:`~car_rag_evals.stage2_sql.answer_of`). Then the change feed of a sql-mode worker: this
process commits single inserts, the worker applies them to BM25 and the vocabulary (its feed's
own delay, from each row's ``committed_at``); Stage 2 and the dense channel read the commit at
the next query by construction. One command, from the repository root::

    python evals/scale_out/stage2_sql_perf.py --reuse

Results: ``evals/results/scale-out/stage2-sql.md`` and ``.json``. ``--modes`` adds ``sql-mapped``:
a sql worker whose BM25 is memory-mapped from ``--work``/bm25 (``bm25_folder``, built there by
its first worker, mapped by the next), its RSS split into anonymous memory (the heap) and mapped
files; ``--name`` names the results. ``--heap`` adds, after the timed rounds, one more worker of
each mode under ``tracemalloc``: the Python heap it holds when ready (after a collection) and its
largest parts by source file; kept apart from the timed workers, which tracing slows.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from car_rag import CARStore, ControllingAuthorityRetriever, load_policy  # noqa: E402
from car_rag.postgres import PostgresRecordLog  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag.store.lean import LeanStore, open_for_queries  # noqa: E402
from car_rag_evals.perf.corpus import arrivals, generate, gist_vectors  # noqa: E402
from car_rag_evals.perf.stats import percentiles, proc_status_mb  # noqa: E402
from car_rag_evals.results_header import header_line, load_text, results_header  # noqa: E402
from car_rag_evals.stage2_sql import answer_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEED = 7
INSERTS = 100
MODES = ("memory", "sql", "sql-mapped")


def build(url: str, schema: str, size: int, work: Path, reuse: bool) -> dict[str, Any]:
    """The perf corpus in the store ``schema`` (kept when ``reuse`` finds it there, with any earlier run's inserts)."""
    log = PostgresRecordLog(url, schema)
    config = log.setup(None)
    with log.connect() as conn:
        held = conn.execute(log._sql("SELECT count(*) FROM {records}")).fetchone()[0] if config else 0
    corpus = generate(size, seed=SEED)
    (work / "questions.json").write_text(json.dumps([q.query for q in corpus.queries]))
    if reuse and held >= size:  # a feed phase adds its inserts
        tick = time.perf_counter()
        built = _index(log, config) if config is not None else False
        log.close()
        return {"records": held, "reused": True, **({"index_s": time.perf_counter() - tick} if built else {})}
    if config is not None:
        with log.connect() as conn:  # an earlier build cut off
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    tick = time.perf_counter()
    with CARStore.open(
        work / "writer", load_policy("security-advisory"), authority_url=url, authority_schema=schema, vector_store="pgvector"
    ) as store:
        cache = work / f"gist-{size}-{SEED}.npy"
        if not cache.is_file():
            np.save(cache, gist_vectors(corpus, store.embedder, seed=SEED))
        vectors = np.load(cache)
        # A bulk load: the HNSW index built once at the end (inserting into it row by row took
        # over an hour for 100k records on 2 shared cores), with the store's own settings.
        with log.connect() as conn:
            conn.execute(f"DROP INDEX {schema}.records_embedding")
        for start in range(0, size, 10_000):
            chunk = corpus.records[start : start + 10_000]
            given = {r["doc_id"]: vectors[start + i] for i, r in enumerate(chunk)}
            assert not store.ingest(chunk, progress=False, embeddings=given).errors
        loaded = time.perf_counter()
        _index(log, store.config)
    log.close()
    done = time.perf_counter()
    return {"records": size, "reused": False, "load_s": loaded - tick, "index_s": done - loaded}


def _index(log: PostgresRecordLog, config: dict[str, Any]) -> bool:
    """Build the store's HNSW index (its own settings) where it is missing; whether it was."""
    schema, hnsw = log.schema, config["hnsw"]
    with log.connect() as conn:
        held = "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = 'records_embedding'"
        if conn.execute(held, (schema,)).fetchone():
            return False
        conn.execute("SET statement_timeout = 0")
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute(
            f"CREATE INDEX records_embedding ON {schema}.records USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {int(hnsw['max_neighbors'])}, ef_construction = {int(hnsw['ef_construction'])})"
        )
    return True


# --------------------------------------------------------------------------- a worker (child process)


def child_worker(args: argparse.Namespace) -> dict[str, Any]:
    questions = json.loads((args.work / "questions.json").read_text())
    bm25_folder = args.work / "bm25" if args.child == "sql-mapped" else None
    built = bm25_folder is not None and (bm25_folder / "current").exists()
    if args.traced:
        tracemalloc.start()
    tick = time.perf_counter()
    store = open_for_queries(
        args.work / f"worker-{args.child}",
        stage2=args.child.removesuffix("-mapped"),
        authority_url=args.url,
        authority_schema=args.schema,
        follow=False,
        bm25_folder=bm25_folder,
    )
    opened = time.perf_counter()
    rss_open = proc_status_mb("VmRSS")
    retriever = ControllingAuthorityRetriever(store)
    ready = time.perf_counter()
    if args.traced:
        return {"mode": args.child, "records": len(store), **heap_when_ready(), "bm25_mapped_from_an_earlier_worker": built}
    gc.freeze()
    rss_ready = proc_status_mb("VmRSS")
    anon_ready, file_ready = proc_status_mb("RssAnon"), proc_status_mb("RssFile")
    answers = [answer_of(retriever.retrieve(q)) for q in questions]  # the first pass: answers, and warm
    times, closure, closure_ms, sql_ms = [], [], [], []
    for _ in range(args.passes):
        for q in questions:
            started = time.perf_counter()
            retriever.retrieve(q)
            times.append((time.perf_counter() - started) * 1000)
            if isinstance(store, LeanStore) and store.closure.last is not None:
                read = store.closure.last
                closure.append(read.records)
                closure_ms.append((read.sql_s + read.decode_s) * 1000)
                sql_ms.append(read.sql_s * 1000)
    (args.work / f"answers-{args.child}.json").write_text(json.dumps(answers))
    out = {
        "mode": args.child,
        "class": type(store).__name__,
        "records": len(store),
        "open_s": opened - tick,
        "start_s": ready - tick,
        "rss_open_mb": rss_open,
        "rss_ready_mb": rss_ready,
        "rss_end_mb": proc_status_mb("VmRSS"),
        "anon_ready_mb": anon_ready,
        "file_ready_mb": file_ready,
        "anon_end_mb": proc_status_mb("RssAnon"),
        "file_end_mb": proc_status_mb("RssFile"),
        "peak_mb": proc_status_mb("VmHWM"),
        "bm25_mapped_from_an_earlier_worker": built,
        "latency_ms": percentiles(times),
        "load": os.getloadavg(),
    }
    if closure:
        out["closure_records"] = {"mean": float(np.mean(closure)), "max": int(max(closure))}
        out["closure_ms"], out["closure_sql_ms"] = percentiles(closure_ms), percentiles(sql_ms)
    store.close()
    return out


def heap_when_ready(parts: int = 8) -> dict[str, Any]:
    """The traced Python heap after a collection, its peak, and its largest parts by source file."""
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    by_file = tracemalloc.take_snapshot().statistics("filename")[:parts]
    root = str(ROOT) + os.sep
    return {
        "heap_ready_mb": held / 2**20,
        "heap_peak_mb": peak / 2**20,
        "heap_parts_mb": {str(s.traceback[0].filename).replace(root, ""): s.size / 2**20 for s in by_file},
    }


def child_follow(args: argparse.Namespace) -> dict[str, Any]:
    """A sql-mode worker following the store until told on stdin that the writer is done."""
    with LeanStore.open(args.url, args.schema, follow=True) as store:
        print("ready", flush=True)
        sys.stdin.readline()
        time.sleep(3)  # the last commit's NOTIFY (or the 1 s poll) reaches the feed
        assert store.feed is not None
        delays = [d * 1000 for d in store.feed.delays]
        return {"applied": len(delays), "delay_ms": percentiles(delays) if delays else None}


def _child(args: argparse.Namespace, role: str, **popen: Any) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--child", role, "--url", args.url, "--schema", args.schema]
    command += ["--work", str(args.work), "--passes", str(args.passes)] + ["--traced"] * bool(popen.pop("traced", False))
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, **popen)


def measure_feed(args: argparse.Namespace) -> dict[str, Any]:
    follower = _child(args, "follow", stdin=subprocess.PIPE)
    assert follower.stdout is not None and follower.stdin is not None
    assert follower.stdout.readline().strip() == "ready"
    with CARStore.open(args.work / "writer", authority_url=args.url, authority_schema=args.schema, follow=False) as writer:
        commits = []
        for record, _ in arrivals(writer, INSERTS, seed=int(time.time()) % 1000):
            started = time.perf_counter()
            assert not writer.ingest([record], progress=False).errors
            commits.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)
    follower.stdin.write("done\n")
    follower.stdin.flush()
    result = json.loads(follower.stdout.read())
    follower.wait()
    return {"inserts": INSERTS, "writer_ingest_ms": percentiles(commits), **result}


# --------------------------------------------------------------------------- the report


def write_md(results: dict[str, Any], path: Path) -> None:
    runs = results["workers"]
    lines = [
        f"# `--stage2 sql` against the graph in memory at {results['build']['records']:,} records (issue 36)",
        "",
        f"{header_line(results)}. PostgreSQL "
        "(`car_rag.postgres.fixture`, pgvector) on loopback on the same machine, shared with other work (load averages "
        "at each worker's end in the table). Perf corpus seed 7, gist vectors; the corpus's "
        f"{results['questions']} questions, {results['passes']} timed passes each after one untimed pass; "
        "workers are fresh processes, one at a time, modes alternating; `gc.freeze()` after loading as "
        "`car-rag serve` does.",
        "",
        "| round | mode | start s (open + model) | open s | RSS after open MB | RSS ready MB | RSS end MB "
        "(anonymous + mapped files) | peak MB | whole retriever p50 / p95 / p99 ms | closure records per query "
        "(mean, max) | closure p50 / p99 ms (of which SQL p50) | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, run in enumerate(runs):
        lat, c = run["latency_ms"], run.get("closure_records")
        closure = "–" if c is None else f"{c['mean']:.1f}, {c['max']}"
        cost = run.get("closure_ms")
        cost_cell = "–" if cost is None else f"{cost['p50']:.1f} / {cost['p99']:.1f} ({run['closure_sql_ms']['p50']:.1f})"
        split = f" ({run['anon_end_mb']:.0f} + {run['file_end_mb']:.0f})" if "anon_end_mb" in run else ""
        mode = run["mode"] + (
            " (index mapped, built by an earlier worker)" if run.get("bm25_mapped_from_an_earlier_worker") else ""
        )
        lines.append(
            f"| {n // len(results['modes']) + 1} | {mode} | {run['start_s']:.1f} | {run['open_s']:.1f} | "
            f"{run['rss_open_mb']:.0f} | {run['rss_ready_mb']:.0f} | {run['rss_end_mb']:.0f}{split} | {run['peak_mb']:.0f} | "
            f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['p99']:.1f} | "
            f"{closure} | {cost_cell} | {load_text(run['load'])} |"
        )
    for mode, same in results["same_answers"].items():
        lines += [
            "",
            f"Answers (first pass, compared whole), {mode} against memory: {same['same']} of {same['questions']} the same.",
        ]
    if results.get("heap"):
        lines += [
            "",
            "Python heap when ready (`tracemalloc`, after a collection; one more worker per mode, traced, after the "
            "timed rounds), and its largest parts by source file:",
            "",
            "| mode | heap ready MB | heap peak MB (open) | largest parts MB |",
            "| --- | --- | --- | --- |",
        ]
        for run in results["heap"]:
            parts = "; ".join(f"{name} {mb:.1f}" for name, mb in run["heap_parts_mb"].items())
            lines.append(f"| {run['mode']} | {run['heap_ready_mb']:.1f} | {run['heap_peak_mb']:.1f} | {parts} |")
    feed = results.get("feed")
    if feed:
        d, w = feed["delay_ms"], feed["writer_ingest_ms"]
        lines += [
            "",
            f"Change feed of a sql-mode worker (BM25 and scope vocabulary; Stage 2 and dense read the commit at the next "
            f"query): {feed['inserts']} single inserts 50 ms apart by another process, {feed['applied']} applied; "
            f"commit → applied p50 / p95 / p99 {d['p50']:.1f} / {d['p95']:.1f} / {d['p99']:.1f} ms (the feed's own "
            f"measure, from each row's `committed_at`); the writer's ingest p50 {w['p50']:.1f} ms.",
        ]
    path.write_text("\n".join(lines) + "\n")


def worker_results(script: str, passes: int, modes: list[str]) -> dict[str, Any]:
    """What a run's results open with (its command, commit, time and machine), workers to follow:
    this script's and ``stage2_1m.py``'s (``script``, its ``__file__``), which write_md renders alike."""
    return {**results_header(script).fields(), "passes": passes, "modes": modes, "workers": []}


def same_answers(work: Path, modes: list[str]) -> dict[str, dict[str, int]]:
    """Each mode's first-pass answers (its workers' ``answers-<mode>.json`` in ``work``) against memory's:
    how many of the questions are the same."""
    memory = json.loads((work / "answers-memory.json").read_text())
    return {
        mode: {
            "questions": len(memory),
            "same": sum(a == b for a, b in zip(memory, json.loads((work / f"answers-{mode}.json").read_text()))),
        }
        for mode in modes
        if mode != "memory"
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2, help="worker runs per mode, alternating")
    parser.add_argument("--passes", type=int, default=2, help="timed passes over the questions per worker")
    parser.add_argument("--work", type=Path, default=ROOT / ".perf-stores" / "stage2-sql")
    parser.add_argument("--reuse", action="store_true", help="keep the store under --work when it holds --size records")
    parser.add_argument("--no-feed", action="store_true", help="skip the change-feed phase")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "scale-out")
    parser.add_argument("--modes", default="memory,sql", help="worker modes per round: memory, sql, sql-mapped")
    parser.add_argument("--name", default="stage2-sql", help="the results' file name (.md, .json) under --out")
    parser.add_argument("--heap", action="store_true", help="one more worker per mode, its heap traced when ready")
    parser.add_argument("--child", choices=[*MODES, "follow"], help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_follow(args) if args.child == "follow" else child_worker(args)))
        return
    modes = args.modes.split(",")
    if "memory" not in modes or not set(modes) <= set(MODES):
        parser.error(f"--modes: memory and any of {', '.join(MODES[1:])}, got {args.modes}")
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    args.schema = f"perf_{args.size}"
    results = worker_results(__file__, args.passes, modes)
    with throwaway_postgres(args.work / "pg") as pg:
        args.url = pg.url
        print("building" if not args.reuse else "checking the store", flush=True)
        results["build"] = build(args.url, args.schema, args.size, args.work, args.reuse)
        results["questions"] = len(json.loads((args.work / "questions.json").read_text()))
        for _ in range(args.rounds):
            for mode in modes:
                print("worker", mode, flush=True)
                child = _child(args, mode)
                out, _ = child.communicate()
                assert child.returncode == 0, f"the {mode} worker failed"
                results["workers"].append(json.loads(out))
                print(json.dumps(results["workers"][-1]), flush=True)
        if args.heap:
            results["heap"] = []
            for mode in modes:
                print("traced worker", mode, flush=True)
                child = _child(args, mode, traced=True)
                out, _ = child.communicate()
                assert child.returncode == 0, f"the traced {mode} worker failed"
                results["heap"].append(json.loads(out))
                print(json.dumps(results["heap"][-1]), flush=True)
        results["same_answers"] = same_answers(args.work, modes)
        if not args.no_feed:
            print("feed", flush=True)
            results["feed"] = measure_feed(args)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_md(results, args.out / f"{args.name}.md")
    print("wrote", args.out / f"{args.name}.md")


if __name__ == "__main__":
    main()
