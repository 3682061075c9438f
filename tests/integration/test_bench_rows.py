"""The committed benchmark tables reproduce: every car-rag row of ``evals/results/<suite>.json``
(each system named ``car-…``: its summary and, per query, every figure it scored) recomputed from
a fresh store build with the k and depth the file says. Whatever is committed is the reference,
so a change to the retriever that moves a figure fails here until the tables are regenerated
with it (``make bench``). Not compared: latencies (the machine's), the label (prose), and the
top k ids kept for the report's drill-down, where two distractors scored within float rounding
of each other may trade the last places between machines (seen: one GHSA query's fifth place in
the dense-anchored rows, every figure equal).

``make test`` checks the quick suites (GHSA: 2,318 records each); ``make bench-check`` sets
``CAR_BENCH_CHECK=all`` and checks every suite that has a committed table."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from car_rag import CARStore
from car_rag.queries import load_queries
from car_rag_evals.bench import run_system
from car_rag_evals.suites import SUITES, load_suite
from car_rag_evals.systems import build_system

RESULTS = Path(__file__).resolve().parents[2] / "evals" / "results"
QUICK = ("ghsa-freeform", "ghsa-structured")
CHECKED = [s for s in SUITES if (RESULTS / f"{s}.json").is_file()] if os.environ.get("CAR_BENCH_CHECK") == "all" else QUICK


def embed_each_query_once(store: CARStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the store's embedder encode each list of texts once in this test and answer it again from
    memory: the systems ask for the same questions' vectors, one question a call, as each system run
    alone does (so the vectors are the same)."""
    encode, seen = store.embedder.encode, {}

    def once(texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        key = tuple(texts)
        if key not in seen:
            seen[key] = encode(texts, show_progress=show_progress)
        return seen[key].copy()

    monkeypatch.setattr(store.embedder, "encode", once)


@pytest.mark.timeout(3600)  # a store build and five systems over every query: minutes per suite, more under load
@pytest.mark.parametrize("name", CHECKED)
def test_the_committed_car_rag_rows_reproduce_from_a_fresh_build(
    name: str, suite_store: Callable[[str], CARStore], corpora: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    rows = {system: row for system, row in committed["systems"].items() if system.startswith("car-")}
    assert rows, f"{name}.json has no car-rag row"
    suite = load_suite(name, corpora)
    store = suite_store(name)  # built in this session (test_ghsa_smoke.py shares ghsa-freeform's)
    queries = load_queries(suite.queries)
    assert (len(store), len(queries)) == (committed["documents"], committed["queries"])
    embed_each_query_once(store, monkeypatch)  # every system with a dense channel embeds each question
    for system, row in rows.items():
        got = run_system(build_system(system, store, committed["depth"]), suite, queries, store, k=committed["k"], progress=False)
        # per query first: the first query that differs says more than a moved average
        for want, have in zip(row["per_query"], got["per_query"], strict=True):
            scored = {key: value for key, value in want.items() if key != "top"}
            assert {key: have.get(key) for key in scored} == scored, (system, want["query_id"])
        assert got["summary"] == row["summary"], system
