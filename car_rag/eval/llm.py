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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag.eval.answers import LABELS, Classification, GoldAnswer, classify, load_gold, suite_kind
from car_rag.eval.stats import Rate

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

CONDITIONS = ("dense", "car-plain", "car-xml", "car-xml-omit", "closed-book")
DEFAULT_CONDITIONS = CONDITIONS[:4]

QUESTION_SUFFIX = {
    "security": "Is the vulnerability patched? If so, what version fixes it?",
    "legal": "Is the ruling still good law, or has it been overruled?",
    "compliance": "Is the pre-clearance still active, is the trade compliant (e.g. under an exception), or is it non-compliant?",
}
PLAIN_SYSTEM = "You answer questions using only the documents provided. If they do not answer the question, say so. Be concise."
CLOSED_SYSTEM = "You answer questions. Be concise."


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
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._data[entry["key"]] = entry["answer"]

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, answer: str, **meta: Any) -> None:
        with self._lock:
            self._data[key] = answer
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
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError("the LLM path needs the openai client: pip install 'car-rag[llm]'") from exc
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
            self.cache.put(key, answer, model=self.model)
        return answer


# --------------------------------------------------------------------------- jobs

@dataclass
class Job:
    """One model call: a query under a condition, its messages and what its context held."""

    query_id: str
    condition: str
    messages: list[dict[str, str]]
    meta: dict[str, Any] = field(default_factory=dict)


