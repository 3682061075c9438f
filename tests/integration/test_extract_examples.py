"""examples/extract_llamaindex.py and examples/extract_langchain.py run as a newcomer runs them, in
a fresh interpreter: documents with no car-rag field come out typed, linked and resolved (the
replaced policy superseded by its replacement; after the LangChain example re-indexes the edited
replacement, its stale chunks are gone and the old policy is active again)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(name: str, tmp_path: Path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _statuses(block: str) -> dict[str, str]:
    return {doc_id: status for status, doc_id in re.findall(r"^  (\w+)\s+(\S+)\s+\w+$", block, re.M)}


@pytest.mark.parametrize("name", ["extract_llamaindex.py", "extract_langchain.py"])
def test_the_extract_example_resolves_authority_on_raw_documents(name: str, tmp_path: Path) -> None:
    out = _run(name, tmp_path)
    first = out.split("re-indexed")[0]
    assert _statuses(first) == {"memo-31": "active", "pol-12": "active", "pol-7": "superseded"}, out
    assert re.search(r"3 documents -> (\d+) (nodes|chunks)", out) and int(re.findall(r"-> (\d+)", out)[0]) > 3
    if "re-indexed" in out:
        after = out.split("re-indexed")[1]
        assert re.search(r"[1-9]\d* stale chunks deleted", after) and _statuses(after)["pol-7"] == "active", out
