"""``car-rag eval-llm``: what a reader model answers from each retrieval condition, classified.

Two ways in:

* ``--answers FILE.jsonl`` — answers produced elsewhere (``query_id``, ``condition``,
  ``answer``; optional ``controlling_in_context``): classified and reported, no model called.
* ``--base-url URL --model NAME`` — any OpenAI-compatible chat server (OpenAI, vLLM,
  llama.cpp's server …) answers each query under each condition:

  ``dense``              dense MiniLM top-k, plain documents
  ``car-plain``          car-rag top-k, plain documents (``fresh-plain``: dated, oldest first)
  ``car-reader``         car-rag top-k in the reader-first form (``car-reader-repair``: its
                         answers the guard flags, asked once more)
  ``car-audit``          car-rag top-k as the audit XML, superseded packets marked
  ``car-audit-omit``     the same with superseded packets omitted
  ``closed-book``        no context (optional)

  (``car-xml`` and ``car-xml-omit``, the audit conditions' former names, still work for one
  release.) Each answer gets the authority guard's verdict against the context it was given.

  Calls run in a thread pool (``concurrency``), at temperature 0, with the client's retries
  and timeout; every answer is appended to an on-disk JSONL cache keyed by
  sha256(model, messages) as soon as it arrives, so a crash loses nothing and a re-run
  costs nothing.

Output (``--out DIR``): ``answers.labelled.jsonl`` (query_id, condition, answer, label,
reason, …), ``report.json`` and ``report.md`` (per-condition label rates with Wilson 95%
intervals; label × controlling-record-in-context when known) and ``labels.png``.

Modules: :mod:`~car_rag_evals.llm.conditions` (the conditions and the job per query ×
condition), :mod:`~car_rag_evals.llm.client` (the chat client), :mod:`~car_rag_evals.llm.cache`
(the answer cache), :mod:`~car_rag_evals.llm.runner` (jobs through the model, guard and
repair, the command) and :mod:`~car_rag_evals.llm.report` (classify, count, pair, write).
:mod:`~car_rag_evals.llm.expansion` puts the same client and cache to ``bench --ablation``'s
query rewrite and HyDE.
"""

from car_rag_evals.llm.cache import AnswerCache, cache_key
from car_rag_evals.llm.client import ChatClient
from car_rag_evals.llm.conditions import (
    CONDITION_FORMS,
    CONDITIONS,
    DEFAULT_CONDITIONS,
    QUESTION_SUFFIX,
    RENAMED_CONDITIONS,
    Job,
    build_jobs,
    condition_name,
)
from car_rag_evals.llm.report import classify_rows, paired, read_answers, report, write_report
from car_rag_evals.llm.runner import answer_jobs, guard_rows, repair_rows, run_eval_llm

__all__ = [
    "CONDITION_FORMS",
    "CONDITIONS",
    "DEFAULT_CONDITIONS",
    "QUESTION_SUFFIX",
    "RENAMED_CONDITIONS",
    "AnswerCache",
    "ChatClient",
    "Job",
    "answer_jobs",
    "build_jobs",
    "cache_key",
    "classify_rows",
    "condition_name",
    "guard_rows",
    "paired",
    "read_answers",
    "repair_rows",
    "report",
    "run_eval_llm",
    "write_report",
]
