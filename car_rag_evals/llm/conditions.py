"""The retrieval conditions a reader answers under, and one job (model call) per query and
condition: the question, the context that condition puts in front of the reader, what the
context held, and that context as the authority guard judges an answer against it.

Each condition shows the evidence in one form of :func:`car_rag.render` (:data:`CONDITION_FORMS`).
``car-xml`` and ``car-xml-omit``, the audit conditions' former names, are accepted for one
release with a warning; runs recorded under them are read as ``car-audit`` and ``car-audit-omit``
(:func:`condition_name`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag.deprecation import warn_renamed
from car_rag.eval.answers import suite_kind
from car_rag.evidence import EvidenceForm, SupersededMode, approx_tokens, build_packets, render
from car_rag.evidence.plain import clip_text, oldest_first
from car_rag.guard import GuardEvidence, scope_evidence, seen_evidence
from car_rag.prompts import answer_messages, plain_messages, reader_messages
from car_rag.queries import load_queries
from car_rag.retriever import AnchorMode, ControllingAuthorityRetriever
from car_rag_evals.suites import open_suite_store

__all__ = [
    "AS_ASKED",
    "CONDITIONS",
    "CONDITION_FORMS",
    "DEFAULT_CONDITIONS",
    "QUESTION_SUFFIX",
    "RENAMED_CONDITIONS",
    "Job",
    "build_jobs",
    "condition_name",
]

CONDITIONS = (
    "dense",
    "car-plain",
    "fresh-plain",
    "car-audit",
    "car-audit-omit",
    "car-reader",
    "car-reader-repair",
    "closed-book",
)
DEFAULT_CONDITIONS = ("dense", "car-plain", "fresh-plain", "car-audit", "car-reader", "car-reader-repair")
CONDITION_FORMS: dict[str, EvidenceForm | None] = {
    "dense": "plain",
    "car-plain": "plain",
    "fresh-plain": "plain",
    "car-audit": "audit",
    "car-audit-omit": "audit",
    "car-reader": "reader",
    "car-reader-repair": "reader",
    "closed-book": None,
}
"""The evidence form each condition shows (None: no evidence)."""
RENAMED_CONDITIONS = {"car-xml": "car-audit", "car-xml-omit": "car-audit-omit"}
"""Former condition names: runs recorded before the rename say them."""


def condition_name(name: str) -> str:
    """The current name of a condition as a run recorded it (a former name reads as the new one)."""
    return RENAMED_CONDITIONS.get(name, name)


QUESTION_SUFFIX = {
    "security": "Is the vulnerability patched? If so, what version fixes it?",
    "legal": "Is the ruling still good law, or has it been overruled?",
    "compliance": "Is the pre-clearance still active, is the trade compliant (e.g. under an exception), or is it non-compliant?",
}
AS_ASKED = "as-asked"
"""The ``kind`` that asks each question as written, with no kind's follow-up: for a suite no
answer classifier reads (a corpus of your own, in the run report)."""
CLOSED_SYSTEM = "You answer questions. Be concise."


@dataclass
class Job:
    """One model call: a query under a condition, its messages and what its context held.
    ``result`` is car-rag's retrieval for the query; neither it nor ``evidence`` is written out."""

    query_id: str
    condition: str
    messages: list[dict[str, str]]
    meta: dict[str, Any] = field(default_factory=dict)
    result: Any = field(default=None, repr=False, compare=False)
    evidence: GuardEvidence | None = field(default=None, repr=False, compare=False)
    """What the reader saw, as the guard judges an answer against it (None: no retrieval ran)."""


def _clipped_packets(result: Any, policy: Any, k: int, max_chars: int | None) -> list[Any]:
    return [
        p.model_copy(update={"content": p.content.model_copy(update={"raw_text": clip_text(p.text, max_chars)})})
        for p in build_packets(result, policy, k, provenance=True)
    ]


