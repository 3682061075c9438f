"""Every Python block of the integrations' READMEs runs, as a reader would run it (doctest-style).

The blocks of one README run in order in one namespace, in a fresh interpreter (offline, with a
time limit), from a folder holding the demo corpus as ``corpus.jsonl``. A README's snippets
assume what a reader already has: ``SETUP`` gives it, real components throughout (LlamaIndex's
in-memory default index over the demo corpus; the LLMs are the frameworks' own fakes, as there
is no model offline). A block that needs a server is skipped only when the README marks it, on the
line before its fence, with ``<!-- readme-test: skip: REASON -->``. Shell blocks (install
commands) are not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = sorted(ROOT.glob("integrations/*/README.md"))
TIME_LIMIT_S = 300

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(.*?)\s*-->\s*$")

SETUP = {
    # "In a pipeline you already have": an index (LlamaIndex's default, in memory) and an LLM.
    "llama-index-retrievers-car": """
from llama_index.core import VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.retrievers.car import CAREmbedding, load_nodes

index = VectorStoreIndex(load_nodes("corpus.jsonl"), embed_model=CAREmbedding())
llm = MockLLM()
""",
    # The chain ends in the reader's chat model.
    "langchain-car": """
from langchain_core.language_models.fake_chat_models import FakeListChatModel

llm = FakeListChatModel(responses=["(a fake chat model's answer)"])
""",
}

RUNNER = """
import json, sys, traceback
job = json.load(sys.stdin)
namespace = {"__name__": "__readme__"}
exec(compile(job["setup"], "<setup>", "exec"), namespace)
for block in job["blocks"]:
    code = "\\n" * (block["line"] - 1) + block["code"]  # tracebacks name the README's own lines
    try:
        exec(compile(code, job["readme"], "exec"), namespace)
    except BaseException:
        print(f"{job['readme']}:{block['line']}: the block failed", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
    print(f"ran {job['readme']}:{block['line']}")
"""


@dataclass(frozen=True)
class Block:
    line: int
    """The block's first line of code, in the README."""
    code: str
    skip: str | None


def python_blocks(text: str) -> list[Block]:
    """The README's fenced ``python`` blocks, with the skip reason marked before each, if any."""
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        blocks.append(Block(text.count("\n", 0, match.start(1)) + 1, match.group(1), skip.group(1) if skip else None))
    return blocks


def test_python_blocks_are_found_and_skips_give_a_reason():
    text = "a\n<!-- readme-test: skip: needs a server -->\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [Block(4, "x = 1\n", "needs a server"), Block(11, "y = 2\n", None)]
    assert python_blocks("<!-- readme-test: skip: -->\n```python\nx\n```\n")[0].skip == ""


@pytest.mark.parametrize("readme", READMES, ids=[p.parent.name for p in READMES])
def test_every_python_block_of_the_readme_runs(readme: Path, tmp_path: Path, demo_corpus_path: Path):
    blocks = python_blocks(readme.read_text(encoding="utf-8"))
    assert blocks, f"{readme} has no python block"
    for block in blocks:
        assert block.skip is None or block.skip, f"{readme}:{block.line}: a skipped block must say why"
    ran = [b for b in blocks if b.skip is None]
    assert ran, f"{readme}: every python block is skipped"
    shutil.copy(demo_corpus_path, tmp_path / "corpus.jsonl")
    job = {
        "readme": str(readme.relative_to(ROOT)),
        "setup": SETUP[readme.parent.name],
        "blocks": [{"line": b.line, "code": b.code} for b in ran],
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "OPENAI_API_KEY": ""}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=TIME_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("\nran ") + done.stdout.startswith("ran ") == len(ran), done.stdout
