"""Fan-in diagnostics (AuthTrace, ../shared/seeds/001): is the evidence a reader needs in the
set it is shown, and does having it predict a correct answer?

The records an answer needs are the query's authority chain (its controlling record
included): fan-in is their number, 1 for T0 (no supersession), 2 for T1, 3 for T2/T3.
Evidence recall is the share of them in the shown set (a bench system's top k, or a reader
condition's context); evidence precision the share of the shown set that is needed. For a
reader run, the correlation of per-answer evidence recall with correctness (point-biserial
Pearson r) comes with a seeded bootstrap 95% interval.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from car_rag.eval.stats import Rate
from car_rag.queries import Query

__all__ = ["evidence_scores", "fanin_table", "recall_correctness", "markdown"]

BOOTSTRAP = 2000


def _needed(query: Query) -> set[str]:
    return set(query.chain_doc_ids) | set(query.gold_doc_ids)


def evidence_scores(query: Query, shown: Sequence[str]) -> tuple[int, float, float]:
    """(fan-in, evidence recall, evidence precision) of one shown set."""
    needed = _needed(query)
    hits = len(needed & set(shown))
    return len(needed), hits / len(needed) if needed else 0.0, hits / len(shown) if shown else 0.0


def _cell(recalls: list[float], precisions: list[float]) -> dict[str, Any]:
    return {
        "n": len(recalls),
        "recall": round(statistics.fmean(recalls), 4),
        "precision": round(statistics.fmean(precisions), 4),
        "complete": Rate(sum(r == 1.0 for r in recalls), len(recalls)).to_dict(),
    }


def fanin_table(shown_by_column: dict[str, dict[str, Sequence[str]]], queries: Sequence[Query]) -> dict[str, dict[str, Any]]:
    """column (system or condition) -> fan-in -> mean recall, mean precision and the rate of
    complete evidence (every needed record shown), over the queries the column answered."""
    out: dict[str, dict[str, Any]] = {}
    for column, shown in shown_by_column.items():
        cells: dict[int, tuple[list[float], list[float]]] = {}
        for q in queries:
            if q.query_id in shown:
                fanin, recall, precision = evidence_scores(q, shown[q.query_id])
                rs, ps = cells.setdefault(fanin, ([], []))
                rs.append(recall)
                ps.append(precision)
        out[column] = {str(f): _cell(*cells[f]) for f in sorted(cells)}
    return out


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return statistics.correlation(xs, ys)


def recall_correctness(pairs: Sequence[tuple[float, bool]], seed: int = 0) -> dict[str, Any]:
    """Pearson r of evidence recall with correctness (1/0), and its bootstrap 95% interval
    (resampling answers; resamples where either variable is constant are dropped). ``r`` is
    None when it is undefined (a constant variable)."""
    xs = [x for x, _ in pairs]
    ys = [float(y) for _, y in pairs]
    r = _pearson(xs, ys)
    result: dict[str, Any] = {"n": len(pairs), "r": None if r is None else round(r, 3), "ci95": None}
    if r is None:
        return result
    rng = random.Random(seed)
    draws = []
    for _ in range(BOOTSTRAP):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        value = _pearson([x for x, _ in sample], [float(y) for _, y in sample])
        if value is not None:
            draws.append(value)
    draws.sort()
    result["ci95"] = [round(draws[int(0.025 * (len(draws) - 1))], 3), round(draws[int(0.975 * (len(draws) - 1))], 3)]
    return result


def reader_diagnostics(answers: Sequence[dict[str, Any]], queries: Sequence[Query]) -> dict[str, Any]:
    """Per condition and pooled: evidence recall of each answer's context against correctness."""
    by_id = {q.query_id: q for q in queries}
    pairs: dict[str, list[tuple[float, bool]]] = {}
    for a in answers:
        query = by_id.get(a["query_id"])
        if query is None or "context_doc_ids" not in a or a.get("label") is None:
            continue
        _, recall, _ = evidence_scores(query, a["context_doc_ids"])
        pairs.setdefault(a["condition"], []).append((recall, a["label"] == "correct"))
    out = {c: recall_correctness(p) for c, p in pairs.items()}
    out["all conditions"] = recall_correctness([p for ps in pairs.values() for p in ps])
    return out


