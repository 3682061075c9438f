"""``car-rag bench``: every system on one suite, side by side, same corpus, same k.

Writes ``<out>/<suite>.json`` (summary per system, per-query scores and the top k ids the
report drills into), ``<suite>.md``
(tables) and PNG plots (TCA by hop type, rank of the controlling record, latency).
Stores are built once under ``stores_dir`` and reused (ingest is idempotent).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from car_rag.eval.metrics import score_query, summarise
from car_rag.queries import load_queries
from car_rag.store import CARStore
from car_rag_evals.framework_systems import available as frameworks_available
from car_rag_evals.suites import Suite, open_suite_store
from car_rag_evals.systems import FRAMEWORK_SYSTEMS, SYSTEMS, System, build_system

__all__ = ["run_suite", "run_system", "write_results", "DEFAULT_SYSTEMS"]

DEFAULT_SYSTEMS = tuple(name for name in SYSTEMS if name not in FRAMEWORK_SYSTEMS or frameworks_available())
"""Every system; the LlamaIndex and LangChain ones only where both frameworks are installed."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def scope_ambiguity(suite: Suite, queries: list, store: CARStore) -> dict[str, Any]:
    """Queries whose anchor's scope holds active records outside the labelled chain (that
    could change the answer, where the suite has an answer rule): the paper's scope
    ambiguity (Definition 5). No retriever can tell those chains apart from the labels'."""
    relevant = set().union(*(types for types, _ in suite.answer_rule.priority)) if suite.answer_rule else None
    by_hop: dict[str, list[int]] = {}
    for query in queries:
        anchor = store.records.get(query.anchor_doc_ids[0]) if query.anchor_doc_ids else None
        if anchor is None:
            continue
        others = [
            r
            for r in store.graph.lookup(anchor.scope)
            if r.doc_id not in query.chain_doc_ids
            and not store.graph.is_superseded(r.doc_id)
            and (relevant is None or r.doc_type in relevant)
        ]
        counts = by_hop.setdefault(query.hop_type or "all", [0, 0])
        counts[0] += bool(others)
        counts[1] += 1
    return {hop: {"ambiguous": a, "n": n} for hop, (a, n) in sorted(by_hop.items())}


def run_system(system: System, suite: Suite, queries: list, store: CARStore, *, k: int, progress: bool = True) -> dict[str, Any]:
    """One system over every query: summary, latency, per-query scores with the top k."""
    scores, tops, latencies, stage23 = [], [], [], []
    for query in tqdm(queries, desc=f"{suite.name} {system.name}", unit="q", disable=None if progress else True, leave=False):
        out = system.run(query.query)
        latencies.append(out.ms)
        tops.append(out.doc_ids[:k])
        if out.stage23_ms is not None:
            stage23.append(out.stage23_ms)
        scores.append(
            score_query(
                query,
                out.doc_ids,
                k=k,
                records=store.records,
                kb=store.graph,
                policy=store.policy,
                answer_rule=suite.answer_rule,
                anchors=out.anchors,
            )
        )
    return {
        "label": system.label,
        "summary": summarise(scores),
        "latency_ms": {
            "p50": round(statistics.median(latencies), 3),
            "p95": round(_percentile(latencies, 0.95), 3),
            "mean": round(statistics.fmean(latencies), 3),
            **(
                {"stage23_p50": round(statistics.median(stage23), 4), "stage23_p99": round(_percentile(stage23, 0.99), 4)}
                if stage23
                else {}
            ),
        },
        "per_query": [{**s.to_dict(), "top": top} for s, top in zip(scores, tops)],
    }


