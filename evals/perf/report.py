"""Tables, goal verdicts and plots from ``perf.json`` (written by :mod:`run`)."""

from __future__ import annotations

from pathlib import Path

FLOOR = "floor: query embedding + bm25s"
WHOLE = "car-rag whole retriever"
STAGE23 = "car-rag Stage 2+3"
AS_OF = "car-rag whole retriever, as of a new date each query"
FILTERED = "car-rag whole retriever, with a filter"
LLAMA = "LlamaIndex QueryFusionRetriever"
LANG = "LangChain EnsembleRetriever"
STEPS = ("embed", "chroma", "records", "bm25", "graph", "parse")
ENCODER_LABEL = {"onnx": "ONNX Runtime", "torch": "PyTorch"}


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k" if n >= 1000 else str(n)


def _runs(results: dict, mode: str | None = None, encoder: str | None = None) -> list[dict]:
    runs = sorted(results["runs"].values(), key=lambda r: (r["chroma"], r["encoder"], r["size"]))
    return [r for r in runs if (mode is None or r["chroma"] == mode) and (encoder is None or r["encoder"] == encoder)]


def _find(results: dict, size: int, mode: str = "embedded", encoder: str = "onnx") -> dict | None:
    return results["runs"].get(f"{mode}-{size}-{encoder}")


def _framework(latency: dict, prefix: str, default_embedding: bool) -> str | None:
    """The latency key of a framework hybrid: with its own default embedding, or with car-rag's
    encoder. Runs from before both were timed have one, which embedded with car-rag's PyTorch encoder
    (the same sentence-transformers call the frameworks' own wrappers make)."""
    for name in latency:
        if name.startswith(prefix) and (("default embedding" in name) == default_embedding or name == prefix):
            return name
    return None


def _short(name: str) -> str:
    framework = name.split()[0]
    return f"{framework} (default embedding)" if "default embedding" in name else f"{framework} (car-rag's encoder)"


VECTORS = {"real": "MiniLM", "gist": "precomputed (gist)", "cached": "precomputed (MiniLM, saved)"}


def _apart(run: dict) -> str:
    """What sets a run with precomputed vectors at a size embedded for real by default apart from that run."""
    return ", gist vectors" if run["build"]["embedding"] == "gist" and run["size"] <= 100_000 else ""


def _label(run: dict) -> str:
    return f"{_size(run['size'])} {run['encoder']}{_apart(run)}"


def _marginal(smaller: dict | None, larger: dict) -> float | None:
    """Loaded-store RSS added per record between two sizes."""
    if smaller is None or smaller["size"] >= larger["size"]:
        return None
    grown = larger["query"]["rss_mb"]["loaded_and_queried"] - smaller["query"]["rss_mb"]["loaded_and_queried"]
    return grown * 2**20 / (larger["build"]["records"] - smaller["build"]["records"])


def _ingest_vs_encode(build: dict) -> float | None:
    """Ingest throughput over that of its own encode calls: embed seconds over ingest seconds."""
    return build["ingest_steps_s"]["embed"] / build["ingest_s"] if build["embedding"] == "real" else None


