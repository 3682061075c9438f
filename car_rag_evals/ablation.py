"""``car-rag bench --ablation``: the legal-RAG ablation matrix (../shared/seeds/002, V0–V9) in
CAR terms, beside car-rag's stages switched on one at a time.

The seed's variants change one component each: dense vs hybrid retrieval, k = 5 vs 10, a
date filter, a status filter, query rewriting, HyDE, cross-encoder reranking. Here:

* the **status filter** ("In Force") keeps records no other record supersedes in the
  corpus-wide authority graph (the suite policy's rules over the whole corpus: the status
  metadata a curated corpus would carry);
* the **date filter** (the seed's "> 2010") keeps records dated on or after the corpus's
  median record date (undated records are kept: their age is unknown);
* both filter the base retriever's ranking (depth 100) before the cut at k;
* **query rewrite** (V5) and **HyDE** (V6) ask a chat model, through ``eval-llm``'s client and
  answer cache (:mod:`car_rag_evals.llm.expansion`, one call per query each; a re-run costs
  nothing): V5 embeds the model's rewrite in place of the question (the seed rewrites by
  hand); V6 embeds the mean of the model's answer passage and the question (Gao et al. 2022
  count the question as one more hypothesis). Without an endpoint they are listed as skipped
  with that reason. A query the model gave no text for is left out of its variant's scores
  and counted, with the reason, in ``llm``;
* **reranking** (V7, V8 and V9's last step) needs a cross-encoder, none of which is packaged
  for offline use, so those are listed with that reason; V9a is V9 without it (hybrid, BM25
  on the question and the dense channel on HyDE's vector, then the date filter).

car-rag's stages: Stage 1 alone (hybrid anchors, nothing added: the ``hybrid`` system), +
Stage 2 with "a later record in scope voids" (``car-timestamp``), + Stage 3's policy rules
(``car-hybrid``). Metrics: Recall@k of the controlling record, chain recall (ProvRec), TCA@k,
and the seed's ORR and CRR (:mod:`car_rag.eval.metrics`); citation measures need answers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from car_rag.queries import load_queries
from car_rag.store import CARStore
from car_rag_evals.bench import run_system
from car_rag_evals.llm.client import ChatClient
from car_rag_evals.llm.expansion import EXPANSIONS, Expansions, expand
from car_rag_evals.suites import Suite, open_suite_store
from car_rag_evals.systems import System, build_system, embedding_system

__all__ = ["NO_ENDPOINT", "VARIANTS", "markdown", "run_ablation", "write_ablation"]


class _Filtered(System):
    """A base system's ranking with the records a filter rejects left out."""

    def __init__(self, name: str, label: str, base: System, keep: Callable[[str], bool]):
        super().__init__(name, label)
        self.base, self.keep = base, keep

    def _rank(self, query: str) -> tuple[list[str], list[str] | None]:
        out = self.base.run(query)
        return [d for d in out.doc_ids if self.keep(d)], out.anchors


def _in_force(store: CARStore) -> Callable[[str], bool]:
    return lambda doc_id: not store.graph.is_superseded(doc_id)


