"""PNG plots of one suite's results: TCA by hop type, rank of the controlling record, latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from car_rag.extras import require

__all__ = ["plot_suite"]


def _pyplot():
    matplotlib = require("matplotlib", "bench", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_suite(results: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = _pyplot()
    name, k = results["suite"], results["k"]
    systems = results["systems"]
    labels = [entry["label"] for entry in systems.values()]
    written = []

    # 1. TCA@k by hop type (overall when the suite has none), Wilson 95% error bars.
    hops = sorted({h for e in systems.values() for h in e["summary"].get("by_hop", {})}) or ["all"]
    fig, ax = plt.subplots(figsize=(max(9, 2.2 * len(hops) + 3), 6))
    palette = plt.get_cmap("tab20" if len(systems) > 10 else "tab10")
    width = 0.8 / len(systems)
    for i, entry in enumerate(systems.values()):
        by_hop = entry["summary"].get("by_hop") or {"all": entry["summary"]}
        rates = [by_hop.get(h, {}).get("tca", {"value": 0, "ci95": [0, 0]}) for h in hops]
        values = [r["value"] for r in rates]
        errors = [[v - r["ci95"][0] for v, r in zip(values, rates)], [r["ci95"][1] - v for v, r in zip(values, rates)]]
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(hops))]
        ax.bar(xs, values, width, yerr=errors, capsize=2, label=entry["label"], color=palette(i))
    ax.set_xticks(range(len(hops)), hops)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(f"TCA@{k}")
    ax.set_title(f"{name}: TCA@{k} by hop type (95% Wilson intervals)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    fig.tight_layout()
    written.append(out_dir / f"{name}-tca.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # 2. Rank of the controlling record (first gold), log scale; misses drawn above the depth.
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(systems) + 1.8))
    for i, entry in enumerate(systems.values()):
        ranks = [q["gold_rank"] for q in entry["per_query"]]
        found = [r for r in ranks if r is not None]
        if found:
            ax.boxplot(found, positions=[i], orientation="horizontal", widths=0.6, showfliers=True, flierprops={"markersize": 2})
        missed = len(ranks) - len(found)
        ax.text(1.02, i, f"{missed} not returned", transform=ax.get_yaxis_transform(), va="center", fontsize=7)
    ax.axvline(k + 0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()  # same order as the tables
    ax.set_xlabel(f"rank of the controlling record (log scale; dotted line: k = {k}; depth {results.get('depth', 100)})")
    ax.set_title(f"{name}: where each system puts the controlling record")
    fig.tight_layout()
    written.append(out_dir / f"{name}-rank.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # 3. Latency per query: median bar, p95 whisker.
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(systems) + 1.8))
    p50 = [e["latency_ms"]["p50"] for e in systems.values()]
    p95 = [e["latency_ms"]["p95"] for e in systems.values()]
    ax.barh(range(len(labels)), p50, xerr=[[0] * len(p50), [b - a for a, b in zip(p50, p95)]], capsize=2)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per query (bar: median, whisker: p95), one process, same machine")
    ax.set_title(f"{name}: latency per query")
    fig.tight_layout()
    written.append(out_dir / f"{name}-latency.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written
