"""The evaluator-audit example run as a newcomer runs it (offline, a fresh interpreter, a time
limit): LlamaIndex's RetrieverEvaluator with car-rag's metrics must find closure violations in
the user's QueryFusionRetriever and none once CARRetriever wraps it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_evaluator_audit_example_catches_the_fusion_retriever(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env |= {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "llamaindex_evaluator_audit.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = dict(re.findall(r"^(\S+): closure violations (\d+) in ", done.stdout, re.M))
    assert set(rows) == {"QueryFusionRetriever", "CARRetriever(QueryFusionRetriever)"}, done.stdout
    assert int(rows["QueryFusionRetriever"]) > 0 and int(rows["CARRetriever(QueryFusionRetriever)"]) == 0
    assert re.search(r"^CARRetriever\(QueryFusionRetriever\): .*Theorem 4 10/10", done.stdout, re.M), done.stdout
