"""Ingest throughput on Ray with 1 and 2 local encoder workers, beside today's local path (issue 36).

    python evals/scale_out/ray_ingest.py [--sizes 10000] [--seed 36] [--out evals/results/scale-out/ray.md]

The records are the perf corpus's (``car_rag_evals.perf.corpus.generate``), written once as JSONL.
Each run is a child process (this script with ``--one``) that ingests them into a fresh store in a
folder (embedded Chroma, the ONNX encoder, ``security-advisory``): ``local-1t`` is ``CARStore.ingest``
with one OpenMP thread, ``local-2t`` the same with two, ``ray-1w`` and ``ray-2w`` are
:func:`car_rag.store.distributed.ingest_on_ray` on a local cluster of 1 and 2 CPUs (one encoder actor,
one thread, per CPU). The seconds are the ingest's alone (actors' start and model load included;
the cluster's own start is given apart), as wall clock. "cores used" is the CPU seconds of the run's
processes (this one, Ray's and its workers') over the wall seconds of the cluster's start and the
ingest: what the machine gave the run, whatever it asked for. The load averages before and after each run
and the mean of those sampled every 5 s during it are written beside it: on a shared machine a
ratio means something only where the load stayed near the cores this run used.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from car_rag_evals.results_header import results_header

ROOT = Path(__file__).resolve().parents[2]
MODES = {"local-1t": (None, 1), "local-2t": (None, 2), "ray-1w": (1, 1), "ray-2w": (2, 1)}
"""Each run's Ray workers (None: the local path) and OpenMP threads per process."""


def one(mode: str, corpus: Path, store: Path) -> dict[str, Any]:
    """One ingest in this process (a child of :func:`main`)."""
    from car_rag import CARStore

    workers, _ = MODES[mode]
    cpu = CpuSeconds()
    cluster_s = 0.0
    if workers is not None:
        import ray

        tick = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        cluster_s = time.perf_counter() - tick
    with CARStore.open(store, "security-advisory") as opened:
        tick = time.perf_counter()
        if workers is None:
            report = opened.ingest(corpus, progress=False)
        else:
            from car_rag.store.distributed import ingest_on_ray

            report = ingest_on_ray(opened, corpus, workers=workers)
        seconds = time.perf_counter() - tick
        cpu_s = cpu.stop()
    if report.errors or report.unchanged:
        raise SystemExit(f"{mode}: {report.summary()}")
    return {"mode": mode, "records": len(report.added), "seconds": seconds, "cluster_start_s": cluster_s, "cpu_s": cpu_s}


class CpuSeconds:
    """CPU seconds of this process and every process under it (Ray's raylet and its workers), read
    every second from the start: over the ingest's wall seconds, the cores it was given. A process
    that ends between two readings loses at most its last second."""

    def __init__(self) -> None:
        import psutil

        self.me, self.done = psutil.Process(), threading.Event()
        self.seen: dict[int, float] = {}
        before = self.me.cpu_times()
        self.before = before.user + before.system  # this process's imports are not the ingest's
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        import psutil

        for process in [self.me, *self.me.children(recursive=True)]:
            try:
                times = process.cpu_times()
                self.seen[process.pid] = times.user + times.system
            except psutil.Error:
                continue

    def _watch(self) -> None:
        while not self.done.wait(1.0):
            self._read()

    def stop(self) -> float:
        self._read()
        self.done.set()
        return float(sum(self.seen.values()) - self.before)


def measured(mode: str, corpus: Path, work: Path) -> dict[str, Any]:
    """:func:`one` in a child process, with the load averages around and during it."""
    _, threads = MODES[mode]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    env |= {"TOKENIZERS_PARALLELISM": "false", "ANONYMIZED_TELEMETRY": "False", "RAY_USAGE_STATS_ENABLED": "0"}
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            samples.append(os.getloadavg()[0])

    before = os.getloadavg()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    child = subprocess.run(
        [sys.executable, __file__, "--one", mode, "--corpus", str(corpus), "--store", str(work / mode)],
        env=env,
        capture_output=True,
        text=True,
    )
    done.set()
    if child.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{child.stderr[-4000:]}")
    row = json.loads(child.stdout.strip().splitlines()[-1])
    row |= {
        "threads_per_process": threads,
        "records_per_s": row["records"] / row["seconds"],
        "cores_used": row["cpu_s"] / (row["seconds"] + row["cluster_start_s"]),
        "load_before": [round(x, 2) for x in before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "load_1m_mean_during": round(sum(samples) / len(samples), 2) if samples else None,
    }
    print(f"{mode}: {row['records']} records in {row['seconds']:.1f} s ({row['records_per_s']:.1f}/s)", file=sys.stderr)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| records | run | seconds | records/s | cluster start (s) | cores used | load 1m before | mean during | load 1m after |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['records']:,} | {r['mode']} | {r['seconds']:.1f} | {r['records_per_s']:.1f} | {r['cluster_start_s']:.1f} "
            f"| {r['cores_used']:.2f} | {r['load_before'][0]} | {r['load_1m_mean_during']} | {r['load_after'][0]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000", help="comma-separated record counts")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "scale-out" / "ray.md")
    parser.add_argument("--one", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.corpus, args.store)))
        return

    from car_rag_evals.perf.corpus import generate

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ray-ingest-") as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            corpus = Path(tmp) / f"corpus-{size}.jsonl"
            corpus.write_text("".join(json.dumps(r) + "\n" for r in generate(size, seed=args.seed, queries=1).records))
            for mode in args.modes.split(","):
                rows.append(measured(mode, corpus, Path(tmp) / str(size)))
    by = {(r["records"], r["mode"]): r for r in rows}
    ratios = {
        size: by[(size, "ray-2w")]["records_per_s"] / by[(size, "ray-1w")]["records_per_s"]
        for size, mode in by
        if mode == "ray-1w" and (size, "ray-2w") in by
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = results_header(__file__)
    meta = {"cpus": header.cpus, "python": header.python, "seed": args.seed, "command": header.command}
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": rows, "ratio_2w_1w": ratios}, indent=2) + "\n")
    ratio_lines = "\n".join(f"- {size:,} records: ray-2w / ray-1w = {ratio:.2f}x" for size, ratio in ratios.items())
    args.out.write_text(
        f"# Ingest on Ray: 1 and 2 local encoder workers\n\n`{header.command}` on {header.cpus} CPUs "
        f"(Python {meta['python']}); perf corpus, seed {args.seed}.\n\n{table(rows)}\n\n{ratio_lines}\n"
    )
    print(args.out.read_text())


if __name__ == "__main__":
    main()