def _clip(text: str, max_chars: int) -> str:
    """The same cut for every condition, so contexts differ only in what was retrieved.
    Line endings become LF first: XML escapes a CR as ``&#13;``, a token per line for nothing."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if len(text) <= max_chars else text[:max_chars] + " …"


def _plain_context(records: Iterable[Any], max_chars: int) -> str:
    return "\n\n".join(f"[Document {i}] ({rec.doc_type})\n{_clip(rec.text, max_chars)}" for i, rec in enumerate(records, 1))


def _clipped_packets(result: Any, policy: Any, k: int, max_chars: int) -> list[Any]:
    from car_rag.evidence import build_packets

    return [
        p.model_copy(update={"content": p.content.model_copy(update={"raw_text": _clip(p.text, max_chars)})})
        for p in build_packets(result, policy, k, provenance=True)
    ]


def build_jobs(
    suite: Any,
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    *,
    k: int = 5,
    stores_dir: Path = Path(".car-stores"),
    limit: int | None = None,
    anchors: str = "hybrid",
    k1: int = 10,
    max_doc_chars: int = 3000,
    token_budget: float | None = None,
    progress: bool = True,
    kind: str | None = None,
    xml_form: str = "compact",
) -> list[Job]:
    """Messages for every query × condition of ``suite``, contexts from the suite's store.

    ``kind`` ("security", "legal", "compliance") picks the question asked of the reader;
    by default it follows the built-in suite's name (needed for a user corpus). ``xml_form``
    is :func:`render_xml`'s compact form (default: the same facts in about half the tokens)
    or its full form."""
    from car_rag.eval.runner import open_suite_store
    from car_rag.prompts import answer_messages
    from car_rag.queries import load_queries
    from car_rag.retriever import ControllingAuthorityRetriever
    from car_rag.xml_render import render_xml

    if xml_form not in ("compact", "full"):
        raise ValueError(f"xml_form must be 'compact' or 'full', got {xml_form!r}")
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"unknown conditions {unknown}; choose from {list(CONDITIONS)}")
    suffix = QUESTION_SUFFIX[kind or suite_kind(suite.name)]
    queries = load_queries(suite.queries)[:limit]
    needs_store = any(c != "closed-book" for c in conditions)
    store = open_suite_store(suite, stores_dir, progress) if needs_store else None
    retriever = ControllingAuthorityRetriever(store, anchors=anchors, k1=k1, depth=max(50, k1)) if store else None
    jobs = []
    for q in queries:
        question = f"{q.query}\n{suffix}"
        gold = set(q.gold_doc_ids)
        result = retriever.retrieve(q.query) if retriever and any(c.startswith("car") for c in conditions) else None
        for cond in conditions:
            meta: dict[str, Any] = {}
            if cond == "closed-book":
                messages = [{"role": "system", "content": CLOSED_SYSTEM}, {"role": "user", "content": question}]
                ids: list[str] = []
            elif cond == "dense":
                hits = store.dense.search(store.embedder.encode([q.query])[0], k)
                ids = [h.doc_id for h in hits]
                records = [store.records[d] for d in ids]
                messages = [
                    {"role": "system", "content": PLAIN_SYSTEM},
                    {"role": "user", "content": f"Documents:\n\n{_plain_context(records, max_doc_chars)}\n\nQuestion: {question}"},
                ]
            elif cond == "car-plain":
                ids = result.doc_ids(k)
                records = [r.record for r in result.top(k)]
                messages = [
                    {"role": "system", "content": PLAIN_SYSTEM},
                    {"role": "user", "content": f"Documents:\n\n{_plain_context(records, max_doc_chars)}\n\nQuestion: {question}"},
                ]
            else:
                mode = "omit" if cond == "car-xml-omit" else "include"
                packets = _clipped_packets(result, store.policy, k, max_doc_chars)
                # Retrieval scores and matched terms say nothing about the answer: left out.
                evidence = render_xml(packets, superseded=mode, token_budget=token_budget, query_id=q.query_id, rationale=False,
                                      compact=xml_form == "compact")
                ids = [r.doc_id for r in result.top(k) if mode == "include" or r.status == "active"]
                messages = answer_messages(question, evidence)
            meta = {"context_doc_ids": ids, "controlling_in_context": bool(gold & set(ids)) if cond != "closed-book" else False}
            jobs.append(Job(q.query_id, cond, messages, meta))
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
    rows = {i: {"query_id": jobs[i].query_id, "condition": jobs[i].condition, "answer": answered[group[0]], "model": client.model, **jobs[i].meta}
            for group in same.values() if group[0] in answered for i in group}
    return [rows[i] for i in sorted(rows)]


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
        out.append({"query_id": r["query_id"], "condition": r["condition"], "answer": r["answer"], "label": c.label,
                    "reason": c.reason, **{k: v for k, v in r.items() if k not in ("query_id", "condition", "answer", "label", "reason")}})
    return out


def report(labelled: Sequence[dict[str, Any]], suite_name: str) -> dict[str, Any]:
    """Per condition: n, each label's rate (Wilson 95%), and label × controlling-in-context."""
    conditions: dict[str, Any] = {}
    for cond in dict.fromkeys(r["condition"] for r in labelled):
        rows = [r for r in labelled if r["condition"] == cond]
        counts = collections.Counter(r["label"] for r in rows)
        entry: dict[str, Any] = {"n": len(rows), "rates": {lab: Rate(counts[lab], len(rows)).to_dict() for lab in LABELS}}
        known = [r for r in rows if isinstance(r.get("controlling_in_context"), bool)]
        if known:
            entry["controlling_in_context"] = Rate(sum(r["controlling_in_context"] for r in known), len(known)).to_dict()
            table = {}
            for flag in (True, False):
                sub = [r for r in known if r["controlling_in_context"] is flag]
                c = collections.Counter(r["label"] for r in sub)
                table["in_context" if flag else "not_in_context"] = {
                    "n": len(sub), "counts": {lab: c[lab] for lab in LABELS},
                    "rates": {lab: Rate(c[lab], len(sub)).to_dict() for lab in LABELS},
                }
            entry["by_retrieval"] = table
        conditions[cond] = entry
    return {"suite": suite_name, "labels": list(LABELS), "conditions": conditions, "paired": paired(labelled),
            "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


PAIRS = (("dense", "car-xml"), ("car-plain", "car-xml"), ("dense", "car-plain"), ("car-xml", "car-xml-omit"))
"""Condition pairs compared query by query: retrieval, the packets alone, retrieval as plain
text, and showing the superseded records or not."""


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


def markdown(rep: dict[str, Any], command: str) -> str:
    lines = [
        f"# Reader answers on {rep['suite']}",
        "",
        f"Generated by `{command}` on {rep['generated']}. Labels from `car_rag.eval.answers.classify` "
        "(rules; each row's reason is in `answers.labelled.jsonl`). Rates with Wilson 95% intervals (count).",
        "",
        "| condition | n | controlling record in context | " + " | ".join(LABELS) + " |",
        "|---|---|---|" + "---|" * len(LABELS),
    ]
    for cond, e in rep["conditions"].items():
        ctx = _cell(e["controlling_in_context"]) if "controlling_in_context" in e else "–"
        lines.append(f"| {cond} | {e['n']} | {ctx} | " + " | ".join(_cell(e["rates"][lab]) for lab in LABELS) + " |")
    if rep.get("paired"):
        lines += ["", "Confident-wrong answers, condition against condition on the same queries (exact McNemar test):", "",
                  "| A | B | queries | confident wrong under A | under B | B / A | A only | B only | p |", "|---|---|---|---|---|---|---|---|---|"]
        for p in rep["paired"]:
            ratio = "–" if p["ratio_b_to_a"] is None else f"{p['ratio_b_to_a']:.2f}"
            lines.append(f"| {p['a']} | {p['b']} | {p['n']} | {p['a_count']} | {p['b_count']} | {ratio} | {p['only_a']} | "
                         f"{p['only_b']} | {p['mcnemar_p']:.3g} |")
    if any("by_retrieval" in e for e in rep["conditions"].values()):
        lines += ["", "Label counts by retrieval success (controlling record in the context or not):", "",
                  "| condition | retrieval | n | " + " | ".join(LABELS) + " |", "|---|---|---|" + "---|" * len(LABELS)]
        for cond, e in rep["conditions"].items():
            for key, t in e.get("by_retrieval", {}).items():
                lines.append(f"| {cond} | {key.replace('_', ' ')} | {t['n']} | " + " | ".join(str(t["counts"][lab]) for lab in LABELS) + " |")
    return "\n".join(lines) + "\n"


def plot(rep: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = list(rep["conditions"])
    width = 0.8 / len(LABELS)
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(conds) + 2), 4))
    for i, lab in enumerate(LABELS):
        vals = [rep["conditions"][c]["rates"][lab]["value"] for c in conds]
        lo = [v - rep["conditions"][c]["rates"][lab]["ci95"][0] for v, c in zip(vals, conds)]
        hi = [rep["conditions"][c]["rates"][lab]["ci95"][1] - v for v, c in zip(vals, conds)]
        ax.bar([x + (i - (len(LABELS) - 1) / 2) * width for x in range(len(conds))], vals, width, yerr=[lo, hi], capsize=2, label=lab)
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
    from car_rag.eval.suites import load_suite

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
        raw = out_dir / "answers.jsonl"
        with raw.open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        written.append(raw)
        print(f"{len(rows)}/{len(jobs)} answers ({client.calls} model calls, {client.cache_hits} from cache)")
    return written + write_report(classify_rows(rows, suite.name, gold), suite.name, out_dir, command)