def run_suite(
    suite: Suite,
    *,
    k: int = 5,
    systems: tuple[str, ...] = DEFAULT_SYSTEMS,
    stores_dir: Path = Path(".car-stores"),
    depth: int = 100,
    progress: bool = True,
) -> dict[str, Any]:
    store = open_suite_store(suite, stores_dir, progress)
    queries = load_queries(suite.queries, store.graph)  # labels checked against the corpus: a reversed chain scores wrong
    policy = store.policy
    results: dict[str, Any] = {
        "suite": suite.name,
        "description": suite.description,
        "k": k,
        "depth": depth,
        "queries": len(queries),
        "documents": len(store),
        "policy": policy.name,
        "reference": suite.reference,
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
        "scope_ambiguity": scope_ambiguity(suite, queries, store),
        "systems": {},
    }
    for name in systems:
        results["systems"][name] = run_system(build_system(name, store, depth), suite, queries, store, k=k, progress=progress)
    results["generated"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return results


def _cell(rate: dict | None) -> str:
    if not rate:
        return "–"
    lo, hi = rate["ci95"]
    return f"{rate['value']:.3f} [{lo:.2f}, {hi:.2f}]"


def markdown(results: dict[str, Any], command: str) -> str:
    k = results["k"]
    lines = [
        f"# {results['suite']} (k = {k})",
        "",
        f"{results['description']}. {results['documents']:,} documents, {results['queries']} queries, "
        f"policy `{results['policy']}`.",
        f"Generated by `{command}` on {results['generated']} ({results['machine']}).",
        "",
        f"| system | TCA@{k} [95% CI] | TCA@{k}, answer-based (paper's table) | answer acc. | hit@{k} | "
        f"anchor recall@{k} | MRR | median rank of gold | ORR | p50 ms | Stage 2+3 p50 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in results["systems"].values():
        s = entry["summary"]
        rank = s["gold_rank"]
        median = "–" if rank["median"] is None else f"{rank['median']:g} ({rank['found']}/{s['n']} found)"
        answer = f"{s['answer_accuracy']['value']:.3f}" if "answer_accuracy" in s else "–"
        stage23 = f"{entry['latency_ms']['stage23_p50']:.3f}" if "stage23_p50" in entry["latency_ms"] else "–"
        lines.append(
            f"| {entry['label']} | {_cell(s['tca'])} | {_cell(s.get('tca_answer'))} | {answer} | {s['hit']['value']:.3f} | "
            f"{s['anchor_recall']['value']:.3f} | {s['mrr']:.3f} | {median} | {s['orr']:.3f} | "
            f"{entry['latency_ms']['p50']:.2f} | {stage23} |"
        )
    hops = sorted({h for e in results["systems"].values() for h in e["summary"].get("by_hop", {})})
    for metric, title in (("tca", f"TCA@{k} (Definition 7)"), ("tca_answer", f"TCA@{k}, answer-based (paper's table)")):
        if not hops or not any(metric in e["summary"] for e in results["systems"].values()):
            continue
        lines += ["", f"{title} by hop type:", "", "| system | " + " | ".join(hops) + " |", "|---|" + "---|" * len(hops)]
        for entry in results["systems"].values():
            by_hop = entry["summary"].get("by_hop", {})
            lines.append(f"| {entry['label']} | " + " | ".join(_cell(by_hop.get(h, {}).get(metric)) for h in hops) + " |")
    ambiguity = results.get("scope_ambiguity", {})
    if any(v["ambiguous"] for v in ambiguity.values()):
        parts = "; ".join(f"{hop} {v['ambiguous']}/{v['n']}" for hop, v in ambiguity.items())
        lines += ["", f"Scope ambiguity (queries whose anchor's scope holds active records outside the labelled chain): {parts}."]
    if results["reference"]:
        reference = "; ".join(f"{name} {value:.3f}" for name, value in results["reference"].items())
        lines += ["", "Paper (TCA@5; answer-based where the suite has answers): " + reference + "."]
    return "\n".join(lines) + "\n"


def write_results(results: dict[str, Any], out_dir: Path, command: str) -> list[Path]:
    """Write the JSON, the markdown table and the plots; returns the paths written."""
    from car_rag_evals.plots import plot_suite

    out_dir.mkdir(parents=True, exist_ok=True)
    name = results["suite"]
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps({**results, "command": command}, indent=1) + "\n")
    md_path = out_dir / f"{name}.md"
    md_path.write_text(markdown(results, command))
    return [json_path, md_path, *plot_suite(results, out_dir)]
