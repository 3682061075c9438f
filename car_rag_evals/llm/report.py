"""The reader evaluation's report: answers read, classified and counted per condition, paired
condition against condition, written as JSONL, JSON, markdown and a plot."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from car_rag.eval.answers import Classification, GoldAnswer, classify, labels_for
from car_rag.eval.stats import Rate, mcnemar_exact
from car_rag.extras import require
from car_rag.records import json_line_error
from car_rag_evals.llm.conditions import condition_name

__all__ = ["PAIRS", "classify_rows", "markdown", "paired", "plot", "read_answers", "report", "write_report"]


def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """An answers JSONL (``query_id``, ``condition``, ``answer``; extra fields kept); a bad line
    is a ValueError naming it."""
    rows = []
    with Path(path).open(encoding="utf-8-sig") as handle:  # lines end at a line break only (not at U+2028)
        lines = list(handle)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: {json_line_error(exc)}") from exc
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        missing = [f for f in ("query_id", "condition", "answer") if f not in row]
        if missing:
            raise ValueError(f"{path}:{number}: missing field(s) {missing}")
        rows.append(row)
    return rows


def classify_rows(
    rows: Sequence[dict[str, Any]],
    suite_name: str,
    gold: dict[str, GoldAnswer],
    classifier: Callable[[str, str, GoldAnswer], Classification] = classify,
) -> list[dict[str, Any]]:
    unknown = sorted({r["query_id"] for r in rows} - set(gold))
    if unknown:
        raise ValueError(f"{len(unknown)} query ids not in suite {suite_name!r}, first: {unknown[:3]}")
    out = []
    for r in rows:
        c = classifier(r["answer"], suite_name, gold[r["query_id"]])
        extra = {k: v for k, v in r.items() if k not in ("query_id", "condition", "answer", "label", "reason")}
        if isinstance(r.get("original_answer"), str):
            extra["original_label"] = classifier(r["original_answer"], suite_name, gold[r["query_id"]]).label
        out.append(
            {
                "query_id": r["query_id"],
                "condition": r["condition"],
                "answer": r["answer"],
                "label": c.label,
                "reason": c.reason,
                **extra,
            }
        )
    return out


def report(labelled: Sequence[dict[str, Any]], suite_name: str) -> dict[str, Any]:
    """Per condition: n, each label's rate (Wilson 95%), label × controlling-in-context,
    context size, and the guard's flags; the repair's before → after when it ran."""
    labels = labels_for(suite_name)
    conditions: dict[str, Any] = {}
    for cond in dict.fromkeys(r["condition"] for r in labelled):
        rows = [r for r in labelled if r["condition"] == cond]
        counts = collections.Counter(r["label"] for r in rows)
        entry: dict[str, Any] = {"n": len(rows), "rates": {lab: Rate(counts[lab], len(rows)).to_dict() for lab in labels}}
        known = [r for r in rows if isinstance(r.get("controlling_in_context"), bool)]
        if known:
            entry["controlling_in_context"] = Rate(sum(r["controlling_in_context"] for r in known), len(known)).to_dict()
            table = {}
            for flag in (True, False):
                sub = [r for r in known if r["controlling_in_context"] is flag]
                c = collections.Counter(r["label"] for r in sub)
                table["in_context" if flag else "not_in_context"] = {
                    "n": len(sub),
                    "counts": {lab: c[lab] for lab in labels},
                    "rates": {lab: Rate(c[lab], len(sub)).to_dict() for lab in labels},
                }
            entry["by_retrieval"] = table
        for key in ("context_tokens", "prompt_tokens"):
            values = sorted(r[key] for r in rows if isinstance(r.get(key), int))
            if values:
                entry[key] = {"median": values[len(values) // 2], "n": len(values)}
        judged = [r for r in rows if isinstance(r.get("guard"), dict) and r["guard"].get("judged")]
        if any(isinstance(r.get("guard"), dict) for r in rows):
            kinds = collections.Counter(f["kind"] for r in judged for f in r["guard"]["findings"])
            flagged = [r for r in judged if r["guard"]["flagged"]]
            entry["guard"] = {
                "judged": len(judged),
                "not_judged": sum(isinstance(r.get("guard"), dict) for r in rows) - len(judged),
                "flagged": Rate(len(flagged), len(judged)).to_dict() if judged else None,
                "findings": dict(sorted(kinds.items())),
                "flagged_by_label": dict(collections.Counter(r["label"] for r in flagged)),
            }
        conditions[cond] = entry
    out = {
        "suite": suite_name,
        "labels": list(labels),
        "conditions": conditions,
        "paired": paired(labelled),
        "paired_correct": paired(labelled, "correct"),
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    repaired = [r for r in labelled if r.get("repaired") is True]
    if any("original_label" in r for r in labelled):
        out["repair"] = {
            "answers": sum("original_label" in r for r in labelled),
            "repaired": len(repaired),
            "transitions": dict(collections.Counter(f"{r['original_label']} -> {r['label']}" for r in repaired)),
            "correct_broken": sum(r["original_label"] == "correct" and r["label"] != "correct" for r in repaired),
            "queries": [
                {
                    "query_id": r["query_id"],
                    "before": r["original_label"],
                    "after": r["label"],
                    "findings": [f["kind"] for f in r.get("repair_findings", [])],
                }
                for r in repaired
            ],
        }
    return out


PAIRS = (
    ("dense", "car-audit"),
    ("car-plain", "car-audit"),
    ("dense", "car-plain"),
    ("car-audit", "car-audit-omit"),
    ("car-plain", "car-reader"),
    ("fresh-plain", "car-reader"),
    ("car-audit", "car-reader"),
    ("dense", "car-reader"),
    ("car-reader", "car-reader-repair"),
    ("dense", "car-reader-repair"),
    ("car-plain", "fresh-plain"),
)
"""Condition pairs compared query by query: retrieval, the evidence forms against each
other and against plain text, and the guard's repair."""


