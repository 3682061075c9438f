"""Per-query drill-down data: the question, each system's top k or each condition's answer,
the authority chain as layered nodes and rule-named edges, and the evidence a reader saw.

Records, chains and evidence come from the suite's store (the same one the run read); the
evidence is rendered again by the eval-llm job builder with the run's own options, so the
audit and reader forms are the ones a model was (or would be) given.
"""

from __future__ import annotations

import contextlib
import io
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from car_rag.evidence.xml_tree import iso_date
from car_rag.graph import AuthorityGraph
from car_rag.queries import Query, load_queries
from car_rag.records import Record
from car_rag_evals.report.runs import Run

__all__ = ["chain_of", "drilldown", "record_entry"]

TEXT_CHARS = 2000
"""A record's text in the page is cut here (the evidence forms carry what a reader saw)."""


def chain_of(query: Query, graph: AuthorityGraph) -> dict[str, Any]:
    """The query's chain closed under supersession: nodes with their layer (0 = voids
    nothing shown, each superseder one further right), edges ``[superseder, target, rule]``
    and the active frontier."""
    nodes = sorted(graph.closure(d for d in [*query.chain_doc_ids, *query.anchor_doc_ids, *query.gold_doc_ids] if d in graph))
    members = set(nodes)
    edges = sorted({(e.superseder, e.target, e.rule) for d in nodes for e in graph.superseders(d) if e.superseder in members})
    below: dict[str, list[str]] = {d: [] for d in nodes}
    for sup, target, _ in edges:
        below[sup].append(target)
    layer: dict[str, int] = {}

    def depth(d: str, seen: frozenset[str] = frozenset()) -> int:
        if d not in layer:
            layer[d] = 1 + max((depth(t, seen | {d}) for t in below[d] if t not in seen), default=-1)
        return layer[d]

    return {
        "nodes": [[d, depth(d)] for d in nodes],
        "edges": [list(e) for e in edges],
        "frontier": sorted(graph.frontier(nodes)),
    }


def record_entry(record: Record, graph: AuthorityGraph) -> dict[str, Any]:
    text = record.text if len(record.text) <= TEXT_CHARS else record.text[:TEXT_CHARS] + " …"
    return {
        "type": record.doc_type,
        "status": "superseded" if graph.is_superseded(record.doc_id) else "active",
        "date": iso_date(record.effective_at or record.published_at),
        "text": text,
    }


def _eval_llm_options(command: str | None) -> tuple[dict[str, Any], str | None]:
    """The context options of an eval-llm command line (as its report.json recorded it)."""
    from car_rag.cli import build_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(shlex.split(command or "")[1:])
    except (SystemExit, ValueError):
        return {}, f"the run's command is not known ({command!r}): evidence rendered with eval-llm's defaults"
    # A command recorded before the audit conditions' rename says --xml-form.
    layout = getattr(args, "audit_layout", None) or getattr(args, "xml_form", None) or "compact"
    return {
        "k": args.k,
        "max_doc_chars": args.max_doc_chars,
        "evidence_budget": args.evidence_budget,
        "audit_layout": layout,
    }, None


def _contexts(
    run: Run, suite: Any, ids: list[str], stores_dir: Path, problems: list[str], kind: str | None
) -> dict[str, dict[str, str]]:
    """query id -> form -> the user message a reader got: ``reader`` and ``audit`` forms of
    car-rag's evidence, and for an LLM run every condition's own context. ``kind`` is the
    question's (None: the built-in suite's own)."""
    from car_rag_evals.llm.conditions import CONDITIONS, build_jobs, condition_name

    forms = {"car-reader": "reader", "car-audit": "audit"}
    recorded: dict[str, str] = {}  # condition -> as the run recorded it (a run before the rename says car-xml)
    if run.kind == "llm":
        options, problem = _eval_llm_options((run.llm_report or {}).get("command"))
        if problem:
            problems.append(problem)
        for c in dict.fromkeys(a["condition"] for a in run.answers):
            if condition_name(c) in CONDITIONS and c != "car-reader-repair":
                recorded[condition_name(c)] = c
    else:
        options = {"k": (run.bench or {}).get("k", 5)}
    conditions = tuple(dict.fromkeys([*recorded, *forms]))
    out: dict[str, dict[str, str]] = {}
    for job in build_jobs(suite, conditions, stores_dir=stores_dir, query_ids=ids, progress=False, kind=kind, **options):
        text = job.messages[-1]["content"]
        entry = out.setdefault(job.query_id, {})
        if job.condition in forms:
            entry[forms[job.condition]] = text
        if job.condition in recorded:
            entry[recorded[job.condition]] = text
    return out


