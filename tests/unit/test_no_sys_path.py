"""No code in the checkout edits the import path or loads a module from a file path: tests and evals
import each other through the installed harness (``car_rag_evals``: the perf corpus, the servers,
the XML fuzz cases) or pytest's ``pythonpath`` (the evals scripts the tests run), never through
``sys.path.insert`` (issue 31)."""

from __future__ import annotations

import ast
from pathlib import Path

import car_rag

ROOT = Path(car_rag.__file__).resolve().parents[1]
FOLDERS = ("car_rag", "car_rag_evals", "evals", "examples", "integrations", "tests")
SKIPPED = {"build", "dist", "__pycache__", "node_modules"}


def path_edits(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` touches ``sys.path``, calls ``site.addsitedir`` or
    loads a module from a file (``importlib.util.spec_from_file_location``), under any alias.
    Strings and comments that name them are not code."""
    tree = ast.parse(source)
    aliases = {"sys": {"sys"}, "site": {"site"}}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                if name.name in aliases:
                    aliases[name.name].add(name.asname or name.name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr == "path" and node.value.id in aliases["sys"]:
                found.append((node.lineno, "sys.path"))
            elif node.attr == "addsitedir" and node.value.id in aliases["site"]:
                found.append((node.lineno, "site.addsitedir"))
        if isinstance(node, ast.ImportFrom) and node.module in ("sys", "site"):
            for name in node.names:
                if name.name in ("path", "addsitedir"):
                    found.append((node.lineno, f"from {node.module} import {name.name}"))
        if (isinstance(node, ast.Attribute) and node.attr == "spec_from_file_location") or (
            isinstance(node, ast.alias) and node.name == "spec_from_file_location"
        ):
            found.append((getattr(node, "lineno", 0), "spec_from_file_location"))
    return sorted(set(found))


def python_files() -> list[Path]:
    files = []
    for folder in FOLDERS:
        assert (ROOT / folder).is_dir(), f"{folder}/ is not in the checkout {ROOT}"
        files += [
            path
            for path in sorted((ROOT / folder).rglob("*.py"))
            if not any(
                part in SKIPPED or part.startswith(".") or part.endswith(".egg-info") for part in path.relative_to(ROOT).parts
            )
        ]
    return files


def test_no_file_edits_the_import_path() -> None:
    files = python_files()
    assert len(files) > 200, len(files)  # the walk reached the tree
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in path_edits(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        "import a shared module from the harness (car_rag_evals) or, in a test, an evals/ "
        "script through pytest's pythonpath (pyproject.toml); found:\n" + "\n".join(offenders)
    )


def test_the_check_sees_every_form_and_ignores_words() -> None:
    source = '''
"""Docstrings and comments may say sys.path.insert and site.addsitedir."""
import sys
import sys as system
import site
import importlib.util
from sys import path
from importlib.util import spec_from_file_location
sys.path.insert(0, "evals")                                     # 9
system.path.append("tests")                                     # 10
sys.path[:0] = ["x"]                                            # 11
site.addsitedir("evals")                                        # 12
importlib.util.spec_from_file_location("m", "evals/m.py")       # 13
note = "sys.path.insert(0, here)"                               # a string: not code
'''
    assert path_edits(source) == [
        (7, "from sys import path"),
        (8, "spec_from_file_location"),
        (9, "sys.path"),
        (10, "sys.path"),
        (11, "sys.path"),
        (12, "site.addsitedir"),
        (13, "spec_from_file_location"),
    ]
