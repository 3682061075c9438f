"""The scale benchmark, one command: every size, every phase, then the report.

    python evals/perf/run.py                                   # 10k, 100k, 1M; embedded Chroma
    python evals/perf/run.py --sizes 10000 100000 --server     # the same against `chroma run`
    python evals/perf/run.py --sizes 10000 --encoder torch     # stores built and queried with PyTorch MiniLM
    python evals/perf/run.py --report-only                     # redraw tables and plots

Each phase of :mod:`measure` runs in a fresh process (its memory figures are its own);
stores are built under ``--stores`` (default ``.perf-stores/``) and kept, so ``--reuse``
skips building one that is complete. Texts are embedded for real with MiniLM up to
``--real-upto`` records (default 100k); larger corpora take precomputed vectors (each
record's gist embedded once, plus seeded noise; see :mod:`car_rag_evals.perf.corpus`). A size
the default embeds for real, built with precomputed vectors (``--real-upto`` below it), is a run
of its own (``embedded-100000-onnx-gist``): it times queries without 30 minutes of encoding and
leaves the real-vector run's figures as they were. The LlamaIndex and
LangChain hybrids are built up to ``--frameworks-upto`` records (default 100k).
``--encoder`` (default ``onnx``) is the store's MiniLM encoder (see :class:`car_rag.Embedder`).
Results: ``<out>/perf.json`` (every run, merged by size, Chroma mode and encoder), ``perf.md`` and PNGs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from report import write_report  # the report module beside this script

from car_rag_evals.results_header import results_header
from car_rag_evals.servers import ChromaServer

HERE = Path(__file__).resolve().parent
REAL_UPTO = 100_000
"""Up to this size a store's texts are embedded for real unless ``--real-upto`` says otherwise."""


def _key(mode: str, size: int, encoder: str, embed: str) -> str:
    """A run's name in ``perf.json`` and its store's folder: a size built with precomputed vectors
    where it is embedded for real by default is kept apart (``-gist``), never merged over it."""
    return f"{mode}-{size}-{encoder}" + ("-gist" if embed == "gist" and size <= REAL_UPTO else "")


def _phase(phase: str, size: int, store: Path, out: Path, extra: list[str]) -> dict:
    command = [
        sys.executable,
        str(HERE / "measure.py"),
        phase,
        "--size",
        str(size),
        "--store",
        str(store),
        "--out",
        str(out),
        *extra,
    ]
    print("+", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--server", action="store_true", help="keep vectors in a `chroma run` server on loopback")
    parser.add_argument("--encoder", choices=["onnx", "torch"], default="onnx", help="the stores' MiniLM encoder")
    parser.add_argument("--real-upto", type=int, default=REAL_UPTO, help="embed texts for real up to this size")
    parser.add_argument("--frameworks-upto", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--inserts", type=int, default=1000)
    parser.add_argument("--stores", type=Path, default=Path(".perf-stores"))
    parser.add_argument("--out", type=Path, default=Path("evals/results/perf"))
    parser.add_argument("--reuse", action="store_true", help="keep a store already built (and not streamed into) for a size")
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming-insert phase")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results_file = args.out / "perf.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {"runs": {}}
    for key in [k for k, run in results["runs"].items() if "encoder" not in run]:  # runs from before the choice: PyTorch
        results["runs"][f"{key}-torch"] = {**results["runs"].pop(key), "encoder": "torch"}
    mode = "server" if args.server else "embedded"
    if not args.report_only:
        server = ChromaServer(args.stores / "chroma-server") if args.server else None
        if server:
            server.__enter__()
        try:
            for size in args.sizes:
                embed = "real" if size <= args.real_upto else "gist"
                if args.server and (args.stores / f"vectors-{size}.npy").is_file():
                    embed = "cached"  # the embedded run's own MiniLM vectors: like for like
                key = _key(mode, size, args.encoder, embed)
                store = args.stores / key
                parts = args.stores / f"{key}.parts"
                parts.mkdir(parents=True, exist_ok=True)
                header = results_header(__file__)
                run: dict = {
                    "size": size,
                    "chroma": mode,
                    "encoder": args.encoder,
                    "command": header.command,
                    "when": header.when,
                    "load": header.load,
                }
                streamed = parts / "streamed"  # the stream phase adds records: such a store is not reused
                if not (args.reuse and (parts / "build.json").is_file() and not streamed.exists()):
                    streamed.unlink(missing_ok=True)
                    shutil.rmtree(store, ignore_errors=True)
                    extra = ["--embed", embed, "--encoder", args.encoder, "--quiet"]
                    run["build"] = _phase(
                        "build", size, store, parts / "build.json", extra + (["--chroma-url", server.url] if server else [])
                    )
                else:
                    run["build"] = json.loads((parts / "build.json").read_text())
                extra = ["--queries", str(args.queries), "--quiet"] + (["--frameworks"] if size <= args.frameworks_upto else [])
                run["query"] = _phase("query", size, store, parts / "query.json", extra)
                if not args.no_stream:
                    streamed.touch()
                    run["stream"] = _phase(
                        "stream", size, store, parts / "stream.json", ["--inserts", str(args.inserts), "--quiet"]
                    )
                results["runs"][key] = run
                results["machine"] = header.machine_fields()
                results_file.write_text(json.dumps(results, indent=1) + "\n")
        finally:
            if server:
                server.__exit__(None, None, None)
    for path in write_report(results, args.out):
        print("wrote", path)


if __name__ == "__main__":
    main()
