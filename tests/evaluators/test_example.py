"""examples/ragas_deepeval_audit.py runs as a newcomer runs it (a fresh interpreter, offline), and
its RAGAS and DeepEval figures are the harness's audit (``audit_retriever``) of the same sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ragas")
pytest.importorskip("deepeval")

from car_rag.eval.audit import audit_retriever  # noqa: E402
from car_rag.eval.audit_metrics import graph_of  # noqa: E402
from conftest import DEMO  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ragas_deepeval_audit.py"


def test_the_example_runs_offline_and_gives_the_harness_figures(demo_records, demo_policy, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import json, runpy; print(json.dumps(runpy.run_path({str(EXAMPLE)!r})['main']()))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=os.environ,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    totals = json.loads(done.stdout.strip().splitlines()[-1])
    assert "car_confident_wrong=1 for 'Yes, lodash is still vulnerable" in done.stdout

    import runpy

    retrievers = runpy.run_path(str(EXAMPLE))["retrievers"](demo_records, demo_policy)
    questions = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]
    graph = graph_of(demo_records, demo_policy)
    for system, retrieve in retrievers.items():
        harness = audit_retriever(retrieve, [(q["query"], q["anchor_doc_ids"][0]) for q in questions], graph, k=5)
        ragas, passed = totals[system]["ragas"], totals[system]["deepeval_passed"]
        assert harness.theorem4 is not None  # every demo question has an anchor
        assert ragas["car_closure_violations"] == harness.violations
        assert ragas["car_theorem4"] == passed["car_theorem4"] == harness.theorem4.successes
        assert passed["car_closure_violations"] == harness.queries - harness.sets_with_violations
    assert totals["bm25"]["ragas"]["car_closure_violations"] > 0 == totals["car-rag over bm25"]["ragas"]["car_closure_violations"]