def _bench_systems(run: Run, ids: Iterable[str], problems: list[str]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """query id -> system -> its top k and scores; and the systems' order and labels."""
    by_query: dict[str, dict[str, Any]] = {d: {} for d in ids}
    systems = []
    for name, entry in (run.bench or {}).get("systems", {}).items():
        systems.append({"name": name, "label": entry.get("label", name)})
        rows = entry.get("per_query", [])
        if rows and "top" not in rows[0]:
            problems.append(f"{name}: no top-k ids in the bench result (written before `bench` recorded them): rerun bench")
        for row in rows:
            if row.get("query_id") in by_query:
                by_query[row["query_id"]][name] = {
                    "top": row.get("top"),
                    "tca": row.get("tca"),
                    "rank": row.get("gold_rank"),
                    "ignored": row.get("ignored", []),
                }
    return by_query, systems


def _answers(run: Run) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for row in run.answers:
        guard = row.get("guard") or {}
        out.setdefault(row["query_id"], {})[row["condition"]] = {
            "answer": row.get("answer", ""),
            "label": row.get("label"),
            "reason": row.get("reason"),
            "ctx": row.get("context_doc_ids", []),
            "guard": {"flagged": guard.get("flagged"), "reason": guard.get("reason"), "findings": guard.get("findings", [])}
            if guard
            else None,
        }
    return out


def drilldown(
    run: Run, suite: Any, *, stores_dir: Path, evidence: bool, problems: list[str], kind: str | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The page's queries, records (only those shown anywhere) and systems/conditions; ``kind``
    as :func:`~car_rag_evals.llm.conditions.build_jobs` takes it."""
    from car_rag_evals.suites import open_suite_store

    queries = load_queries(suite.queries)
    if run.kind == "llm":
        asked = {a["query_id"] for a in run.answers}
        queries = [q for q in queries if q.query_id in asked]
    ids = [q.query_id for q in queries]
    store = open_suite_store(suite, stores_dir, progress=False)
    graph = store.graph
    systems, columns = _bench_systems(run, ids, problems) if run.kind == "bench" else ({}, [])
    answers = _answers(run) if run.kind == "llm" else {}
    if run.kind == "llm":
        columns = [{"name": c, "label": c} for c in dict.fromkeys(a["condition"] for a in run.answers)]
    contexts = _contexts(run, suite, ids, stores_dir, problems, kind) if evidence else {}
    shown: set[str] = set()
    rows = []
    for q in queries:
        chain = chain_of(q, graph)
        per_system = systems.get(q.query_id, {})
        per_answer = answers.get(q.query_id, {})
        shown.update(d for d, _ in chain["nodes"])
        shown.update(d for s in per_system.values() for d in s["top"] or ())
        shown.update(d for a in per_answer.values() for d in a["ctx"])
        rows.append(
            {
                "id": q.query_id,
                "q": q.query,
                "hop": q.hop_type,
                "gold_answer": q.answer,
                "gold": q.gold_doc_ids,
                "anchors": q.anchor_doc_ids,
                "chain": chain,
                "systems": per_system,
                "answers": per_answer,
                "evidence": contexts.get(q.query_id, {}),
            }
        )
    records = {d: record_entry(store.records[d], graph) for d in sorted(shown) if d in store.records}
    unknown = sorted(shown - set(records))
    if unknown:
        problems.append(f"{len(unknown)} record ids in the run are not in the suite's store, first: {unknown[:3]}")
    return rows, records, columns
