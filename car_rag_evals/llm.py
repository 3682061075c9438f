"""``car-rag eval-llm``: what a reader model answers from each retrieval condition, classified.

Two ways in:

* ``--answers FILE.jsonl`` — answers produced elsewhere (``query_id``, ``condition``,
  ``answer``; optional ``controlling_in_context``): classified and reported, no model called.
* ``--base-url URL --model NAME`` — any OpenAI-compatible chat server (OpenAI, vLLM,
  llama.cpp's server …) answers each query under each condition:

  ``dense``         dense MiniLM top-k, plain text
  ``car-plain``     car-rag top-k, plain text
  ``car-xml``       car-rag top-k as XML evidence packets, superseded ones marked
  ``car-xml-omit``  the same with superseded packets omitted
  ``closed-book``   no context (optional)

  Calls run in a thread pool (``concurrency``), at temperature 0, with the client's retries
  and timeout; every answer is appended to an on-disk JSONL cache keyed by
  sha256(model, messages) as soon as it arrives, so a crash loses nothing and a re-run
  costs nothing.

Output (``--out DIR``): ``answers.labelled.jsonl`` (query_id, condition, answer, label,
reason, …), ``report.json`` and ``report.md`` (per-condition label rates with Wilson 95%
intervals; label × controlling-record-in-context when known) and ``labels.png``.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag.eval.answers import Classification, GoldAnswer, classify, labels_for, suite_kind
from car_rag.eval.stats import Rate
from car_rag.extras import require
from car_rag_evals.gold import load_gold

__all__ = [
    "CONDITIONS",
    "DEFAULT_CONDITIONS",
    "AnswerCache",
    "ChatClient",
    "Job",
    "answer_jobs",
    "build_jobs",
    "cache_key",
    "classify_rows",
    "paired",
    "read_answers",
    "report",
    "write_report",
]

CONDITIONS = ("dense", "car-plain", "fresh-plain", "car-xml", "car-xml-omit", "car-reader", "car-reader-repair", "closed-book")
DEFAULT_CONDITIONS = ("dense", "car-plain", "fresh-plain", "car-xml", "car-reader", "car-reader-repair")

QUESTION_SUFFIX = {
    "security": "Is the vulnerability patched? If so, what version fixes it?",
    "legal": "Is the ruling still good law, or has it been overruled?",
    "compliance": "Is the pre-clearance still active, is the trade compliant (e.g. under an exception), or is it non-compliant?",
}
PLAIN_SYSTEM = "You answer questions using only the documents provided. If they do not answer the question, say so. Be concise."
CLOSED_SYSTEM = "You answer questions. Be concise."
FRESH_SYSTEM = (
    "You answer questions using only the documents provided. The documents are listed from oldest to newest, each with "
    "its date. When documents disagree, trust the most recent one. If they do not answer the question, say so. Be concise."
)
"""FreshPrompt-style instruction (Vu et al. 2023): evidence in date order, the newest trusted."""


# --------------------------------------------------------------------------- cache + client

def cache_key(model: str, messages: Sequence[dict[str, str]]) -> str:
    """sha256 of the model name and the exact messages (canonical JSON)."""
    blob = json.dumps({"model": model, "messages": list(messages)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    """Append-only JSONL of ``{"key", "model", "answer", ...}``; one line per answer, flushed
    as written. A torn last line (crash mid-write) is skipped on load."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._data[entry["key"]] = entry["answer"]
                self._meta[entry["key"]] = {k: v for k, v in entry.items() if k not in ("key", "answer")}

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._data.get(key)

    def meta(self, key: str) -> dict[str, Any]:
        """What was stored beside an answer (model, token usage); empty when unknown."""
        with self._lock:
            return dict(self._meta.get(key, {}))

    def put(self, key: str, answer: str, **meta: Any) -> None:
        with self._lock:
            self._data[key] = answer
            self._meta[key] = meta
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"key": key, "answer": answer, **meta}, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    def __len__(self) -> int:
        return len(self._data)


