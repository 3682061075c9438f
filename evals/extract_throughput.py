"""Pattern-only extraction throughput (documents per second on one core): car-rag extract's work
without the file I/O, over the real-supersession raw texts (KEPs median 7,938 characters, EIPs
5,987), each series with its policy from evals/extract_policies/.

    python evals/extract_throughput.py [--repeats 5]

Pins the process to one CPU (os.sched_setaffinity where the platform has it), times whole runs of
AuthorityExtractor.extract (raw dicts in, validated records and the report out), and writes
evals/results/extract/throughput.json and .md: every run's docs/s, the median and the best. The
machine is shared with other work: the best run is the least disturbed one, the median the typical.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from car_rag.extract import AuthorityExtractor

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "real-supersession"
POLICIES = ROOT / "evals" / "extract_policies"
OUT = ROOT / "evals" / "results" / "extract"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    results: dict[str, Any] = {
        "cpu": _cpu(),
        "python": platform.python_version(),
        "one_core": hasattr(os, "sched_setaffinity"),
        "series": {},
    }
    for series in ("keps", "eips"):
        docs = [json.loads(line) for line in (DATA / f"{series}.raw.jsonl").read_text(encoding="utf-8").splitlines()]
        chars = sum(len(d["text"]) for d in docs)
        extractor = AuthorityExtractor(POLICIES / f"{series}.policy.toml")
        extractor.extract(docs[:50])  # warm: compiled patterns, imports
        rates = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            extractor.extract(docs)
            rates.append(len(docs) / (time.perf_counter() - start))
        results["series"][series] = {
            "documents": len(docs),
            "mean_chars": chars / len(docs),
            "docs_per_s": [round(r) for r in rates],
            "median": round(statistics.median(rates)),
            "best": round(max(rates)),
        }
        print(series, results["series"][series], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "throughput.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    rows = [
        f"| {s} | {r['documents']} | {r['mean_chars']:,.0f} | {r['median']:,} | {r['best']:,} | "
        + ", ".join(map(str, r["docs_per_s"]))
        + " |"
        for s, r in results["series"].items()
    ]
    (OUT / "throughput.md").write_text(
        "# Pattern-only extraction throughput (one core)\n\n"
        f"`python evals/extract_throughput.py --repeats {args.repeats}` on {results['cpu']}, Python {results['python']}, "
        "pinned to one core, on a machine shared with other work. Dev data (real-supersession raw texts).\n\n"
        "| corpus | documents | mean characters | median docs/s | best docs/s | every run |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
