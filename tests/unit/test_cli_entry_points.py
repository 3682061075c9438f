"""The CLI reaches the evaluation harness through entry points (group ``car_rag.commands``), never
by naming a harness module; a harness command that is not installed says which extra installs it
(fast tier: no store is built)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from car_rag.cli import build_parser, main, parser
from car_rag.cli.command import Command

ROOT = Path(__file__).resolve().parents[2]
DECLARED = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]


def test_pyproject_declares_each_harness_command_as_a_command_of_that_name() -> None:
    declared = DECLARED[parser.ENTRY_POINTS]
    assert list(declared) == list(parser.HARNESS_COMMANDS)
    for name, value in declared.items():
        assert value.startswith("car_rag_evals."), value
        command = importlib.metadata.EntryPoint(name, value, parser.ENTRY_POINTS).load()
        assert isinstance(command, Command) and command.name == name and command.run is not None


def test_the_installed_entry_points_are_the_declared_ones() -> None:
    installed = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=parser.ENTRY_POINTS)}
    assert installed == DECLARED[parser.ENTRY_POINTS], (
        "the installed car-rag's metadata is not this pyproject.toml's: pip install --no-deps -e . again"
    )


def test_no_core_module_names_a_harness_module() -> None:
    """import-linter sees imports; a module path in a string (importlib.import_module("car_rag_evals.x"))
    it does not: none in car_rag."""
    harness_path = re.compile(r"^car_rag_evals(\.\w+)+(:\w+)?$")
    named = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for path in sorted((ROOT / "car_rag").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and harness_path.match(node.value)
    ]
    assert not named, named


@pytest.mark.parametrize(("command", "extra"), list(parser.HARNESS_COMMANDS.items()))
def test_a_harness_command_without_its_entry_point_says_what_to_install(monkeypatch, capsys, command, extra) -> None:
    monkeypatch.setattr(parser, "entry_points", lambda group: [])  # as if the harness had not registered it
    summary = f"needs the evaluation harness: pip install 'car-rag[{extra}]'"
    assert summary in " ".join(build_parser().format_help().split())
    # whatever it is given (its options are the harness's, --help included), it says what to install
    assert main([command, "--suite", "ghsa-freeform", "RUN_DIR", "--help"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"car-rag {command}: error: this command runs the evaluation harness (the car_rag_evals "
        f"package), which is not installed: pip install 'car-rag[{extra}]'\n"
    )