class ChatClient:
    """The ``openai`` client at temperature 0, with retries, a timeout and the answer cache.

    ``api_key`` defaults to ``$OPENAI_API_KEY``, else ``"sk-local"`` (local servers ignore it).
    Retries (connection errors, timeouts, 408/409/429 and 5xx) are the client's own, with
    exponential backoff; ``max_retries`` of them per call.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        cache: AnswerCache | None = None,
        max_tokens: int = 512,
    ):
        openai = require("openai", "llm", "the reader evaluation's chat client")
        self.model = model
        self.max_tokens = max_tokens
        self.cache = cache
        self.calls = 0
        self.cache_hits = 0
        self._lock = threading.Lock()
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "sk-local",
            timeout=timeout, max_retries=max_retries,
        )

    def complete(self, messages: Sequence[dict[str, str]]) -> str:
        key = cache_key(self.model, messages)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                with self._lock:
                    self.cache_hits += 1
                return hit
        with self._lock:
            self.calls += 1
        response = self.client.chat.completions.create(
            model=self.model, messages=list(messages), temperature=0, max_tokens=self.max_tokens,
        )
        answer = response.choices[0].message.content or ""
        if self.cache is not None:
            usage = getattr(response, "usage", None)
            tokens = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens} if usage else {}
            self.cache.put(key, answer, model=self.model, **tokens)
        return answer

    def usage(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        """Prompt and completion tokens the server reported for these messages, when cached."""
        if self.cache is None:
            return {}
        meta = self.cache.meta(cache_key(self.model, messages))
        return {k: meta[k] for k in ("prompt_tokens", "completion_tokens") if k in meta}


# --------------------------------------------------------------------------- jobs

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


def _clip(text: str, max_chars: int | None) -> str:
    """Line endings become LF (XML escapes a CR as ``&#13;``, a token per line for nothing);
    with ``max_chars``, the same cut for every condition."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars] + " …"


def _plain_context(records: Sequence[Any], max_chars: int | None, budget: float | None, *, dated: bool = False) -> str:
    """Numbered plain-text documents; with ``budget``, whole documents are kept in order
    while they fit (as :func:`render_reader` does), and the first is cut if it alone does not."""
    from car_rag.evidence import approx_tokens
    from car_rag.evidence.xml_tree import iso_date

    def doc(i: int, rec: Any, text: str) -> str:
        when = f", {iso_date(rec.effective_at or rec.published_at) or 'date unknown'}" if dated else ""
        return f"[Document {i}] ({rec.doc_type}{when})\n{text}"

    texts = [_clip(rec.text, max_chars) for rec in records]
    kept: list[str] = []
    for rec, text in zip(records, texts):
        trial = doc(len(kept) + 1, rec, text)
        if budget is None or not kept or approx_tokens("\n\n".join([*kept, trial])) <= budget:
            kept.append(trial)
    if budget is not None and kept and approx_tokens(kept[0]) > budget:
        words = texts[0].split(" ")
        keep = max(1, int(len(words) * budget / approx_tokens(kept[0])))
        kept[0] = doc(1, records[0], " ".join(words[:keep]) + " […]")
    return "\n\n".join(kept)


def _oldest_first(records: Sequence[Any]) -> list[Any]:
    """FreshPrompt's order: undated records first (their age is unknown), then oldest to
    newest; ties keep retrieval order."""
    undated = [r for r in records if r.time is None]
    return undated + sorted((r for r in records if r.time is not None), key=lambda r: r.time)


def _clipped_packets(result: Any, policy: Any, k: int, max_chars: int | None) -> list[Any]:
    from car_rag.evidence import build_packets

    return [
        p.model_copy(update={"content": p.content.model_copy(update={"raw_text": _clip(p.text, max_chars)})})
        for p in build_packets(result, policy, k, provenance=True)
    ]


def _plain_messages(context: str, question: str, system: str = PLAIN_SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Documents:\n\n{context}\n\nQuestion: {question}"}]


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
    reader; by default it follows the built-in suite's name (needed for a user corpus).
    ``query_ids`` keeps those queries only (a held-out sample), ``limit`` the first N.
    ``car-reader-repair`` needs no job of its own: :func:`repair_jobs` makes it from the
    ``car-reader`` answers."""
    from car_rag_evals.suites import open_suite_store
    from car_rag.prompts import answer_messages, reader_messages
    from car_rag.queries import load_queries
    from car_rag.evidence import approx_tokens, render_reader, render_xml
    from car_rag.retriever import ControllingAuthorityRetriever

    if xml_form not in ("compact", "full"):
        raise ValueError(f"xml_form must be 'compact' or 'full', got {xml_form!r}")
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"unknown conditions {unknown}; choose from {list(CONDITIONS)}")
    if "car-reader-repair" in conditions and "car-reader" not in conditions:
        raise ValueError("car-reader-repair repairs car-reader's answers: ask for car-reader too")
    suffix = QUESTION_SUFFIX[kind or suite_kind(suite.name)]
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
        question = f"{q.query}\n{suffix}"
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
                context = _plain_context([store.records[d] for d in ids], max_doc_chars, evidence_budget)
                messages = _plain_messages(context, question)
            elif cond in ("car-plain", "fresh-plain"):
                records = [r.record for r in result.top(k)]
                ids = [r.doc_id for r in records]
                if cond == "fresh-plain":
                    context = _plain_context(_oldest_first(records), max_doc_chars, evidence_budget, dated=True)
                    messages = _plain_messages(context, question, FRESH_SYSTEM)
                else:
                    context = _plain_context(records, max_doc_chars, evidence_budget)
                    messages = _plain_messages(context, question)
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


def answer_jobs(
    jobs: Sequence[Job],
    client: ChatClient,
    *,
    concurrency: int = 4,
    progress: bool = True,
    on_error: Callable[[Job, Exception], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every job through ``client`` with at most ``concurrency`` calls in flight.

    A job whose call still fails after the client's retries is reported (``on_error``, or a
    line on stderr) and left out; its answer is not cached, so a re-run tries it again.
    """
    import sys

    from tqdm.auto import tqdm

    def one(job: Job) -> str | None:
        try:
            return client.complete(job.messages)
        except Exception as exc:  # noqa: BLE001 - one failed call must not lose the others
            (on_error or (lambda j, e: print(f"eval-llm: {j.query_id}/{j.condition} failed: {e}", file=sys.stderr)))(job, exc)
            return None

    # Jobs with the same prompt (dense and car-plain retrieving the same records) are one
    # call: two in flight at once would both miss the cache and pay twice.
    same: dict[str, list[int]] = collections.defaultdict(list)
    for i, job in enumerate(jobs):
        same[cache_key(client.model, job.messages)].append(i)
    # Calls sharing a system prompt go one after another: local servers (llama.cpp) reuse
    # the evaluated prefix of the previous prompt, and hosted APIs cache shared prefixes.
    order = sorted((group[0] for group in same.values()), key=lambda i: jobs[i].messages[0]["content"] if jobs[i].messages else "")
    answered: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        calls = pool.map(lambda i: (i, one(jobs[i])), order)
        for i, answer in tqdm(calls, total=len(order), desc="answers", unit="call", disable=None if progress else True):
            if answer is not None:
                answered[i] = answer
    rows = {i: {"query_id": jobs[i].query_id, "condition": jobs[i].condition, "answer": answered[group[0]], "model": client.model,
                **jobs[i].meta, **client.usage(jobs[i].messages)}
            for group in same.values() if group[0] in answered for i in group}
    return [rows[i] for i in sorted(rows)]


# --------------------------------------------------------------------------- guard + repair

def repair_rows(
    rows: Sequence[dict[str, Any]], jobs: Sequence[Job], client: ChatClient, policy: Any, *, k: int = 5,
    concurrency: int = 1, progress: bool = True,
) -> list[dict[str, Any]]:
    """``car-reader-repair`` rows: every ``car-reader`` answer checked by the guard against
    the result it was generated from; a flagged one is sent back to the same model once,
    with the findings stated plainly (:func:`car_rag.guard.repair_messages`); an unflagged
    one is kept as it is, at no cost. Rows keep ``original_answer``, ``repaired`` and the
    findings that triggered the repair."""
    from car_rag.guard import check_answer, repair_messages

    by_job = {(j.query_id, j.condition): j for j in jobs}
    out: list[dict[str, Any]] = []
    fixes: list[tuple[int, Job]] = []
    for r in rows:
        if r["condition"] != "car-reader":
            continue
        job = by_job[(r["query_id"], "car-reader")]
        verdict = check_answer(r["answer"], job.result, policy, k=k)
        out.append({**r, "condition": "car-reader-repair", "original_answer": r["answer"], "repaired": False,
                    "repair_findings": [f.to_dict() for f in verdict.findings]})
        if verdict.flagged:
            messages = repair_messages(job.messages, r["answer"], verdict)
            fixes.append((len(out) - 1, Job(r["query_id"], "car-reader-repair", messages, dict(job.meta), job.result)))
    answered = {a["query_id"]: a for a in answer_jobs([j for _, j in fixes], client, concurrency=concurrency, progress=progress)}
    for i, job in fixes:
        if job.query_id in answered:
            a = answered[job.query_id]
            out[i].update(answer=a["answer"], repaired=True, **{t: a[t] for t in ("prompt_tokens", "completion_tokens") if t in a})
    return out


def guard_rows(rows: Sequence[dict[str, Any]], results: dict[str, Any], policy: Any, *, k: int = 5) -> None:
    """Add the guard's verdict to every row (``guard``: judged, flagged, findings), judged
    against car-rag's result for the row's query, whatever the condition's own context."""
    from car_rag.guard import check_answer

    for r in rows:
        result = results.get(r["query_id"])
        if result is not None:
            r["guard"] = check_answer(r["answer"], result, policy, k=k).to_dict()


# --------------------------------------------------------------------------- classify + report

def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """An answers JSONL (``query_id``, ``condition``, ``answer``; extra fields kept)."""
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [f for f in ("query_id", "condition", "answer") if f not in row]
        if missing:
            raise ValueError(f"{path}:{number}: missing field(s) {missing}")
        rows.append(row)
    return rows


def classify_rows(
    rows: Sequence[dict[str, Any]], suite_name: str, gold: dict[str, GoldAnswer],
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
        out.append({"query_id": r["query_id"], "condition": r["condition"], "answer": r["answer"], "label": c.label,
                    "reason": c.reason, **extra})
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
                    "n": len(sub), "counts": {lab: c[lab] for lab in labels},
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
                "judged": len(judged), "not_judged": sum(isinstance(r.get("guard"), dict) for r in rows) - len(judged),
                "flagged": Rate(len(flagged), len(judged)).to_dict() if judged else None,
                "findings": dict(sorted(kinds.items())),
                "flagged_by_label": dict(collections.Counter(r["label"] for r in flagged)),
            }
        conditions[cond] = entry
    out = {"suite": suite_name, "labels": list(labels), "conditions": conditions, "paired": paired(labelled),
           "paired_correct": paired(labelled, "correct"), "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    repaired = [r for r in labelled if r.get("repaired") is True]
    if any("original_label" in r for r in labelled):
        out["repair"] = {
            "answers": sum("original_label" in r for r in labelled),
            "repaired": len(repaired),
            "transitions": dict(collections.Counter(f"{r['original_label']} -> {r['label']}" for r in repaired)),
            "correct_broken": sum(r["original_label"] == "correct" and r["label"] != "correct" for r in repaired),
            "queries": [{"query_id": r["query_id"], "before": r["original_label"], "after": r["label"],
                         "findings": [f["kind"] for f in r.get("repair_findings", [])]} for r in repaired],
        }
    return out


PAIRS = (
    ("dense", "car-xml"), ("car-plain", "car-xml"), ("dense", "car-plain"), ("car-xml", "car-xml-omit"),
    ("car-plain", "car-reader"), ("fresh-plain", "car-reader"), ("car-xml", "car-reader"), ("dense", "car-reader"),
    ("car-reader", "car-reader-repair"), ("dense", "car-reader-repair"), ("car-plain", "fresh-plain"),
)
"""Condition pairs compared query by query: retrieval, the evidence forms against each
other and against plain text, and the guard's repair."""


def paired(
    labelled: Sequence[dict[str, Any]], label: str = "confident_wrong", pairs: Sequence[tuple[str, str]] = PAIRS
) -> list[dict[str, Any]]:
    """For each pair of conditions both present: on the queries answered under both, how
    many were ``label`` under A only, under B only, under both; ratio of rates; exact
    McNemar p-value (the same queries and reader on both sides, so pair them)."""
    from car_rag.eval.stats import mcnemar_exact

    by: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for r in labelled:
        by[r["condition"]][r["query_id"]] = r["label"]
    out = []
    for a, b in pairs:
        if a not in by or b not in by:
            continue
        shared = sorted(set(by[a]) & set(by[b]))
        in_a = {q for q in shared if by[a][q] == label}
        in_b = {q for q in shared if by[b][q] == label}
        only_a, only_b = len(in_a - in_b), len(in_b - in_a)
        out.append({
            "a": a, "b": b, "label": label, "n": len(shared), "a_count": len(in_a), "b_count": len(in_b),
            "only_a": only_a, "only_b": only_b, "both": len(in_a & in_b),
            "ratio_b_to_a": round(len(in_b) / len(in_a), 4) if in_a else None,
            "mcnemar_p": round(mcnemar_exact(only_a, only_b), 6),
        })
    return out


def _cell(rate: dict) -> str:
    lo, hi = rate["ci95"]
    return f"{rate['value']:.3f} [{lo:.2f}, {hi:.2f}] ({rate['successes']})"


def _paired_table(pairs: list[dict[str, Any]], what: str) -> list[str]:
    lines = ["", f"{what}, condition against condition on the same queries (exact McNemar test):", "",
             f"| A | B | queries | {what.lower()} under A | under B | B / A | A only | B only | p |", "|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        ratio = "–" if p["ratio_b_to_a"] is None else f"{p['ratio_b_to_a']:.2f}"
        lines.append(f"| {p['a']} | {p['b']} | {p['n']} | {p['a_count']} | {p['b_count']} | {ratio} | {p['only_a']} | "
                     f"{p['only_b']} | {p['mcnemar_p']:.3g} |")
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
        lines += ["", "Context size (median tokens: evidence by `approx_tokens`, whole prompt as the server counted it) and the "
                  "authority guard's verdict on each answer, judged against car-rag's result for the query:", "",
                  "| condition | evidence tokens | prompt tokens | guard flagged | not judged | findings | flagged answers by label |",
                  "|---|---|---|---|---|---|---|"]
        for cond, e in rep["conditions"].items():
            g = e.get("guard") or {}
            flagged = _cell(g["flagged"]) if g.get("flagged") else "–"
            findings = ", ".join(f"{k} {v}" for k, v in g.get("findings", {}).items()) or "–"
            by_label = ", ".join(f"{k} {v}" for k, v in g.get("flagged_by_label", {}).items()) or "–"
            lines.append(f"| {cond} | {e.get('context_tokens', {}).get('median', '–')} | {e.get('prompt_tokens', {}).get('median', '–')} | "
                         f"{flagged} | {g.get('not_judged', '–')} | {findings} | {by_label} |")
    if rep.get("paired"):
        lines += _paired_table(rep["paired"], "Confident-wrong answers")
    if rep.get("paired_correct"):
        lines += _paired_table(rep["paired_correct"], "Correct answers")
    if rep.get("repair"):
        rp = rep["repair"]
        lines += ["", f"Repair (car-reader-repair): {rp['repaired']} of {rp['answers']} car-reader answers flagged by the guard and "
                  f"answered again; correct answers the repair turned into something else: {rp['correct_broken']}.", ""]
        if rp["transitions"]:
            lines += ["| before -> after | answers |", "|---|---|"]
            lines += [f"| {t} | {n} |" for t, n in sorted(rp["transitions"].items(), key=lambda kv: -kv[1])]
            lines += ["", "| query | before | after | findings |", "|---|---|---|---|"]
            lines += [f"| {q['query_id']} | {q['before']} | {q['after']} | {', '.join(q['findings'])} |" for q in rp["queries"]]
    if any("by_retrieval" in e for e in rep["conditions"].values()):
        lines += ["", "Label counts by retrieval success (controlling record in the context or not):", "",
                  "| condition | retrieval | n | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
        for cond, e in rep["conditions"].items():
            for key, t in e.get("by_retrieval", {}).items():
                lines.append(f"| {cond} | {key.replace('_', ' ')} | {t['n']} | " + " | ".join(str(t["counts"][lab]) for lab in labels) + " |")
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
        ax.bar([x + (i - (len(labels) - 1) / 2) * width for x in range(len(conds))], vals, width, yerr=[lo, hi], capsize=2, label=lab)
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


def run_eval_llm(
    suite_name: str,
    out_dir: Path,
    *,
    answers: Path | None = None,
    base_url: str | None = None,
    model: str | None = None,
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    corpora_dir: Path | None = None,
    command: str = "car-rag eval-llm ...",
    **options: Any,
) -> list[Path]:
    """The ``eval-llm`` command: classify given answers, or produce them first."""
    from car_rag_evals.suites import load_suite

    suite = load_suite(suite_name, corpora_dir)
    gold = load_gold(suite)
    written: list[Path] = []
    if answers is not None:
        rows = read_answers(answers)
    else:
        if not (base_url and model):
            raise ValueError("give --answers FILE, or --base-url and --model")
        out_dir.mkdir(parents=True, exist_ok=True)
        cache = AnswerCache(options.pop("cache", None) or out_dir / "cache.jsonl")
        client = ChatClient(
            base_url, model, cache=cache, timeout=options.pop("timeout", 120.0), max_retries=options.pop("max_retries", 4),
            max_tokens=options.pop("max_tokens", 512),
        )
        concurrency = options.pop("concurrency", 4)
        jobs = build_jobs(suite, conditions, **options)
        rows = answer_jobs(jobs, client, concurrency=concurrency)
        k = options.get("k", 5)
        if "car-reader-repair" in conditions:
            rows += repair_rows(rows, jobs, client, suite.policy, k=k, concurrency=concurrency)
        guard_rows(rows, {j.query_id: j.result for j in jobs if j.result is not None}, suite.policy, k=k)
        raw = out_dir / "answers.jsonl"
        with raw.open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        written.append(raw)
        print(f"{len(rows)}/{len(jobs)} answers ({client.calls} model calls, {client.cache_hits} from cache)")
    return written + write_report(classify_rows(rows, suite.name, gold), suite.name, out_dir, command)