def goals(results: dict) -> list[tuple[str, str, str]]:
    """(goal, measured, verdict) for each goal of the issue that the runs can answer."""
    out = []
    for size in (100_000, 10_000):
        run = _find(results, size)
        if not run:
            continue
        lat, at = run["query"]["latency_ms"], f"at {_size(size)}, {ENCODER_LABEL[run['encoder']]}"
        ratio = lat[WHOLE]["p50"] / lat[FLOOR]["p50"]
        out.append(
            (
                f"whole-retriever p50 {at} ≤ 1.2× floor (query embedding + bm25s, same encoder)",
                f"{lat[WHOLE]['p50']:.2f} ms vs {lat[FLOOR]['p50']:.2f} ms = {ratio:.2f}×",
                "met" if ratio <= 1.2 else "missed",
            )
        )
        for prefix in (LLAMA, LANG):
            name = _framework(lat, prefix, default_embedding=True)
            if name:
                r = lat[WHOLE]["p50"] / lat[name]["p50"]
                out.append(
                    (
                        f"whole-retriever p50 {at} ≤ 0.5× {name}",
                        f"{lat[WHOLE]['p50']:.2f} ms vs {lat[name]['p50']:.2f} ms = {r:.2f}×",
                        "met" if r <= 0.5 else "missed",
                    )
                )
        before = _find(results, size, encoder="torch")
        if before and before["build"]["embedding"] == run["build"]["embedding"] == "real":
            gain = run["build"]["ingest_per_s"] / before["build"]["ingest_per_s"]
            out.append(
                (
                    f"ingest throughput at {_size(size)} (embedding included) ≥ 1.5× PyTorch's",
                    f"{run['build']['ingest_per_s']:.1f} records/s ({run['when']}) vs {before['build']['ingest_per_s']:.1f} "
                    f"({before['when']}) = {gain:.2f}×",
                    "met" if gain >= 1.5 else "missed",
                )
            )
    for run in _runs(results):
        lat = run["query"]["latency_ms"]
        for name in [n for n in lat if n.startswith((AS_OF, FILTERED))]:
            ratio = lat[name]["p50"] / lat[WHOLE]["p50"]
            out.append(
                (
                    f"{name.removeprefix(WHOLE + ', ')}: p50 ≤ 1.10× the whole retriever's, same run "
                    f"({_label(run)}, Chroma {run['chroma']})",
                    f"{lat[name]['p50']:.2f} ms vs {lat[WHOLE]['p50']:.2f} ms = {ratio:.2f}×",
                    "met" if ratio <= 1.1 else "missed",
                )
            )
    r1m = _find(results, 1_000_000) or _find(results, 1_000_000, encoder="torch")
    if r1m:
        p99 = r1m["query"]["latency_ms"][STAGE23]["p99"]
        out.append(("Stage 2+3 p99 < 1 ms at 1M", f"{p99:.3f} ms", "met" if p99 < 1 else "missed"))
    for run in _runs(results, "embedded"):
        stream = run.get("stream")
        if not stream:
            continue
        whole, index = {}, {}
        for size, e in stream["by_batch_size"].items():
            steps = e["mean_per_record_ms_by_step"]
            whole[size] = sum(v for s, v in steps.items() if s != "embed")
            index[size] = steps.get("graph", 0) + steps.get("bm25", 0)
        best = min(whole.values())
        verdict = "met" if best < 1 else "missed; met by the authority index" if max(index.values()) < 1 else "missed"
        out.append(
            (
                f"streaming insert < 1 ms amortized, excl. embedding ({_label(run)})",
                "whole insert per record by records per call: "
                + ", ".join(f"{b}: {v:.2f} ms" for b, v in whole.items())
                + "; authority index alone (graph + BM25): "
                + ", ".join(f"{v:.3f}" for v in index.values())
                + " ms",
                verdict,
            )
        )
    for run in _runs(results, "embedded"):
        b = run["build"]
        ratio = _ingest_vs_encode(b)
        if ratio is not None:
            encode = b["ingest_per_s"] / ratio
            out.append(
                (
                    f"ingest ≥ 80% of raw MiniLM encode throughput ({_label(run)})",
                    f"{b['ingest_per_s']:.1f} records/s against {encode:.1f} for its own encode calls = "
                    f"{100 * ratio:.0f}% (a separate 2,000-text encode sample: {b['raw_encode_per_s']:.1f}/s)",
                    "met" if ratio >= 0.8 else "missed",
                )
            )
    per = sorted({r["size"]: r["build"]["authority_index_bytes_per_record"] for r in _runs(results, "embedded")}.items())
    if len(per) >= 2:
        spread = max(b for _, b in per) / min(b for _, b in per)
        out.append(
            (
                "authority index memory per record stated, linear in records",
                ", ".join(f"{_size(n)}: {b:.0f} B" for n, b in per) + f" (max/min {spread:.2f})",
                "met" if spread <= 1.25 else "missed",
            )
        )
    return out