def build_jobs(
    suite: Any,
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    *,
    k: int = 5,
    stores_dir: Path = Path(".car-stores"),
    limit: int | None = None,
    query_ids: Sequence[str] | None = None,
    anchors: AnchorMode = "hybrid",
    k1: int = 10,
    max_doc_chars: int | None = None,
    evidence_budget: float | None = 1500,
    progress: bool = True,
    kind: str | None = None,
    audit_layout: str = "compact",
    xml_form: str | None = None,
) -> list[Job]:
    """Messages for every query × condition of ``suite``, contexts from the suite's store.

    Every condition gets the same text policy: each record's text whole (or cut to
    ``max_doc_chars``), and the context fitted to ``evidence_budget`` tokens
    (:func:`~car_rag.evidence.budget.approx_tokens`) by leaving out whole records, least useful
    first. ``kind`` ("security", "legal", "compliance") picks the question asked of the
    reader; by default it follows the built-in suite's name (needed for a user corpus);
    :data:`AS_ASKED` asks the question as written.
    ``query_ids`` keeps those queries only (a held-out sample), ``limit`` the first N.
    ``audit_layout`` is the audit conditions' XML: ``compact`` or ``full`` (``xml_form``, its
    former name, warns). ``car-reader-repair`` needs no job of its own:
    :func:`~car_rag_evals.llm.runner.repair_rows` makes it from the ``car-reader`` answers."""
    if xml_form is not None:
        warn_renamed("build_jobs(xml_form=...)", "audit_layout=...")
        audit_layout = xml_form
    if audit_layout not in ("compact", "full"):
        raise ValueError(f"audit_layout must be 'compact' or 'full', got {audit_layout!r}")
    for old in [c for c in conditions if c in RENAMED_CONDITIONS]:
        warn_renamed(f"eval-llm condition {old!r}", repr(RENAMED_CONDITIONS[old]))
    conditions = [condition_name(c) for c in conditions]
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"unknown conditions {unknown}; choose from {list(CONDITIONS)}")
    if "car-reader-repair" in conditions and "car-reader" not in conditions:
        raise ValueError("car-reader-repair repairs car-reader's answers: ask for car-reader too")
    suffix = "" if kind == AS_ASKED else QUESTION_SUFFIX[kind or suite_kind(suite.name)]
    queries = load_queries(suite.queries)
    if query_ids is not None:
        wanted = set(query_ids)
        missing = sorted(wanted - {q.query_id for q in queries})
        if missing:
            raise ValueError(f"{len(missing)} query ids are not in suite {suite.name!r}, first: {missing[:3]}")
        queries = [q for q in queries if q.query_id in wanted]
    queries = queries[:limit]
    needs_store = any(c != "closed-book" for c in conditions)
    store = open_suite_store(suite, stores_dir, progress) if needs_store else None
    retriever = ControllingAuthorityRetriever(store, anchors=anchors, k1=k1, depth=max(50, k1)) if store else None
    # One record too long for the whole budget must not empty the audit XML (it drops whole packets only).
    audit_chars = max_doc_chars if max_doc_chars is not None else (int(evidence_budget * 3) if evidence_budget else None)
    jobs = []
    for q in queries:
        question = f"{q.query}\n{suffix}" if suffix else q.query
        gold = set(q.gold_doc_ids)
        result = retriever.retrieve(q.query) if retriever else None
        for cond in conditions:
            if cond == "car-reader-repair":
                continue
            context = ""
            seen: dict[str, Any] = {}  # what the reader saw, beyond ``ids``, as seen_evidence takes it
            if cond == "closed-book":
                messages = [{"role": "system", "content": CLOSED_SYSTEM}, {"role": "user", "content": question}]
                ids: list[str] = []
            elif cond == "dense":
                assert store is not None  # every condition but closed-book has one
                hits = store.dense.search(store.embedder.encode([q.query])[0], k)
                ids = [h.doc_id for h in hits]
                context = render([store.records[d] for d in ids], "plain", token_budget=evidence_budget, max_chars=max_doc_chars)
                messages = plain_messages(question, context)
            elif cond in ("car-plain", "fresh-plain"):
                assert result is not None
                records = [r.record for r in result.top(k)]
                ids = [r.doc_id for r in records]
                dated = cond == "fresh-plain"
                context = render(records, "plain", token_budget=evidence_budget, max_chars=max_doc_chars, dated=dated)
                messages = plain_messages(question, context, dated=dated)
                if dated:  # numbered as shown: oldest first
                    seen["shown"] = [r.doc_id for r in oldest_first(records)]
            elif cond == "car-reader":
                assert store is not None and result is not None
                context = render(result, "reader", policy=store.policy, k=k, token_budget=evidence_budget, query_id=q.query_id)
                ids = [r.doc_id for r in result.top(k)]
                messages = reader_messages(question, context)
                seen.update(numbers=[r.rank for r in result.top(k)], provenance=True)
            else:
                assert store is not None and result is not None
                mode: SupersededMode = "omit" if cond == "car-audit-omit" else "include"
                packets = _clipped_packets(result, store.policy, k, audit_chars)
                # Retrieval scores and matched terms say nothing about the answer: left out.
                context = render(
                    packets,
                    "audit",
                    superseded=mode,
                    token_budget=evidence_budget,
                    query_id=q.query_id,
                    rationale=False,
                    compact=audit_layout == "compact",
                )
                shown = [r for r in result.top(k) if mode == "include" or r.status == "active"]
                ids = [r.doc_id for r in shown]
                messages = answer_messages(question, context)
                # The omitted records are named by packet id only: a citation of one is not judged.
                seen.update(numbers=[r.rank for r in shown], provenance=mode == "include", unnumbered=mode == "omit" or None)
            meta = {
                "context_doc_ids": ids,
                "controlling_in_context": bool(gold & set(ids)) if cond != "closed-book" else False,
                "context_tokens": round(approx_tokens(context)),
            }
            evidence = _guard_evidence(store, result, cond, seen.pop("shown", ids), context, k, seen) if result else None
            jobs.append(Job(q.query_id, cond, messages, meta, result, evidence))
    return jobs


def _guard_evidence(
    store: Any, result: Any, condition: str, ids: list[str], context: str, k: int, seen: dict[str, Any]
) -> GuardEvidence:
    """The context of one job as the authority guard judges an answer against it: the records
    shown, numbered as shown, with the rendered text (closed-book showed nothing: the whole
    scopes of car-rag's top ``k``). The ambiguity is the retrieval's, as ``car-rag guard``
    takes it for an answers file."""
    form = CONDITION_FORMS[condition]
    if form is None:
        return scope_evidence(result, store.graph, store.policy, k=k)
    return seen_evidence(
        store.graph,
        ids,
        store.policy,
        form=form,
        text=context,
        ambiguity=result.ambiguity,
        subject=result,
        query=result.query,
        **seen,
    )