def paired(
    labelled: Sequence[dict[str, Any]], label: str = "confident_wrong", pairs: Sequence[tuple[str, str]] = PAIRS
) -> list[dict[str, Any]]:
    """For each pair of conditions both present: on the queries answered under both, how
    many were ``label`` under A only, under B only, under both; ratio of rates; exact
    McNemar p-value (the same queries and reader on both sides, so pair them). A run recorded
    under a condition's former name pairs under it (:func:`condition_name`), and is named as recorded."""
    by: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for r in labelled:
        by[r["condition"]][r["query_id"]] = r["label"]
    recorded = {condition_name(c): c for c in by}
    out = []
    for a, b in pairs:
        if a not in recorded or b not in recorded:
            continue
        a, b = recorded[a], recorded[b]
        shared = sorted(set(by[a]) & set(by[b]))
        in_a = {q for q in shared if by[a][q] == label}
        in_b = {q for q in shared if by[b][q] == label}
        only_a, only_b = len(in_a - in_b), len(in_b - in_a)
        out.append(
            {
                "a": a,
                "b": b,
                "label": label,
                "n": len(shared),
                "a_count": len(in_a),
                "b_count": len(in_b),
                "only_a": only_a,
                "only_b": only_b,
                "both": len(in_a & in_b),
                "ratio_b_to_a": round(len(in_b) / len(in_a), 4) if in_a else None,
                "mcnemar_p": round(mcnemar_exact(only_a, only_b), 6),
            }
        )
    return out


def _cell(rate: dict) -> str:
    lo, hi = rate["ci95"]
    return f"{rate['value']:.3f} [{lo:.2f}, {hi:.2f}] ({rate['successes']})"