def markdown(results: dict) -> str:
    lines = [
        "# Scale benchmark",
        "",
        "Seeded security-advisory corpora (`car_rag_evals/perf/corpus.py`): chains of depth 1–4, vocabulary-disjoint "
        "release notes as superseders, shared package scopes, unpatched disclosures and maintenance releases as "
        "distractors. The systems of a size were timed side by side in one run per size and encoder; runs of "
        "different encoders or sizes were made at different times, under the load listed with each command "
        f"(machine: {results.get('machine', {}).get('cpus')} CPUs, "
        f"OMP_NUM_THREADS={results.get('machine', {}).get('omp_num_threads')}). "
        "Commands are listed with each run.",
        "",
    ]
    lines += ["## Goals", "", "| goal | measured | verdict |", "|---|---|---|"]
    lines += [f"| {g} | {m} | **{v}** |" for g, m, v in goals(results)]

    lines += [
        "",
        "## Ingest",
        "",
        "| size | Chroma | encoder | vectors | records | edges | ingest rec/s | encode sample rec/s | ingest / its encode | "
        + " | ".join(f"{s} %" for s in STEPS)
        + " | disk MB | disk B/rec | authority index B/rec | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(STEPS) + "---|---|---|---|",
    ]
    for run in _runs(results):
        b = run["build"]
        total = sum(b["ingest_steps_s"].values()) or 1
        share = _ingest_vs_encode(b)
        ratio = f"{100 * share:.0f}%" if share is not None else "–"
        vectors = VECTORS[b["embedding"]]
        lines.append(
            f"| {_size(run['size'])} | {run['chroma']} | {run['encoder']} | {vectors} | {b['records']:,} | {b['edges']:,} | "
            f"{b['ingest_per_s']:.1f} | {b['raw_encode_per_s']:.1f} | {ratio} | "
            + " | ".join(f"{100 * b['ingest_steps_s'].get(s, 0) / total:.1f}" for s in STEPS)
            + f" | {b['disk_bytes'] / 2**20:.0f} | {b['disk_bytes'] / b['records']:.0f} | "
            f"{b['authority_index_bytes_per_record']:.0f} | {b['peak_rss_ingest_mb']:.0f} |"
        )

    lines += [
        "",
        "## Query latency (ms; same queries, systems interleaved query by query)",
        "",
        "| size | Chroma | encoder | vectors | measured | system | p50 | p95 | p99 | gold in top 5 | p50 / floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in _runs(results):
        q = run["query"]
        floor = q["latency_ms"][FLOOR]["p50"]
        for name, lat in q["latency_ms"].items():
            gold = q["gold_in_top5"].get(name)
            lines.append(
                f"| {_size(run['size'])} | {run['chroma']} | {run['encoder']} | {VECTORS[run['build']['embedding']]} | "
                f"{run['when'][:10]} | {name} | "
                f"{lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p99']:.2f} | "
                f"{'–' if gold is None else f'{gold:.3f}'} | {lat['p50'] / floor:.2f} |"
            )

    lines += [
        "",
        "## Memory of a loaded store",
        "",
        "RSS includes the MiniLM model and the Python runtime (~0.5 GB at any size); the marginal cost of a "
        "record is the RSS difference to the next smaller size over the records added.",
        "",
        "| size | Chroma | encoder | open s | RSS after open MB | RSS after queries MB | marginal B per record | "
        "framework retrievers added MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, encoder in [(m, e) for m in ("embedded", "server") for e in ENCODER_LABEL]:
        previous = None
        for run in _runs(results, mode, encoder):
            q = run["query"]
            rss = q["rss_mb"]
            marginal = _marginal(previous, run)
            fw = ", ".join(f"{_short(n)} {m['rss_added_mb']:.0f}" for n, m in q.get("frameworks", {}).items()) or "–"
            lines.append(
                f"| {_size(run['size'])} | {run['chroma']} | {run['encoder']} | {q['open_s']:.1f} | {rss['after_open']:.0f} | "
                f"{rss['loaded_and_queried']:.0f} | {'–' if marginal is None else f'{marginal:.0f}'} | {fw} |"
            )
            previous = run

    lines += [
        "",
        "## Streaming inserts (precomputed vectors: embedding excluded)",
        "",
        "| size | Chroma | encoder | arrival | records | newly superseded | per record mean ms | p50 | p99 "
        "| graph | BM25 | Chroma | records table | after-insert queries |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in _runs(results):
        s = run.get("stream")
        if not s:
            continue
        after = s["after_inserts"]
        for size, e in s["by_batch_size"].items():
            st = e["mean_per_record_ms_by_step"]
            arrival = "one at a time" if size == "1" else f"batches of {size}"
            lines.append(
                f"| {_size(run['size'])} | {run['chroma']} | {run['encoder']} | {arrival} | "
                f"{e['records']} | {e['newly_superseded']} | {e['per_record_ms']['mean']:.3f} | "
                f"{e['per_record_ms']['p50']:.3f} | {e['per_record_ms']['p99']:.3f} | "
                f"{st.get('graph', 0):.3f} | {st.get('bm25', 0):.3f} | {st.get('chroma', 0):.3f} | {st.get('records', 0):.3f} | "
                f"{after['reported_superseded']}/{after['voided_target_retrieved']} voided targets reported superseded |"
            )
    lines += ["", "## Commands", ""]
    for run in _runs(results):
        load = f"; load {' / '.join(f'{x:.2f}' for x in run['load'])} (1/5/15 min) at its start" if run.get("load") else ""
        lines.append(f"- {_label(run)} {run['chroma']} ({run['when']}{load}): `{run['command']}`")
    return "\n".join(lines) + "\n"


def _plots(results: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written = []
    for mode in ("embedded", "server"):
        runs = _runs(results, mode)
        if not runs:
            continue
        systems = list(dict.fromkeys(n for r in runs for n in r["query"]["latency_ms"]))
        fig, ax = plt.subplots(figsize=(10, 4.5))
        width = 0.8 / len(systems)
        for i, name in enumerate(systems):
            xs, p50, p99 = [], [], []
            for j, r in enumerate(runs):
                lat = r["query"]["latency_ms"].get(name)
                if lat:
                    xs.append(j + (i - (len(systems) - 1) / 2) * width)
                    p50.append(lat["p50"])
                    p99.append(lat["p99"])
            ax.bar(xs, p50, width, label=name)
            ax.scatter(xs, p99, marker="_", color="black", s=60, zorder=3)
        ax.set_yscale("log")
        ax.set_xticks(range(len(runs)), [f"{_size(r['size'])} records{_apart(r)}\n{ENCODER_LABEL[r['encoder']]}" for r in runs])
        ax.set_ylabel("ms per query (bar p50, tick p99)")
        ax.set_title(f"Query latency by corpus size (Chroma {mode})")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out / f"latency-{mode}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    runs = _runs(results, "embedded")
    if runs:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        bottom = np.zeros(len(runs))
        for step in STEPS:
            vals = np.array([1000 * r["build"]["ingest_steps_s"].get(step, 0) / r["build"]["records"] for r in runs])
            left.bar(range(len(runs)), vals, bottom=bottom, label=step)
            bottom += vals
        left.set_xticks(
            range(len(runs)), [f"{_label(r)}\n({'MiniLM' if r['build']['embedding'] == 'real' else 'precomputed'})" for r in runs]
        )
        left.set_ylabel("ms per record")
        left.set_title("Ingest time per record, by step")
        left.legend(fontsize=8)
        runs = _runs(results, "embedded", "torch") or runs  # one encoder: memory per record is the encoder's difference otherwise
        sizes = [r["size"] for r in runs]
        right.plot(
            sizes,
            [r["build"]["authority_index_bytes_per_record"] for r in runs],
            "o-",
            label="authority index (entity index + graph)",
        )
        if len(runs) > 1:
            right.plot(sizes[1:], [_marginal(a, b) for a, b in zip(runs, runs[1:])], "s-", label="loaded store, marginal RSS")
        right.plot(sizes, [r["build"]["disk_bytes"] / r["build"]["records"] for r in runs], "^-", label="on disk")
        right.set_xscale("log")
        right.set_yscale("log")
        right.set_xlabel("records")
        right.set_ylabel("bytes per record")
        right.set_title("Memory and disk per record")
        right.legend(fontsize=8)
        fig.tight_layout()
        path = out / "ingest-memory.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    streamed = [r for r in _runs(results) if r.get("stream")]
    if streamed:
        fig, axes = plt.subplots(1, len(streamed), figsize=(4 * len(streamed), 3.8), sharey=True, squeeze=False)
        for ax, run in zip(axes[0], streamed):
            sizes = list(run["stream"]["by_batch_size"])
            bottom = np.zeros(len(sizes))
            for step in ("graph", "bm25", "records", "chroma", "parse"):
                vals = np.array([run["stream"]["by_batch_size"][b]["mean_per_record_ms_by_step"].get(step, 0) for b in sizes])
                ax.bar(range(len(sizes)), vals, bottom=bottom, label=step)
                bottom += vals
            ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
            ax.set_yscale("log")
            ax.set_xticks(range(len(sizes)), sizes)
            ax.set_xlabel("records per ingest call")
            ax.set_title(f"{_size(run['size'])} records, Chroma {run['chroma']}, {run['encoder']}", fontsize=9)
        axes[0][0].set_ylabel("ms per inserted record (embedding excluded)")
        axes[0][0].legend(fontsize=7)
        fig.suptitle("Streaming inserts: cost per record by step (dotted: 1 ms)", fontsize=10)
        fig.tight_layout()
        path = out / "stream.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def write_report(results: dict, out: Path) -> list[Path]:
    md = out / "perf.md"
    md.write_text(markdown(results))
    return [md, *_plots(results, out)]


if __name__ == "__main__":
    import json
    import sys

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "evals/results/perf")
    for p in write_report(json.loads((folder / "perf.json").read_text()), folder):
        print("wrote", p)
