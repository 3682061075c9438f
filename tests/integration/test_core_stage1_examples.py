"""The two examples of car-rag's own Stage 1 inside a framework (``examples/core_stage1_llamaindex.py``,
``examples/core_stage1_langchain.py``) run as a newcomer runs them: offline, in a fresh interpreter
with a time limit. Each must show the frontier first with the record it voids marked superseded,
the question's scope probability, and the ambiguity of a question naming several scopes; both
frameworks run the same core Stage 1, so they print the same."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 300


def _run(name: str, cwd: Path) -> str:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, cwd=cwd, env=env, timeout=TIME_LIMIT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, str]:
    cwd = tmp_path_factory.mktemp("examples")
    return {name: _run(f"core_stage1_{name}.py", cwd) for name in ("llamaindex", "langchain")}


@pytest.mark.parametrize("name", ["llamaindex", "langchain"])
def test_the_example_shows_the_frontier_the_superseded_record_and_the_ambiguity(outputs, name) -> None:
    out = outputs[name]
    first, second = out.split("Q: ")[1:]
    rows = re.findall(r"^  (\w+) +p\(scope\)=(\S+) +(\S+)$", first, re.M)
    assert rows[0] == ("active", "1.0", "sec-lodash-4.17.12-release"), out
    assert ("superseded", "sec-lodash-cve-2099-10001-disclosure") in [(s, d) for s, _, d in rows], out
    assert int(re.search(r"ambiguous: (\d+) scopes", second).group(1)) >= 2, out  # type: ignore[union-attr]


def test_both_frameworks_print_the_same(outputs) -> None:
    assert outputs["llamaindex"] == outputs["langchain"]
