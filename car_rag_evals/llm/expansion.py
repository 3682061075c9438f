"""Query expansion through the chat model, for the ablation's model-dependent variants.

Two kinds, one model call per query each, through :func:`~car_rag_evals.llm.runner.answer_jobs`
(the same client, answer cache, concurrency and retries as ``eval-llm``):

* ``rewrite``: the question rewritten as a search query (the seed's V5 rewrites its queries
  by hand; here the model does, so any suite can run it);
* ``hyde``: a passage that answers the question, to be embedded in its place (HyDE, Gao et
  al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels", with that paper's
  prompt).

The prompts are the files ``prompts/<kind>.txt`` beside this module; ``{question}`` is the
only placeholder. A query whose call fails, or whose answer is empty, is named with the
reason instead of crashing the run; a failed call is not cached, so a re-run tries it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag_evals.llm.client import ChatClient
from car_rag_evals.llm.conditions import Job
from car_rag_evals.llm.runner import answer_jobs

__all__ = ["EXPANSIONS", "Expansions", "expand", "expansion_messages"]

EXPANSIONS = ("rewrite", "hyde")
_PROMPTS = Path(__file__).parent / "prompts"


def expansion_messages(kind: str, question: str) -> list[dict[str, str]]:
    """The one user message that asks for ``kind``'s text for ``question``."""
    if kind not in EXPANSIONS:
        raise ValueError(f"unknown query expansion {kind!r}: one of {', '.join(EXPANSIONS)}")
    template = (_PROMPTS / f"{kind}.txt").read_text(encoding="utf-8")
    return [{"role": "user", "content": template.replace("{question}", question)}]


@dataclass
class Expansions:
    """The model's text per query id, the queries it gave none for (id → reason) and what
    it cost: calls sent to the server and answers read from the cache."""

    kind: str
    texts: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    cached: int = 0

    def summary(self) -> dict[str, Any]:
        failures = dict(sorted(self.failed.items()))
        return {"calls": self.calls, "cached": self.cached, "failed": len(failures), "failures": failures}


def expand(kind: str, queries: Sequence[Any], client: ChatClient, *, concurrency: int = 4, progress: bool = True) -> Expansions:
    """``kind``'s text for every query (``query_id``, ``query``)."""
    out = Expansions(kind)
    jobs = [Job(q.query_id, kind, expansion_messages(kind, q.query)) for q in queries]
    calls, cached = client.calls, client.cache_hits

    def failed(job: Job, exc: Exception) -> None:
        out.failed[job.query_id] = f"model call failed: {type(exc).__name__}: {exc}"

    for row in answer_jobs(jobs, client, concurrency=concurrency, progress=progress, on_error=failed):
        text = row["answer"].strip()
        if text:
            out.texts[row["query_id"]] = text
        else:
            out.failed[row["query_id"]] = "the model returned no text"
    out.calls, out.cached = client.calls - calls, client.cache_hits - cached
    return out
