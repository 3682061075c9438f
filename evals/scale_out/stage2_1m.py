"""``--stage2 sql`` against the graph in memory at 1M records (issue 36's goal: the whole retriever's
p50 at most 2x the in-memory mode's at 1M).

The store: ``--copies`` copies of ``stage2_sql_perf.py``'s 100k store, made beside it in the same
server (:func:`car_rag_evals.perf.copies.copy_store`: ids tagged per copy, a package named by a
question holding the records of every fourth copy, fresh vector noise per copy; the source's
indexes, HNSW included). Then ``stage2_sql_perf.py``'s workers over it (fresh processes, modes
alternating, ``--rounds`` each), asking the 100k corpus's questions (their packages are the
copies' packages), every answer of the first pass compared between the modes. One command, from
the repository root, after ``stage2_sql_perf.py --work DIR`` has built the 100k store in DIR::

    python evals/scale_out/stage2_1m.py --work .perf-stores/stage2-sql --reuse

Results: ``evals/results/scale-out/stage2-1m.md`` and ``.json``. ``--modes memory,sql,sql-mapped`` adds a
sql worker whose BM25 is memory-mapped from the copies' folder (``bm25``, built there by its first worker).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import stage2_sql_perf as perf  # noqa: E402  (beside this script)

from car_rag.postgres import PostgresRecordLog  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag_evals.perf.copies import copy_store  # noqa: E402

SOURCE = 100_000


def held(url: str, schema: str) -> int:
    """The records ``schema`` holds under its HNSW index (0: no store there, or its indexes not all made)."""
    log = PostgresRecordLog(url, schema)
    try:
        with log.connect() as conn:
            made = "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = 'records_embedding'"
            if conn.execute(made, (schema,)).fetchone():
                return int(conn.execute(log._sql("SELECT count(*) FROM {records}")).fetchone()[0])
            return 0
    finally:
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=perf.ROOT / ".perf-stores" / "stage2-sql")
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--reuse", action="store_true", help="keep the copies when the store holds as many records")
    parser.add_argument("--rounds", type=int, default=1, help="worker runs per mode, alternating")
    parser.add_argument("--passes", type=int, default=2, help="timed passes over the questions per worker")
    parser.add_argument(
        "--modes", default="memory,sql", help="worker modes, comma-separated (memory first): memory, sql, sql-mapped"
    )
    parser.add_argument("--out", type=Path, default=perf.ROOT / "evals" / "results" / "scale-out")
    parser.add_argument("--name", default="stage2-1m", help="the results' file name (.md, .json) under --out")
    args = parser.parse_args()
    work = args.work.resolve()
    size, modes = args.copies * SOURCE, args.modes.split(",")
    if modes[0] != "memory" or not set(modes) <= set(perf.MODES):
        parser.error(f"--modes {args.modes}: memory first, then any of {', '.join(perf.MODES[1:])}")
    workers = argparse.Namespace(work=work / f"copies-{args.copies}", passes=args.passes, schema=f"perf_{size}")
    workers.work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work / "questions.json", workers.work / "questions.json")
    results = perf.worker_results(__file__, args.passes, modes)
    with throwaway_postgres(work / "pg") as pg:
        workers.url = pg.url
        if held(pg.url, f"perf_{SOURCE}") != SOURCE:
            raise SystemExit(f"no {SOURCE:,}-record store in {work}: run stage2_sql_perf.py --work {work} first")
        if args.reuse and held(pg.url, workers.schema) == size:
            results["build"] = {"records": size, "reused": True}
        else:
            print("copying", flush=True)
            results["build"] = {**copy_store(pg.url, f"perf_{SOURCE}", workers.schema, args.copies), "reused": False}
        results["questions"] = len(json.loads((workers.work / "questions.json").read_text()))
        for _ in range(args.rounds):
            for mode in modes:
                print("worker", mode, flush=True)
                child = perf._child(workers, mode)
                out, _ = child.communicate()
                assert child.returncode == 0, f"the {mode} worker failed"
                results["workers"].append(json.loads(out))
                print(json.dumps(results["workers"][-1]), flush=True)
    results["same_answers"] = perf.same_answers(workers.work, modes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    path = args.out / f"{args.name}.md"
    perf.write_md(results, path)
    build = results["build"]
    made = (
        "made by an earlier run of the same command"
        if build["reused"]
        else "made in this run: " + ", ".join(f"{step} {s:.0f} s" for step, s in build["seconds"].items())
    )
    with path.open("a") as md:
        md.write(
            f"\nThe store: {args.copies} copies of the {SOURCE:,}-record perf store (`car_rag_evals.perf.copies`: ids "
            "tagged per copy, a named package holding every fourth copy's records, fresh vector noise per copy, the "
            f"source's indexes), {made}; the questions are the {SOURCE:,}-record corpus's.\n"
        )
    print("wrote", args.out / f"{args.name}.md")


if __name__ == "__main__":
    main()
