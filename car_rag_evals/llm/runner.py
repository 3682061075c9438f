"""Running a reader evaluation: jobs through the model in parallel, the guard's verdict and
repair, and the ``car-rag eval-llm`` command that ties them to the report."""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from car_rag.guard import check_answer, repair_messages
from car_rag_evals.gold import load_gold
from car_rag_evals.llm.cache import AnswerCache, cache_key
from car_rag_evals.llm.client import ChatClient
from car_rag_evals.llm.conditions import DEFAULT_CONDITIONS, Job, build_jobs
from car_rag_evals.llm.report import classify_rows, read_answers, write_report
from car_rag_evals.suites import load_suite

__all__ = ["answer_jobs", "guard_rows", "repair_rows", "run_eval_llm"]


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
    order = sorted(
        (group[0] for group in same.values()), key=lambda i: jobs[i].messages[0]["content"] if jobs[i].messages else ""
    )
    answered: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        calls = pool.map(lambda i: (i, one(jobs[i])), order)
        for i, answer in tqdm(calls, total=len(order), desc="answers", unit="call", disable=None if progress else True):
            if answer is not None:
                answered[i] = answer
    rows = {
        i: {
            "query_id": jobs[i].query_id,
            "condition": jobs[i].condition,
            "answer": answered[group[0]],
            "model": client.model,
            **jobs[i].meta,
            **client.usage(jobs[i].messages),
        }
        for group in same.values()
        if group[0] in answered
        for i in group
    }
    return [rows[i] for i in sorted(rows)]


# --------------------------------------------------------------------------- guard + repair


def repair_rows(
    rows: Sequence[dict[str, Any]],
    jobs: Sequence[Job],
    client: ChatClient,
    policy: Any,
    *,
    concurrency: int = 1,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """``car-reader-repair`` rows: every ``car-reader`` answer checked by the guard against
    the evidence it was generated from (its job's ``evidence``); a flagged one is sent back to
    the same model once, with the findings stated plainly (:func:`car_rag.guard.repair_messages`);
    an unflagged one is kept as it is, at no cost. Rows keep ``original_answer``, ``repaired``
    and the findings that triggered the repair."""
    by_job = {(j.query_id, j.condition): j for j in jobs}
    out: list[dict[str, Any]] = []
    fixes: list[tuple[int, Job]] = []
    for r in rows:
        if r["condition"] != "car-reader":
            continue
        job = by_job[(r["query_id"], "car-reader")]
        if job.evidence is None:
            raise ValueError(f"{job.query_id}/car-reader: the job carries no evidence for the guard")
        verdict = check_answer(r["answer"], job.evidence, policy)
        out.append(
            {
                **r,
                "condition": "car-reader-repair",
                "original_answer": r["answer"],
                "repaired": False,
                "repair_findings": [f.to_dict() for f in verdict.findings],
            }
        )
        if verdict.flagged:
            messages = repair_messages(job.messages, r["answer"], verdict)
            fixes.append(
                (len(out) - 1, Job(r["query_id"], "car-reader-repair", messages, dict(job.meta), job.result, job.evidence))
            )
    answered = {a["query_id"]: a for a in answer_jobs([j for _, j in fixes], client, concurrency=concurrency, progress=progress)}
    for i, job in fixes:
        if job.query_id in answered:
            a = answered[job.query_id]
            tokens = {t: a[t] for t in ("prompt_tokens", "completion_tokens") if t in a}
            out[i].update(answer=a["answer"], repaired=True, **tokens)
    return out


def guard_rows(rows: Sequence[dict[str, Any]], jobs: Sequence[Job], policy: Any) -> None:
    """Add the guard's verdict to every row (``guard``: judged, flagged, findings, basis),
    judged against what the row's reader saw: its job's context (a repaired answer: the
    ``car-reader`` context it was repaired from). Rows of jobs without evidence (no retrieval
    ran) get none."""
    by_job = {(j.query_id, j.condition): j for j in jobs}
    for r in rows:
        condition = "car-reader" if r["condition"] == "car-reader-repair" else r["condition"]
        job = by_job.get((r["query_id"], condition))
        if job is not None and job.evidence is not None:
            r["guard"] = check_answer(r["answer"], job.evidence, policy).to_dict()


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
            base_url,
            model,
            cache=cache,
            timeout=options.pop("timeout", 120.0),
            max_retries=options.pop("max_retries", 4),
            max_tokens=options.pop("max_tokens", 512),
        )
        concurrency = options.pop("concurrency", 4)
        jobs = build_jobs(suite, conditions, **options)
        rows = answer_jobs(jobs, client, concurrency=concurrency)
        if "car-reader-repair" in conditions:
            rows += repair_rows(rows, jobs, client, suite.policy, concurrency=concurrency)
        guard_rows(rows, jobs, suite.policy)
        raw = out_dir / "answers.jsonl"
        with raw.open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        written.append(raw)
        print(f"{len(rows)}/{len(jobs)} answers ({client.calls} model calls, {client.cache_hits} from cache)")
    return written + write_report(classify_rows(rows, suite.name, gold), suite.name, out_dir, command)
