"""Reading a run directory for the report, tolerantly: what ``car-rag bench`` or
``car-rag eval-llm`` wrote, with every missing file or unreadable line noted as a problem
instead of raised, so a damaged run still gets a report that says what is missing."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from car_rag.records import json_line_error

__all__ = ["Run", "read_run"]

LLM_FILES = ("report.json", "answers.labelled.jsonl")


@dataclass
class Run:
    """One run as the report sees it: ``kind`` is ``bench`` or ``llm``."""

    kind: str
    path: Path
    suite: str | None
    bench: dict[str, Any] | None = None
    llm_report: dict[str, Any] | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)
    """Plot name -> data URI (the page carries its plots)."""
    problems: list[str] = field(default_factory=list)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        problems.append(f"{path.name} is missing")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path.name} could not be read: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name} is not a JSON object")
        return None
    return data


def _read_jsonl(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """Rows of a JSONL; a broken line is skipped and named."""
    rows: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8-sig") as handle:  # lines end at a line break only (not at U+2028)
            lines = list(handle)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path.name} could not be read: {exc}")
        return rows
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            problems.append(f"{path.name}:{number}: skipped, {json_line_error(exc)}")
            continue
        if not isinstance(row, dict) or not {"query_id", "condition"} <= set(row):
            problems.append(f"{path.name}:{number}: skipped, no query_id/condition")
            continue
        rows.append(row)
    return rows


def _image(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _bench_file(path: Path, suite: str | None) -> Path:
    if path.is_file():
        return path
    candidates = sorted(p for p in path.glob("*.json") if not p.name.endswith("_parity.json"))
    if suite is not None:
        return path / f"{suite}.json"
    if len(candidates) == 1:
        return candidates[0]
    raise ValueError(f"{path} holds {len(candidates)} bench results: name one with --suite")


def read_run(path: Path, suite: str | None = None) -> Run:
    """A bench result (its JSON file, or the folder with ``--suite``) or an eval-llm folder
    (recognised by its ``report.json`` or answers files)."""
    if not path.exists():
        raise FileNotFoundError(f"run not found: {path}")
    if path.is_dir() and any((path / name).exists() for name in (*LLM_FILES, "answers.jsonl")):
        return _read_llm(path, suite)
    bench_path = _bench_file(path, suite)
    problems: list[str] = []
    bench = _read_json(bench_path, problems)
    if bench is not None and not isinstance(bench.get("systems"), dict):
        problems.append(f"{bench_path.name} has no systems")
        bench = None
    name = (bench or {}).get("suite") or suite or bench_path.stem
    run = Run("bench", bench_path, name, bench=bench, problems=problems)
    for plot in ("tca", "rank", "latency"):
        png = bench_path.with_name(f"{name}-{plot}.png")
        if png.is_file():
            run.images[plot] = _image(png)
    return run


def _read_llm(path: Path, suite: str | None) -> Run:
    problems: list[str] = []
    report = _read_json(path / "report.json", problems)
    labelled = path / "answers.labelled.jsonl"
    if labelled.is_file():
        answers = _read_jsonl(labelled, problems)
    elif (path / "answers.jsonl").is_file():
        problems.append("answers.labelled.jsonl is missing: answers shown without labels")
        answers = _read_jsonl(path / "answers.jsonl", problems)
    else:
        problems.append("no answers file (answers.labelled.jsonl or answers.jsonl)")
        answers = []
    run = Run("llm", path, (report or {}).get("suite") or suite, llm_report=report, answers=answers, problems=problems)
    if (path / "labels.png").is_file():
        run.images["labels"] = _image(path / "labels.png")
    return run
