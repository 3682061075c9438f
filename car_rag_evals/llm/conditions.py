"""The retrieval conditions a reader answers under, and one job (model call) per query and
condition: the question, the context that condition puts in front of the reader, and what
the context held."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag.eval.answers import suite_kind
from car_rag.evidence import approx_tokens, build_packets, render_plain, render_reader, render_xml
from car_rag.evidence.plain import clip_text
from car_rag.prompts import answer_messages, plain_messages, reader_messages
from car_rag.queries import load_queries
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag_evals.suites import open_suite_store

__all__ = ["AS_ASKED", "CONDITIONS", "DEFAULT_CONDITIONS", "QUESTION_SUFFIX", "Job", "build_jobs"]

CONDITIONS = ("dense", "car-plain", "fresh-plain", "car-xml", "car-xml-omit", "car-reader", "car-reader-repair", "closed-book")
DEFAULT_CONDITIONS = ("dense", "car-plain", "fresh-plain", "car-xml", "car-reader", "car-reader-repair")

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
    ``result`` is car-rag's retrieval for the query (what the guard judges against); it is
    not written out."""

    query_id: str
    condition: str
    messages: list[dict[str, str]]
    meta: dict[str, Any] = field(default_factory=dict)
    result: Any = field(default=None, repr=False, compare=False)


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
    anchors: str = "hybrid",
    k1: int = 10,
    max_doc_chars: int | None = None,
    evidence_budget: float | None = 1500,
    progress: bool = True,
    kind: str | None = None,
    xml_form: str = "compact",
) -> list[Job]:
    """Messages for every query × condition of ``suite``, contexts from the suite's store.

    Every condition gets the same text policy: each record's text whole (or cut to
    ``max_doc_chars``), and the context fitted to ``evidence_budget`` tokens
    (:func:`~car_rag.evidence.budget.approx_tokens`) by leaving out whole records, least useful
    first. ``kind`` ("security", "legal", "compliance") picks the question asked of the
    reader; by default it follows the built-in suite's name (needed for a user corpus);
    :data:`AS_ASKED` asks the question as written.
    ``query_ids`` keeps those queries only (a held-out sample), ``limit`` the first N.
    ``car-reader-repair`` needs no job of its own: :func:`repair_jobs` makes it from the
    ``car-reader`` answers."""
    if xml_form not in ("compact", "full"):
        raise ValueError(f"xml_form must be 'compact' or 'full', got {xml_form!r}")
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
    xml_chars = max_doc_chars if max_doc_chars is not None else (int(evidence_budget * 3) if evidence_budget else None)
    jobs = []
    for q in queries:
        question = f"{q.query}\n{suffix}" if suffix else q.query
        gold = set(q.gold_doc_ids)
        result = retriever.retrieve(q.query) if retriever else None
        for cond in conditions:
            if cond == "car-reader-repair":
                continue
            context = ""
            if cond == "closed-book":
                messages = [{"role": "system", "content": CLOSED_SYSTEM}, {"role": "user", "content": question}]
                ids: list[str] = []
            elif cond == "dense":
                hits = store.dense.search(store.embedder.encode([q.query])[0], k)
                ids = [h.doc_id for h in hits]
                context = render_plain([store.records[d] for d in ids], token_budget=evidence_budget, max_chars=max_doc_chars)
                messages = plain_messages(question, context)
            elif cond in ("car-plain", "fresh-plain"):
                records = [r.record for r in result.top(k)]
                ids = [r.doc_id for r in records]
                dated = cond == "fresh-plain"
                context = render_plain(records, token_budget=evidence_budget, max_chars=max_doc_chars, dated=dated)
                messages = plain_messages(question, context, dated=dated)
            elif cond == "car-reader":
                context = render_reader(result, policy=store.policy, k=k, token_budget=evidence_budget, query_id=q.query_id)
                ids = [r.doc_id for r in result.top(k)]
                messages = reader_messages(question, context)
            else:
                mode = "omit" if cond == "car-xml-omit" else "include"
                packets = _clipped_packets(result, store.policy, k, xml_chars)
                # Retrieval scores and matched terms say nothing about the answer: left out.
                context = render_xml(packets, superseded=mode, token_budget=evidence_budget, query_id=q.query_id, rationale=False,
                                     compact=xml_form == "compact")
                ids = [r.doc_id for r in result.top(k) if mode == "include" or r.status == "active"]
                messages = answer_messages(question, context)
            meta = {
                "context_doc_ids": ids,
                "controlling_in_context": bool(gold & set(ids)) if cond != "closed-book" else False,
                "context_tokens": round(approx_tokens(context)),
            }
            jobs.append(Job(q.query_id, cond, messages, meta, result))
    return jobs
