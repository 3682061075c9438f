"""Chunked ingest on a real corpus: what a SIGKILL keeps, what the re-run pays, peak memory, and
ingest time by chunk size (issue 19, item 4).

    python evals/ingest_resume.py [--corpus ../shared/data/car-benchmarks/corpora/ghsa-freeform.corpus.jsonl]
                                  [--policy security-advisory] [--sizes 128,256,512,1024] [--kill-at 0.6]
                                  [--before c353445] [--out evals/results/ingest/ghsa-freeform.md]

Every ingest is ``car-rag -vv ingest CORPUS --store FRESH --policy P --quiet --chunk-size N`` in a
child process (the package this script imports, ONNX encoder, one OpenMP thread), timed by wall
clock, with its peak RSS from ``os.wait4``'s rusage and its step timings from the store's DEBUG
log. First one ingest per chunk size in ``--sizes``, one with a chunk larger than the corpus (one
encode over the whole file, one write), and with ``--before COMMIT`` one by that commit's own ``car-rag
ingest`` (the code before chunks, which has no ``--chunk-size``). Then, at the default chunk
size, an ingest is killed with SIGKILL at ``--kill-at`` of that size's uninterrupted time, the
records it kept are counted in ``records.sqlite``, and the same command is run again: its time,
what it printed, and the resumed store compared with the uninterrupted one (records in order,
edges, BM25 order, vector ids). Writes the markdown table to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import car_rag
from car_rag.store import DEFAULT_CHUNK

ROOT = Path(car_rag.__file__).resolve().parents[1]
"""The checkout whose car_rag this script imports; the children run the same one."""
CORPORA = ROOT.parent / "shared" / "data" / "car-benchmarks" / "corpora"
WHOLE = 10**9
"""A chunk larger than any corpus: the ingest before chunks."""
CHROMA_IDS = """
import json, sys, chromadb
from chromadb.config import Settings
store = sys.argv[1]
config = json.load(open(store + "/car-store.json"))
client = chromadb.PersistentClient(path=store + "/chroma", settings=Settings(anonymized_telemetry=False))
print(json.dumps(sorted(client.get_collection(config["collection"]).get(include=[])["ids"])))
"""
"""Run in a child: the vector ids of a store, read while no other process has it open."""


@dataclass
class Run:
    seconds: float
    peak_rss_mib: float
    exit_status: int
    stdout: str
    timings: dict[str, float]


def _env(root: Path = ROOT) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(root),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def ingest(
    corpus: Path, store: Path, policy: str, chunk: int | None, kill_after_s: float | None = None, root: Path = ROOT
) -> Run:
    """One ``car-rag ingest`` child of the checkout at ``root`` (``chunk`` None: no ``--chunk-size``),
    killed with SIGKILL after ``kill_after_s`` when given."""
    command = [
        sys.executable,
        "-m",
        "car_rag",
        "-vv",
        "ingest",
        str(corpus),
        "--store",
        str(store),
        "--policy",
        policy,
        "--quiet",
        *(["--chunk-size", str(chunk)] if chunk else []),
    ]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, cwd=root, env=_env(root), stdout=out, stderr=err)
        if kill_after_s is not None:
            try:
                child.wait(timeout=kill_after_s)
                raise SystemExit(f"the ingest ended before {kill_after_s:.1f} s: nothing to kill")
            except subprocess.TimeoutExpired:
                os.kill(child.pid, signal.SIGKILL)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        log = err.read()
        found = re.search(r"ingest timings \(s\): (.*)", log)
        timings = {k: float(v) for k, v in (p.split() for p in found.group(1).split(", "))} if found else {}
        if kill_after_s is None and child.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {child.returncode}:\n{log[-3000:]}")
        return Run(seconds, usage.ru_maxrss / 1024, child.returncode, out.read(), timings)


def stored(store: Path) -> dict[str, Any]:
    """What a store holds on disk: records in order with fingerprints, edges, BM25 order, vector ids."""
    with sqlite3.connect(f"file:{store / 'records.sqlite'}?mode=ro", uri=True) as db:
        records = db.execute("SELECT doc_id, fingerprint FROM records ORDER BY seq").fetchall()
        edges = sorted(db.execute("SELECT superseder, target, rule, confidence FROM edges"))
        disputed = sorted(db.execute("SELECT superseder, target, rule, confidence FROM disputed_edges"))
    index = store / "bm25" / "index.json"
    bm25 = json.loads(index.read_text())["doc_ids"] if index.is_file() else None
    ids = subprocess.run(
        [sys.executable, "-c", CHROMA_IDS, str(store)], env=_env(), capture_output=True, text=True, check=True
    ).stdout
    return {"records": records, "edges": edges, "disputed": disputed, "bm25": bm25, "vectors": json.loads(ids)}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPORA / "ghsa-freeform.corpus.jsonl")
    parser.add_argument("--policy", default="security-advisory")
    parser.add_argument("--sizes", default="128,256,512,1024", help="chunk sizes timed uninterrupted, comma-separated")
    parser.add_argument("--kill-at", type=float, default=0.6, help="share of the uninterrupted time at which to kill")
    parser.add_argument("--before", help="a commit of the code before chunked ingest, timed as one more row")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "ingest" / "ghsa-freeform.md")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {DEFAULT_CHUNK})
    total = sum(1 for line in args.corpus.open(encoding="utf-8") if line.strip())
    work = Path(tempfile.mkdtemp(prefix="ingest-resume-"))
    lines = [
        f"# Chunked ingest: {args.corpus.name} ({total} records)",
        "",
        f"`python evals/ingest_resume.py --corpus {args.corpus.name} --policy {args.policy} --sizes {args.sizes} "
        f"--kill-at {args.kill_at}{' --before ' + args.before if args.before else ''}`; "
        f"{platform.machine()}, {os.cpu_count()} cores, one OpenMP thread, ONNX encoder; "
        f"car_rag from {ROOT.name} at `{_git_head()}`, {time.strftime('%Y-%m-%d')}.",
        "",
        "Each row is one `car-rag ingest` child into a fresh store: wall time from start (model load included) to exit, "
        "the store's own step timings (summed over chunks), peak RSS of the child. `whole` is a chunk larger than the "
        "corpus (one encode over the whole file, one write), as the ingest before chunks did"
        + (f"; `before` is that ingest itself, the code at {args.before}" if args.before else "")
        + ".",
        "",
        "| chunk size | wall s | embed s | chroma s | records s | bm25 s | peak RSS MiB | load (1/5/15 min) at start |",
        "|---|---|---|---|---|---|---|---|",
    ]
    runs: dict[int, Run] = {}
    try:
        for size in [*([0] if args.before else []), WHOLE, *sizes]:
            load = _load()
            run = runs[size] = ingest(
                args.corpus,
                work / f"chunk-{size}",
                args.policy,
                size or None,
                root=_checkout(args.before, work / "before") if size == 0 else ROOT,
            )
            t = run.timings
            name = {0: "before", WHOLE: "whole"}.get(size, str(size))
            lines.append(
                f"| {name} | {run.seconds:.1f} | {t.get('embed', 0):.1f} | "
                f"{t.get('chroma', 0):.1f} | {t.get('records', 0):.2f} | {t.get('bm25', 0):.2f} | "
                f"{run.peak_rss_mib:.0f} | {load} |"
            )
            print(lines[-1], flush=True)

        reference = runs[DEFAULT_CHUNK]
        store = work / "killed"
        kill_after = args.kill_at * reference.seconds
        killed = ingest(args.corpus, store, args.policy, DEFAULT_CHUNK, kill_after_s=kill_after)
        after_kill = stored(store)
        kept = len(after_kill["records"])
        orphans = len(set(after_kill["vectors"]) - {d for d, _ in after_kill["records"]})
        load = _load()
        resumed = ingest(args.corpus, store, args.policy, DEFAULT_CHUNK)
        same = {key: value == stored(work / f"chunk-{DEFAULT_CHUNK}")[key] for key, value in stored(store).items()}
        lines += [
            "",
            f"## Killed at {args.kill_at:.0%} and run again (chunk size {DEFAULT_CHUNK})",
            "",
            f"* killed with SIGKILL {killed.seconds:.1f} s in (exit status {killed.exit_status}): "
            f"**{kept} of {total} records kept** ({kept / total:.0%}; whole chunks: {kept % DEFAULT_CHUNK == 0}), "
            f"{orphans} vectors without a record (the cut chunk's, written to Chroma before its records)",
            f"* the same command again (load {load} at start): **{resumed.seconds:.1f} s** against {reference.seconds:.1f} s "
            f"uninterrupted ({resumed.seconds / reference.seconds:.0%}); embed {resumed.timings.get('embed', 0):.1f} s "
            f"against {reference.timings.get('embed', 0):.1f} s; peak RSS {resumed.peak_rss_mib:.0f} MiB",
            "* it printed: " + "; ".join(f"`{line}`" for line in resumed.stdout.replace(str(work), "TMP").strip().splitlines()),
            "* resumed store against the uninterrupted one: "
            + ", ".join(f"{key} {'equal' if ok else 'DIFFER'}" for key, ok in same.items()),
        ]
        print("\n".join(lines[-6:]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0 if all(same.values()) else 1


def _git_head() -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _checkout(commit: str, folder: Path) -> Path:
    """The files of ``commit`` in ``folder`` (``git archive``: no worktree, nothing in the repository changes)."""
    archive = folder.with_suffix(".tar")
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), commit], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


if __name__ == "__main__":
    sys.exit(main())
