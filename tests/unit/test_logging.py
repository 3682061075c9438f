"""The core logs through module loggers under ``car_rag``, adds only a NullHandler, and prints
nothing itself (only the CLI and the demo write to stdout)."""

from __future__ import annotations

import ast
import logging
import re
import subprocess
import sys
from pathlib import Path

from car_rag import load_policy, load_records
from car_rag.adapters import DictStore

CORE = Path(__file__).resolve().parents[2] / "car_rag"
DEMO = CORE / "data" / "demo"


def test_the_library_adds_a_null_handler_only() -> None:
    code = (
        "import logging, car_rag, car_rag.store, car_rag.retriever, car_rag.lookup; "
        "lib = logging.getLogger('car_rag'); "
        "print([type(h).__name__ for h in lib.handlers], lib.level, logging.getLogger().handlers)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "['NullHandler'] 0 []"


def test_no_print_outside_the_cli_and_the_demo() -> None:
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        if path.parent == CORE / "cli" or path.name == "demo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{path.relative_to(CORE.parent)}:{node.lineno}")
    assert not offenders, offenders


def test_modules_that_report_have_a_module_logger() -> None:
    for name in ("retriever", "lookup", "embedding", "policy"):
        text = (CORE / f"{name}.py").read_text(encoding="utf-8")
        assert "logging.getLogger(__name__)" in text, name


def test_the_store_reports_under_one_logger_whichever_module_writes() -> None:
    """``car_rag.store`` names every message of the store's package (what users filter on)."""
    texts = {path.stem: path.read_text(encoding="utf-8") for path in sorted((CORE / "store").glob("*.py"))}
    reporting = {stem for stem, text in texts.items() if re.search(r"\blog\.(debug|info|warning|error)\(", text)}
    assert reporting >= {"car_store", "chroma", "indexes", "ingest", "replica"}
    assert [stem for stem in sorted(reporting) if "log = logging.getLogger(__package__)" not in texts[stem]] == []


def test_stage2_lookups_are_logged(caplog) -> None:
    store = DictStore.of(load_records(DEMO / "corpus.jsonl").records)
    with caplog.at_level(logging.DEBUG, logger="car_rag"):
        result = store.resolve(
            load_policy(DEMO / "policy.toml"), "Is lodash still vulnerable?", ["sec-lodash-cve-2099-10001-disclosure"]
        )
    assert result.doc_ids(1) == ["sec-lodash-4.17.12-release"]
    [message] = [r.getMessage() for r in caplog.records if r.name == "car_rag.lookup"]
    assert message.startswith("Stage 2 over DictStore: 1 anchors, ") and "lookup rounds" in message
