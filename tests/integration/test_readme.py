"""Every code block of the README runs as written, in order, in one folder: the shell blocks
with bash, the Python blocks in one namespace (real MiniLM, Chroma, LlamaIndex, LangChain and a
real `car-rag serve`). Two blocks are not run here, each for a stated reason: the two commands
(`make demo`, `make test`: this test is part of the second) and the install route (`pip
install`: `make dist-check` installs the built wheels into a fresh venv, which is that route)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(README.read_text())]


def not_run_here(language: str, code: str) -> str | None:
    """Why a block is not run by this test (None: it is)."""
    lines = [line for line in code.splitlines() if line.strip() and not line.startswith("#")]
    if language == "bash" and all(line.startswith("make ") for line in lines):
        return "the two commands: this test runs inside `make test`"
    if language == "bash" and any("pip install" in line for line in lines):
        return "the install route: `make dist-check` installs the built wheels into a fresh venv"
    return None


def test_the_readme_has_a_block_for_each_way_in():
    shown = [code for language, code in blocks() if not_run_here(language, code) is None]
    text = "\n".join(shown)
    for entry in ("car-rag query", "ControllingAuthorityRetriever", "llama_index", "langchain_car", "car-rag serve"):
        assert entry in text, entry


def test_every_readme_block_runs(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    namespace: dict[str, object] = {}
    ran = 0
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for language, code in blocks():
            if not_run_here(language, code) is not None:
                continue
            ran += 1
            if language == "python":
                exec(compile(code, f"README.md block {ran}", "exec"), namespace)  # noqa: S102 - the README's own code
                continue
            assert language == "bash", f"a README block in {language!r}: teach this test to run it"
            proc = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", code],
                cwd=tmp_path,
                env=env,
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                out, _ = proc.communicate(timeout=600)
            finally:
                try:  # a block that started a server in the background: nothing outlives it
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            assert proc.returncode == 0, f"README block {ran} failed:\n{code}\n---\n{out}"
    finally:
        os.chdir(cwd)
    assert ran >= 5
    answer = json.loads((tmp_path / "answer.json").read_text())
    assert answer["ambiguity"] is not None and answer["ambiguity"]["scopes"] >= 2
    served = json.loads((tmp_path / "served.json").read_text())
    assert served["reranked"] and served["diagnostics"]["ambiguity"] is not None
    assert namespace["result"].top(1)[0].status == "active"  # type: ignore[attr-defined]


@pytest.mark.parametrize("language", sorted({language for language, _ in blocks()}))
def test_readme_blocks_are_in_languages_this_test_runs(language):
    assert language in ("bash", "python")