def _fmt_rate(rate: dict[str, Any]) -> str:
    lo, hi = rate["ci95"]
    return f"{rate['value']:.2f} [{lo:.2f}, {hi:.2f}]"


def markdown(result: dict[str, Any]) -> str:
    fanins = sorted({f for cells in result["table"].values() for f in cells}, key=int)
    lines = [
        f"# Fan-in diagnostics: {result['suite']} (k = {result['k']})",
        "",
        "Evidence recall (share of the chain's records in the top k), evidence precision (share of the top k that "
        "is in the chain) and complete evidence (every chain record shown, Wilson 95%) by fan-in, the number of "
        "records the answer needs (1 = T0, 2 = T1, 3 = T2/T3). As in AuthTrace, every chain record counts as "
        "needed, the voided ones too: a retriever that ranks superseded records below the top k (car-rag's provenance "
        "mode) loses recall here by design, so read recall beside TCA. See car_rag_evals/fanin.py.",
        f"Generated by `{result['command']}` from `{result['source']}`.",
        "",
        "| system | " + " | ".join(f"fan-in {f}: recall / precision / complete (n)" for f in fanins) + " |",
        "|---|" + "---|" * len(fanins),
    ]
    for column, cells in result["table"].items():
        parts = []
        for f in fanins:
            c = cells.get(f)
            cell = f"{c['recall']:.2f} / {c['precision']:.2f} / {_fmt_rate(c['complete'])} ({c['n']})" if c else "–"
            parts.append(cell)
        lines.append(f"| {result['labels'].get(column, column)} | " + " | ".join(parts) + " |")
    reader = result.get("reader")
    if reader:
        lines += [
            "",
            f"Reader run `{result['reader_source']}`: Pearson r of each answer's evidence recall (its context "
            "against the chain) with a correct label, bootstrap 95% interval (2,000 resamples of answers).",
            "",
            "| condition | n | r [95% CI] |",
            "|---|---|---|",
        ]
        for cond, c in reader.items():
            r = "undefined (a constant variable)" if c["r"] is None else f"{c['r']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"
            lines.append(f"| {cond} | {c['n']} | {r} |")
    return "\n".join(lines) + "\n"


def run_fanin(bench_path: Path, *, reader_dir: Path | None, corpora_dir: Path | None, command: str) -> dict[str, Any]:
    """The fan-in table of a bench result (its top k per query), and, with ``reader_dir``,
    the recall-correctness correlation of that eval-llm run."""
    from car_rag.queries import load_queries
    from car_rag_evals.report.runs import read_run
    from car_rag_evals.suites import load_suite

    bench = json.loads(bench_path.read_text(encoding="utf-8"))
    queries = load_queries(load_suite(bench["suite"], corpora_dir).queries)
    shown: dict[str, dict[str, Sequence[str]]] = {}
    for name, entry in bench["systems"].items():
        rows = entry["per_query"]
        if rows and "top" not in rows[0]:
            raise ValueError(f"{bench_path}: no top-k ids per query (written before bench recorded them): rerun bench")
        shown[name] = {r["query_id"]: r["top"] for r in rows}
    result: dict[str, Any] = {
        "suite": bench["suite"],
        "k": bench["k"],
        "source": str(bench_path),
        "command": command,
        "labels": {n: e["label"] for n, e in bench["systems"].items()},
        "table": fanin_table(shown, queries),
    }
    if reader_dir is not None:
        run = read_run(reader_dir)
        if run.problems:
            raise ValueError(f"{reader_dir}: " + "; ".join(run.problems))
        result["reader_source"] = str(reader_dir)
        result["reader"] = reader_diagnostics(run.answers, queries)
    return result
