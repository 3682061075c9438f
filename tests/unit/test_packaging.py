"""Install metadata: one Python floor (the tests' interpreter), one version source per package,
bounded core pins, extras, LICENSE and classifiers in every pyproject; the integrations use only
car_rag's public names (fast tier: reads files, builds nothing)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import car_rag

ROOT = Path(__file__).resolve().parents[2]
INTEGRATIONS = {
    "llama-index": ROOT / "integrations" / "llama-index-retrievers-car",
    "langchain": ROOT / "integrations" / "langchain-car",
}
PACKAGES = {"llama-index": "llama_index", "langchain": "langchain_car"}  # each integration's package code
PROJECTS = [ROOT, *INTEGRATIONS.values()]
VERSION_ATTRS = {  # distribution folder -> the module attribute holding its version
    ROOT: "car_rag.__version__",
    INTEGRATIONS["llama-index"]: "llama_index.retrievers.car.__version__",
    INTEGRATIONS["langchain"]: "langchain_car.__version__",
}
NEWEST_CLASSIFIED = 13
"""The newest Python 3 minor version the classifiers name."""


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))


def _floor(folder: Path) -> Version:
    """The lowest Python a pyproject accepts: its ``requires-python``, a single ``>=X.Y``."""
    spec = _project(folder)["project"]["requires-python"]
    [clause] = SpecifierSet(spec)
    assert clause.operator == ">=", f"{folder / 'pyproject.toml'}: requires-python {spec!r} is not one '>=X.Y'"
    return Version(clause.version)


def _declared_version(folder: Path) -> str:
    """The literal ``__version__ = "..."`` of a distribution's package, read as setuptools reads it."""
    module = VERSION_ATTRS[folder].rsplit(".", 1)[0]
    init = folder.joinpath(*module.split("."), "__init__.py")
    values = [
        node.value.value
        for node in ast.parse(init.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
        and isinstance(node.value, ast.Constant)
    ]
    assert len(values) == 1, f"{init}: expected one literal __version__ assignment, found {values}"
    return str(values[0])


def test_one_python_floor_and_the_tests_run_on_it() -> None:
    """The three packages declare the same lowest Python, and the tests run on exactly that version:
    what is declared is what is tested (CI's interpreter is the floor)."""
    floors = {_project(folder)["project"]["name"]: _floor(folder) for folder in PROJECTS}
    assert len(set(floors.values())) == 1, f"requires-python differs between the packages: {floors}"
    floor = next(iter(floors.values()))
    running = Version(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert running == floor, (
        f"the tests run on Python {running} but the packages declare requires-python >={floor}: run them on "
        f"Python {floor}, the lowest declared version (as CI does), or, to change the floor, change requires-python "
        "and the 'Programming Language :: Python :: 3.x' classifiers in pyproject.toml, "
        "integrations/llama-index-retrievers-car/pyproject.toml and integrations/langchain-car/pyproject.toml "
        "together, and the Python versions named in README.md and the integrations' READMEs"
    )


@pytest.mark.parametrize("folder", PROJECTS, ids=["car-rag", *INTEGRATIONS])
def test_one_version_source(folder: Path) -> None:
    """Each distribution's version lives in its package's ``__version__`` only; setuptools reads it."""
    data = _project(folder)
    assert "version" not in data["project"] and "version" in data["project"]["dynamic"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": VERSION_ATTRS[folder]}
    Version(_declared_version(folder))  # a valid version
    assert _declared_version(ROOT) == car_rag.__version__


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
        version = Version(_declared_version(folder))
        [req] = [Requirement(r) for r in extras[extra]]
        assert req.name == name and version in req.specifier


def _requirement(requirements: list[str], name: str) -> Requirement:
    [req] = [Requirement(r) for r in requirements if Requirement(r).name == name]
    return req


def test_chroma_floor_holds_list_metadata() -> None:
    """The store writes list metadata to Chroma (native lists), which Chroma holds from 1.5.0 on."""
    chroma = _requirement(_project(ROOT)["project"]["optional-dependencies"]["store"], "chromadb")
    assert Version("1.4.99") not in chroma.specifier and Version("1.5.0") in chroma.specifier, chroma


def test_llama_index_core_range_is_the_tested_series() -> None:
    """llama-index-core is claimed only for the minor series the tests run on."""
    core = _requirement(_project(INTEGRATIONS["llama-index"])["project"]["dependencies"], "llama-index-core")
    try:
        tested = Version(importlib.metadata.version("llama-index-core"))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llama-index-core is not installed here")
    series = Version(f"{tested.major}.{tested.minor}")
    assert tested in core.specifier, f"{core} does not admit the tested llama-index-core {tested}"
    below = Version(f"{series.major}.{series.minor - 1}.999") if series.minor else Version(f"{series.major - 1}.999")
    assert below not in core.specifier, f"{core} claims releases before the tested series {series}.x"


@pytest.mark.parametrize("folder", PROJECTS, ids=["car-rag", *INTEGRATIONS])
def test_license_and_classifiers_in_every_pyproject(folder: Path) -> None:
    project = _project(folder)["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (folder / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) car-rag authors" in text
    classifiers = set(project["classifiers"])
    floor = _floor(folder)
    wanted = {f"Programming Language :: Python :: 3.{minor}" for minor in range(floor.minor, NEWEST_CLASSIFIED + 1)}
    assert wanted | {"Operating System :: OS Independent", "Typing :: Typed"} <= classifiers
    below = {f"Programming Language :: Python :: 3.{minor}" for minor in range(floor.minor)} & classifiers
    assert not below, f"{project['name']}: classifiers name Pythons below requires-python >={floor}: {sorted(below)}"
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