def _paired_table(pairs: list[dict[str, Any]], what: str) -> list[str]:
    lines = [
        "",
        f"{what}, condition against condition on the same queries (exact McNemar test):",
        "",
        f"| A | B | queries | {what.lower()} under A | under B | B / A | A only | B only | p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        ratio = "–" if p["ratio_b_to_a"] is None else f"{p['ratio_b_to_a']:.2f}"
        lines.append(
            f"| {p['a']} | {p['b']} | {p['n']} | {p['a_count']} | {p['b_count']} | {ratio} | {p['only_a']} | "
            f"{p['only_b']} | {p['mcnemar_p']:.3g} |"
        )
    return lines


def markdown(rep: dict[str, Any], command: str) -> str:
    labels = rep.get("labels", [])
    lines = [
        f"# Reader answers on {rep['suite']}",
        "",
        f"Generated by `{command}` on {rep['generated']}. Labels from `car_rag.eval.answers.classify` "
        "(rules; each row's reason is in `answers.labelled.jsonl`). Rates with Wilson 95% intervals (count).",
        "",
        "| condition | n | controlling record in context | " + " | ".join(labels) + " |",
        "|---|---|---|" + "---|" * len(labels),
    ]
    for cond, e in rep["conditions"].items():
        ctx = _cell(e["controlling_in_context"]) if "controlling_in_context" in e else "–"
        lines.append(f"| {cond} | {e['n']} | {ctx} | " + " | ".join(_cell(e["rates"][lab]) for lab in labels) + " |")
    if any("context_tokens" in e or "guard" in e for e in rep["conditions"].values()):
        lines += [
            "",
            "Context size (median tokens: evidence by `approx_tokens`, whole prompt as the server counted it) and the "
            "authority guard's verdict on each answer, judged against car-rag's result for the query:",
            "",
            "| condition | evidence tokens | prompt tokens | guard flagged | not judged | findings | flagged answers by label |",
            "|---|---|---|---|---|---|---|",
        ]
        for cond, e in rep["conditions"].items():
            g = e.get("guard") or {}
            flagged = _cell(g["flagged"]) if g.get("flagged") else "–"
            findings = ", ".join(f"{k} {v}" for k, v in g.get("findings", {}).items()) or "–"
            by_label = ", ".join(f"{k} {v}" for k, v in g.get("flagged_by_label", {}).items()) or "–"
            lines.append(
                f"| {cond} | {e.get('context_tokens', {}).get('median', '–')} | "
                f"{e.get('prompt_tokens', {}).get('median', '–')} | "
                f"{flagged} | {g.get('not_judged', '–')} | {findings} | {by_label} |"
            )
    if rep.get("paired"):
        lines += _paired_table(rep["paired"], "Confident-wrong answers")
    if rep.get("paired_correct"):
        lines += _paired_table(rep["paired_correct"], "Correct answers")
    if rep.get("repair"):
        rp = rep["repair"]
        lines += [
            "",
            f"Repair (car-reader-repair): {rp['repaired']} of {rp['answers']} car-reader answers flagged by the guard "
            f"and answered again; correct answers the repair turned into something else: {rp['correct_broken']}.",
            "",
        ]
        if rp["transitions"]:
            lines += ["| before -> after | answers |", "|---|---|"]
            lines += [f"| {t} | {n} |" for t, n in sorted(rp["transitions"].items(), key=lambda kv: -kv[1])]
            lines += ["", "| query | before | after | findings |", "|---|---|---|---|"]
            lines += [f"| {q['query_id']} | {q['before']} | {q['after']} | {', '.join(q['findings'])} |" for q in rp["queries"]]
    if any("by_retrieval" in e for e in rep["conditions"].values()):
        lines += [
            "",
            "Label counts by retrieval success (controlling record in the context or not):",
            "",
            "| condition | retrieval | n | " + " | ".join(labels) + " |",
            "|---|---|---|" + "---|" * len(labels),
        ]
        for cond, e in rep["conditions"].items():
            for key, t in e.get("by_retrieval", {}).items():
                counts = " | ".join(str(t["counts"][lab]) for lab in labels)
                lines.append(f"| {cond} | {key.replace('_', ' ')} | {t['n']} | " + counts + " |")
    return "\n".join(lines) + "\n"


def plot(rep: dict[str, Any], path: Path) -> Path:
    require("matplotlib", "llm", "the reader report's plot").use("Agg")
    import matplotlib.pyplot as plt

    conds = list(rep["conditions"])
    labels = rep["labels"]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(conds) + 2), 4))
    for i, lab in enumerate(labels):
        vals = [rep["conditions"][c]["rates"][lab]["value"] for c in conds]
        lo = [v - rep["conditions"][c]["rates"][lab]["ci95"][0] for v, c in zip(vals, conds)]
        hi = [rep["conditions"][c]["rates"][lab]["ci95"][1] - v for v, c in zip(vals, conds)]
        xs = [x + (i - (len(labels) - 1) / 2) * width for x in range(len(conds))]
        ax.bar(xs, vals, width, yerr=[lo, hi], capsize=2, label=lab)
    ax.set_xticks(range(len(conds)), conds)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of answers (Wilson 95%)")
    ax.set_title(f"Reader answers by condition: {rep['suite']}")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(labelled: Sequence[dict[str, Any]], suite_name: str, out_dir: Path, command: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rep = report(labelled, suite_name)
    jsonl = out_dir / "answers.labelled.jsonl"
    with jsonl.open("w", encoding="utf-8") as fh:
        for r in labelled:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    js = out_dir / "report.json"
    js.write_text(json.dumps({**rep, "command": command}, indent=1) + "\n")
    md = out_dir / "report.md"
    md.write_text(markdown(rep, command))
    return [jsonl, js, md, plot(rep, out_dir / "labels.png")]
