"""Install metadata: one version source, bounded core pins, extras, LICENSE and classifiers in every
pyproject; the integrations use only car_rag's public names (fast tier: reads files, builds nothing)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import car_rag

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
INTEGRATIONS = {
    "llama-index": ROOT / "integrations" / "llama-index-retrievers-car",
    "langchain": ROOT / "integrations" / "langchain-car",
}
PACKAGES = {"llama-index": "llama_index", "langchain": "langchain_car"}  # each integration's package code
PROJECTS = [ROOT, *INTEGRATIONS.values()]


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))


def test_one_version_source() -> None:
    """The core's version lives in car_rag.__version__ only; setuptools reads it from there."""
    data = _project(ROOT)
    assert "version" not in data["project"] and "version" in data["project"]["dynamic"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "car_rag.__version__"}
    Version(car_rag.__version__)  # a valid version


@pytest.mark.parametrize("folder", list(INTEGRATIONS.values()), ids=list(INTEGRATIONS))
def test_integrations_depend_on_a_bounded_core(folder: Path) -> None:
    [core] = [Requirement(r) for r in _project(folder)["project"]["dependencies"] if Requirement(r).name == "car-rag"]
    current = Version(car_rag.__version__)
    assert current in core.specifier, f"{folder.name} does not accept the current core {current}"
    next_minor = Version(f"{current.major}.{current.minor + 1}") if current.major == 0 else Version(f"{current.major + 1}")
    assert next_minor not in core.specifier, f"{folder.name}: {core} has no upper bound below {next_minor}"


def test_core_extras_install_the_integrations_by_distribution_name() -> None:
    extras = _project(ROOT)["project"]["optional-dependencies"]
    for extra, folder in INTEGRATIONS.items():
        name = _project(folder)["project"]["name"]
        version = Version(_project(folder)["project"]["version"])
        [req] = [Requirement(r) for r in extras[extra]]
        assert req.name == name and version in req.specifier


@pytest.mark.parametrize("folder", PROJECTS, ids=["car-rag", *INTEGRATIONS])
def test_license_and_classifiers_in_every_pyproject(folder: Path) -> None:
    project = _project(folder)["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (folder / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) car-rag authors" in text
    assert project["requires-python"] == ">=3.10"
    classifiers = set(project["classifiers"])
    wanted = {f"Programming Language :: Python :: 3.{minor}" for minor in range(10, 14)}
    assert wanted | {"Operating System :: OS Independent", "Typing :: Typed"} <= classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: the expression says it
    assert "urls" not in project  # none invented: the project has no public home yet


def _imports(folder: Path) -> list[tuple[str, str, str]]:
    """(file:line, module, name) for every name the package code under ``folder`` takes from car_rag
    (its tests may reach into internals)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "car_rag":
                found += [(where, node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(where, alias.name, "") for alias in node.names if alias.name.split(".")[0] == "car_rag"]
    return found


@pytest.mark.parametrize("extra", list(INTEGRATIONS))
def test_integrations_import_only_public_names(extra: str) -> None:
    """A public name: in its module's ``__all__``, no leading underscore, in no private module."""
    folder = INTEGRATIONS[extra] / PACKAGES[extra]
    imports = _imports(folder)
    assert imports, f"no car_rag import found under {folder}"
    violations = []
    for where, module, name in imports:
        if any(part.startswith("_") for part in module.split(".")):
            violations.append(f"{where}: private module {module}")
            continue
        if not name:
            continue
        exported = getattr(importlib.import_module(module), "__all__", None)
        if name.startswith("_") or exported is None or name not in exported:
            violations.append(f"{where}: {module}.{name} is not in {module}.__all__")
    assert not violations, "\n".join(violations)