def _dated_after_median(store: CARStore) -> tuple[Callable[[str], bool], str]:
    times = sorted(r.time for r in store.records.values() if r.time is not None)
    if not times:
        return (lambda doc_id: True), "no record is dated: the filter keeps everything"
    cutoff = times[len(times) // 2]

    def keep(doc_id: str) -> bool:
        when = store.records[doc_id].time
        return when is None or when >= cutoff

    return keep, f"cutoff {cutoff:%Y-%m-%d} (median record date)"


def _expanded_vector(store: CARStore, expansions: Expansions, ids: dict[str, str]) -> Callable[[str], np.ndarray]:
    """The query vector a model-expanded variant searches with (``ids``: query text → id)."""

    def embed(query: str) -> np.ndarray:
        text = expansions.texts[ids[query]]
        if expansions.kind == "rewrite":
            return store.embedder.encode([text])[0]
        return store.embedder.encode([text, query]).mean(axis=0)

    return embed


@dataclass(frozen=True)
class Variant:
    """One row of the matrix: a base system, k, a filter and a query expansion, or why it
    cannot run here."""

    vid: str
    what: str
    base: str | None
    k: int = 5
    filter: str | None = None
    expansion: str | None = None
    skipped: str | None = None


NO_ENDPOINT = "needs a language model endpoint (--base-url)"
_RERANK = "needs a cross-encoder reranker: none is packaged for offline use here"
VARIANTS = (
    Variant("V0", "dense, k=5", "dense"),
    Variant("V1", "dense, k=10", "dense", k=10),
    Variant("V2", "hybrid (BM25 + MiniLM, RRF), k=5", "hybrid"),
    Variant("V3", "dense + date filter", "dense", filter="date"),
    Variant("V4", "hybrid + status filter (in force)", "hybrid", filter="status"),
    Variant("V5", "dense + query rewrite (by the model)", "dense", expansion="rewrite"),
    Variant("V6", "dense + HyDE", "dense", expansion="hyde"),
    Variant("V7", "dense + reranking", None, skipped=_RERANK),
    Variant("V8", "hybrid + reranking", None, skipped=_RERANK),
    Variant("V9", "hybrid + HyDE + date filter + reranking", None, skipped=f"{_RERANK} (V9a is the rest of it)"),
    Variant("V9a", "V9 without reranking: hybrid + HyDE + date filter", "hybrid", filter="date", expansion="hyde"),
    Variant("C1", "car-rag Stage 1 only: hybrid anchors, nothing added (= V2)", "hybrid"),
    Variant("C2", "car-rag + Stage 2: scope expansion, a later record in scope voids", "car-timestamp"),
    Variant("C3", "car-rag + Stage 3: the policy's supersession rules (full car-rag)", "car-hybrid"),
)


def _system(
    v: Variant,
    base: str,
    store: CARStore,
    depth: int,
    embed: Callable[[str], np.ndarray] | None,
    date_keep: Callable[[str], bool],
) -> System:
    """The variant's retriever: its base (on the model's query vector when ``embed``), filtered."""
    system = build_system(base, store, depth) if embed is None else embedding_system(base, v.vid, v.what, store, depth, embed)
    if v.filter == "status":
        return _Filtered(v.vid, v.what, system, _in_force(store))
    if v.filter == "date":
        return _Filtered(v.vid, v.what, system, date_keep)
    return system


def run_ablation(
    suite: Suite,
    *,
    stores_dir: Path,
    depth: int = 100,
    client: ChatClient | None = None,
    concurrency: int = 4,
    progress: bool = True,
) -> dict[str, Any]:
    """Every variant on ``suite``; the model-dependent ones only with a ``client``."""
    store = open_suite_store(suite, stores_dir, progress)
    queries = load_queries(suite.queries, store.graph)  # labels checked against the corpus, as bench does
    ids = {q.query: q.query_id for q in queries}
    date_keep, date_note = _dated_after_median(store)
    rows: dict[str, Any] = {}
    runs: dict[tuple[str, int, str | None, str | None], dict[str, Any]] = {}
    expansions: dict[str, Expansions] = {}
    for v in VARIANTS:
        if v.skipped or v.base is None:
            rows[v.vid] = {"what": v.what, "skipped": v.skipped}
            continue
        row: dict[str, Any] = {"what": v.what, "k": v.k}
        scored, embed = queries, None
        if v.expansion:
            if client is None:
                rows[v.vid] = {"what": v.what, "skipped": NO_ENDPOINT}
                continue
            if v.expansion not in expansions:
                expansions[v.expansion] = expand(v.expansion, queries, client, concurrency=concurrency, progress=progress)
            expanded = expansions[v.expansion]
            scored = [q for q in queries if q.query_id in expanded.texts]
            row.update(expansion=v.expansion, failed=len(queries) - len(scored))
            if not scored:
                rows[v.vid] = {**row, "skipped": f"the model gave no text for any query (llm.{v.expansion}.failures)"}
                continue
            embed = _expanded_vector(store, expanded, ids)
        key = (v.base, v.k, v.filter, v.expansion)
        if key not in runs:
            system = _system(v, v.base, store, depth, embed, date_keep)
            runs[key] = run_system(system, suite, scored, store, k=v.k, progress=progress)
        s = runs[key]["summary"]
        rows[v.vid] = {
            **row,
            "recall": s["hit"],
            "chain_recall": s["provenance_recall"],
            "tca": s["tca"],
            "orr": s["orr"],
            "crr": s["crr"],
            "lvr": s["lvr"],
            "p50_ms": runs[key]["latency_ms"]["p50"],
        }
    result = {
        "suite": suite.name,
        "queries": len(queries),
        "documents": len(store),
        "depth": depth,
        "date_filter": date_note,
        "variants": rows,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if client is not None:
        result["llm"] = {
            "model": client.model,
            "prompts": "car_rag_evals/llm/prompts/",
            **{kind: e.summary() for kind, e in expansions.items()},
        }
    return result


def _rate(rate: dict[str, Any]) -> str:
    lo, hi = rate["ci95"]
    return f"{rate['value']:.3f} [{lo:.2f}, {hi:.2f}]"


def markdown(result: dict[str, Any], command: str) -> str:
    lines = [
        f"# Ablation matrix (seed 002, V0–V9) in CAR terms: {result['suite']}",
        "",
        f"{result['documents']:,} documents, {result['queries']} queries. Generated by `{command}` on {result['generated']}. "
        f"Date filter: {result['date_filter']}. Definitions: car_rag_evals/ablation.py; ORR and CRR as quoted in "
        "evals/PAPER_SCORING.md. Latency (p50_ms in the JSON) was taken on a shared, loaded machine: not compared here.",
        "",
        "| variant | what | k | Recall@k (controlling) [95% CI] | chain recall | TCA@k [95% CI] | ORR | CRR | LVR |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for vid, row in result["variants"].items():
        what = row["what"] + (
            f" ({row['failed']} of {result['queries']} queries without model text: not scored)" if row.get("failed") else ""
        )
        if row.get("skipped"):
            lines.append(f"| {vid} | {what} | – | skipped: {row['skipped']} | | | | | |")
            continue
        lines.append(
            f"| {vid} | {what} | {row['k']} | {_rate(row['recall'])} | {row['chain_recall']:.3f} | {_rate(row['tca'])} | "
            f"{row['orr']:.3f} | {row['crr']:.3f} | {row['lvr']:.3f} |"
        )
    llm = result.get("llm")
    if llm:
        spent = "; ".join(
            f"{kind}: {e['calls']} calls to the server, {e['cached']} answers from the cache, "
            f"no text for {e['failed']} of {result['queries']} queries"
            for kind, e in llm.items()
            if kind in EXPANSIONS
        )
        lines += [
            "",
            f"Query rewrite and HyDE by `{llm['model']}` (prompts: {llm['prompts']}), one call per query: {spent} "
            "(why, per query: llm.KIND.failures in the JSON).",
        ]
    v = result["variants"]
    lines += [
        "",
        "The seed's central contrast (hybrid; status filter; supersession-aware):",
        "",
        "| | Recall@k (controlling) | chain recall | ORR | TCA@k |",
        "|---|---|---|---|---|",
    ]
    for vid in ("V2", "V4", "C3"):
        row = v[vid]
        lines.append(
            f"| {vid}: {row['what']} | {_rate(row['recall'])} | {row['chain_recall']:.3f} | {row['orr']:.3f} | "
            f"{_rate(row['tca'])} |"
        )
    return "\n".join(lines) + "\n"


def write_ablation(result: dict[str, Any], out_dir: Path, command: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{result['suite']}-ablation.json"
    json_path.write_text(json.dumps({**result, "command": command}, indent=1) + "\n", encoding="utf-8")
    md_path = out_dir / f"{result['suite']}-ablation.md"
    md_path.write_text(markdown(result, command), encoding="utf-8")
    return [json_path, md_path]
