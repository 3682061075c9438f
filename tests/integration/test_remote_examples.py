"""The remote-retriever and MCP examples run as a newcomer runs them: offline, in a fresh interpreter
with a time limit, each building the demo store itself. Their output must show a superseded record
marked with what voids it (through both frameworks' CARServiceRetriever, and through car-rag mcp)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 300
VOIDED = "sec-lodash-cve-2099-10001-disclosure"
FIX = "sec-lodash-4.17.12-release"


def _run(example: str, cwd: Path) -> str:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example)], capture_output=True, text=True, cwd=cwd, env=env, timeout=TIME_LIMIT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_remote_retriever_example_reads_one_served_store_from_both_frameworks(tmp_path):
    out = _run("remote_retriever.py", tmp_path)
    marked = rf"^  superseded +{VOIDED}  superseded by: {FIX}$"
    assert len(re.findall(marked, out, re.M)) == 2, out  # once per framework
    assert "both apps read the same ranking from one store: True" in out


def test_the_mcp_example_calls_both_tools_through_the_sdk(tmp_path):
    out = _run("mcp_agent_tools.py", tmp_path)
    assert "tools: retrieve, explain" in out
    assert re.search(rf"^  \[Document \d+\] superseded {VOIDED}  superseded by {FIX}$", out, re.M), out
    assert f"explain('{VOIDED}'): superseded" in out
    assert f"  {FIX} voids {VOIDED} by patch_fixes_disclosure: " in out and f"controlled by: {FIX}" in out
