"""``car-rag report``: one self-contained HTML page for a bench or eval-llm run, so a reader
can go from "this system was confidently wrong on query 57" to the records it showed, the
supersession that made another record controlling, the evidence and the reader's words.

* :mod:`~car_rag_evals.report.runs` — reading a run directory, noting what is missing;
* :mod:`~car_rag_evals.report.drilldown` — per-query data: top k, chain, answers, evidence;
* :mod:`~car_rag_evals.report.page` — the static page (inline CSS/JS, data as escaped JSON).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from car_rag.eval.answers import suite_kind
from car_rag_evals.report.runs import Run, read_run

__all__ = ["build_report", "overview"]


def _rate(rate: dict[str, Any] | None) -> str:
    if not rate:
        return "–"
    lo, hi = rate["ci95"]
    return f"{rate['value']:.3f} [{lo:.2f}, {hi:.2f}]"


def overview(run: Run) -> dict[str, Any]:
    """The headline table: per system (bench) or condition (LLM), rates with Wilson 95%."""
    if run.kind == "bench" and run.bench:
        k = run.bench.get("k", 5)
        head = ["system", f"TCA@{k} [95% CI]", f"hit@{k}", f"anchor recall@{k}", "MRR", "LVR", "ORR", "CRR", "p50 ms"]
        rows = []
        for name, entry in run.bench["systems"].items():
            s = entry.get("summary", {})
            rows.append(
                [
                    entry.get("label", name),
                    _rate(s.get("tca")),
                    _rate(s.get("hit")),
                    _rate(s.get("anchor_recall")),
                    *(f"{s[m]:.3f}" if isinstance(s.get(m), (int, float)) else "–" for m in ("mrr", "lvr", "orr", "crr")),
                    f"{entry.get('latency_ms', {}).get('p50', float('nan')):.2f}",
                ]
            )
        paper = run.bench.get("reference") or {}
        note = "Paper (TCA@5): " + "; ".join(f"{n} {v:.3f}" for n, v in paper.items()) if paper else ""
        return {"head": head, "rows": rows, "note": note}
    if run.kind == "llm" and run.llm_report:
        labels = run.llm_report.get("labels", [])
        head = ["condition", "n", *labels, "controlling in context"]
        rows = [
            [
                cond,
                str(entry.get("n", "")),
                *(_rate(entry.get("rates", {}).get(lab)) for lab in labels),
                _rate(entry.get("controlling_in_context")),
            ]
            for cond, entry in run.llm_report.get("conditions", {}).items()
        ]
        return {"head": head, "rows": rows, "note": ""}
    return {"head": [], "rows": [], "note": ""}


def _classified(suite: Any) -> bool:
    """Whether an answer classifier reads the suite's answers (the built-in suites' kinds)."""
    try:
        suite_kind(suite.name)
    except ValueError:
        return False
    return True


def build_report(
    path: Path,
    out: Path,
    *,
    suite_name: str | None = None,
    suite: Any = None,
    corpora_dir: Path | None = None,
    stores_dir: Path = Path(".car-stores"),
    evidence: bool = True,
) -> Path:
    """Read the run at ``path``, write its page to ``out``. ``suite`` (a Suite) overrides the
    built-in suite the run names (a user corpus); without either the page has the run's
    numbers only, and says so."""
    from car_rag_evals.llm.conditions import AS_ASKED
    from car_rag_evals.report.drilldown import drilldown
    from car_rag_evals.report.page import render_page
    from car_rag_evals.suites import load_suite

    run = read_run(path, suite_name)
    problems = run.problems
    queries: list[dict[str, Any]] = []
    records: dict[str, Any] = {}
    columns: list[dict[str, Any]] = []
    if suite is None and run.suite is not None:
        try:
            suite = load_suite(run.suite, corpora_dir)
        except (ValueError, FileNotFoundError) as exc:
            problems.append(f"suite data unavailable, no per-query drill-down: {exc}")
    elif suite is None:
        problems.append("the suite is unknown (no report.json): pass --suite for questions, chains and evidence")
    if suite is not None:
        kind = None if _classified(suite) else AS_ASKED
        if kind is not None:
            problems.append(
                f"suite {suite.name!r} has no answer classifier (a corpus of your own): no answer is "
                "classified, and the evidence is shown for each question as asked"
            )
        queries, records, columns = drilldown(run, suite, stores_dir=stores_dir, evidence=evidence, problems=problems, kind=kind)
    meta = run.bench or run.llm_report or {}
    data = {
        "kind": run.kind,
        "suite": run.suite,
        "source": str(path),
        "command": meta.get("command"),
        "generated": meta.get("generated"),
        "built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "k": (run.bench or {}).get("k", 5),
        "description": (run.bench or {}).get("description"),
        "labels": (run.llm_report or {}).get("labels") or sorted({str(a.get("label")) for a in run.answers}),
        "overview": overview(run),
        "images": run.images,
        "problems": problems,
        "columns": columns,
        "queries": queries,
        "records": records,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(data, f"car-rag report: {run.suite or path.name} ({run.kind})"), encoding="utf-8")
    return out
