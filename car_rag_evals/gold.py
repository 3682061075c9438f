"""Gold answers of the built-in suites: what a correct reader answer says, per query."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from car_rag.eval.answers import GoldAnswer, suite_kind
from car_rag.queries import load_queries
from car_rag_evals.suites import load_suite

__all__ = ["load_gold", "version_from_record"]

_VERSION_IN_RECORD = re.compile(r"\b(?:version|release|v)\s*(\d+(?:\.\d+)+(?:[-.]?(?:alpha|beta|rc)\.?\d*)?)", re.IGNORECASE)


def version_from_record(text: str) -> str | None:
    """The version a release record announces: the first "version X" / "release X" / "vX" in it."""
    m = _VERSION_IN_RECORD.search(text or "")
    return m.group(1) if m else None


def load_gold(suite: Any, corpora_dir: str | Path | None = None) -> dict[str, GoldAnswer]:
    """Gold answers by query id for a built-in suite.

    Security: every GHSA query is ``patched`` and its fixing version is the release tag of
    the paired release note (``ghsa_real_pairs.json`` beside the corpora folder: the release
    records' text does not reliably state its own version, the tag does); CVEPatchQA's
    status is the query's ``answer`` and the version is the one its gold patch record
    announces ("published version 35.1"). Legal and compliance: the query's ``answer``.
    """
    s = load_suite(suite, corpora_dir) if isinstance(suite, str) else suite
    kind = suite_kind(s.name)
    queries = load_queries(s.queries)
    if kind != "security":
        return {q.query_id: GoldAnswer(q.answer) for q in queries if q.answer}
    tags: dict[str, str] = {}
    pairs = s.corpus.parent.parent / "ghsa_real_pairs.json"
    if s.name.startswith("ghsa") and pairs.is_file():
        tags = {p["id"]: p["tag"] for p in json.loads(pairs.read_text(encoding="utf-8"))}
    gold_ids = {d for q in queries for d in q.gold_doc_ids}
    texts: dict[str, str] = {}
    with open(s.corpus, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["doc_id"] in gold_ids:
                texts[rec["doc_id"]] = rec.get("text", "")
    out = {}
    for q in queries:
        status = q.answer or "patched"
        version = tags.get(q.query_id)
        if version is None and status == "patched" and q.gold_doc_ids:
            version = version_from_record(texts.get(q.gold_doc_ids[0], ""))
        out[q.query_id] = GoldAnswer(status, version if status == "patched" else None)
    return out
