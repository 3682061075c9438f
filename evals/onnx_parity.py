"""ONNX vs PyTorch MiniLM vectors on every text of the benchmark corpora.

    python evals/onnx_parity.py [--corpora DIR] [--out evals/results/onnx_parity]

Every distinct text of ``DIR/*.corpus.jsonl`` is encoded by both encoders of
:class:`car_rag.Embedder` (fp32; ``onnx`` and ``torch``), and the cosine of each pair is
reported per corpus: stores built by one encoder stay valid for the other only if every
cosine is at least 0.999. Writes ``parity.json`` (with the command, the machine load and
both encoders' throughput on the same texts) and ``parity.md``; exits 1 if a text falls below.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from car_rag.embedding import Embedder
from car_rag_evals.results_header import results_header

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 0.999


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, default=ROOT.parent / "shared" / "data" / "car-benchmarks" / "corpora")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "onnx_parity")
    args = parser.parse_args()
    files = sorted(args.corpora.glob("*.corpus.jsonl"))
    if not files:
        sys.exit(f"no *.corpus.jsonl in {args.corpora}")
    texts_of = {
        f.name.removesuffix(".corpus.jsonl"): [json.loads(line)["text"] for line in f.open(encoding="utf-8") if line.strip()]
        for f in files
    }
    texts = list(dict.fromkeys(t for corpus in texts_of.values() for t in corpus))
    vectors, seconds = {}, {}
    for encoder in ("onnx", "torch"):
        embedder = Embedder(encoder=encoder)
        embedder.encode(["warm up"])
        tick = time.perf_counter()
        vectors[encoder] = embedder.encode(texts, show_progress=sys.stderr.isatty())
        seconds[encoder] = time.perf_counter() - tick
    cosine = dict(zip(texts, (vectors["onnx"] * vectors["torch"]).sum(axis=1).tolist()))

    def summary(values: list[float]) -> dict[str, float | int]:
        v = np.asarray(values)
        return {
            "texts": len(v),
            "min": float(v.min()),
            "p0.1": float(np.percentile(v, 0.1)),
            "mean": float(v.mean()),
            "below_threshold": int((v < THRESHOLD).sum()),
        }

    header = results_header(__file__)
    result: dict[str, Any] = {
        "command": header.command,
        "when": header.when,
        "machine": {
            "cpus": header.cpus,
            "load_1_5_15": header.load,
            "platform": header.platform,
            "omp_num_threads": header.omp_num_threads,
        },
        "threshold": THRESHOLD,
        "all": summary(list(cosine.values())),
        "corpora": {name: summary([cosine[t] for t in dict.fromkeys(corpus)]) for name, corpus in texts_of.items()},
        "throughput_texts_per_s": {e: len(texts) / s for e, s in seconds.items()},
        "worst": sorted(({"cosine": c, "text": t[:200]} for t, c in cosine.items()), key=lambda w: w["cosine"])[:5],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "parity.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    rows = [
        f"| {name} | {s['texts']:,} | {s['min']:.6f} | {s['p0.1']:.6f} | {s['mean']:.6f} | {s['below_threshold']} |"
        for name, s in [*result["corpora"].items(), ("all (distinct texts)", result["all"])]
    ]
    rate = result["throughput_texts_per_s"]
    (args.out / "parity.md").write_text(
        "\n".join(
            [
                "# ONNX vs PyTorch all-MiniLM-L6-v2 vectors (fp32)",
                "",
                f"`{result['command']}` ({result['when']}; {result['machine']['cpus']} CPUs, load "
                f"{' / '.join(f'{x:.2f}' for x in result['machine']['load_1_5_15'])}, OMP_NUM_THREADS="
                f"{result['machine']['omp_num_threads']}). Cosine of the two encoders' vectors for each distinct text; "
                f"threshold {THRESHOLD}.",
                "",
                "| corpus | texts | min | 0.1th percentile | mean | below threshold |",
                "|---|---|---|---|---|---|",
                *rows,
                "",
                f"Throughput on the same {len(texts):,} texts, batches of 64, one after the other: ONNX Runtime "
                f"{rate['onnx']:.1f} texts/s, PyTorch {rate['torch']:.1f} texts/s ({rate['onnx'] / rate['torch']:.2f}x).",
                "",
            ]
        ),
        encoding="utf-8",
    )
    print((args.out / "parity.md").read_text(encoding="utf-8"))
    return 1 if result["all"]["below_threshold"] else 0


if __name__ == "__main__":
    sys.exit(main())
