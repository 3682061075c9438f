"""A bad JSON line is reported with its line number and where on the line it is wrong, by every
loader that reads JSONL: records (a corpus), query sets, answers (eval-llm, guard) and the run
report's answers. A line cut short has no column that means anything (the JSON decoder, given the
line with its line break, used to say "column 1" of the next line): it is "not complete JSON"."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from car_rag.queries import load_queries
from car_rag.records import load_records
from car_rag_evals.llm.report import read_answers
from car_rag_evals.report.runs import read_run


def _records(path: Path) -> str:
    return "\n".join(str(e) for e in load_records(path).errors)


def _raised(load: Callable[[Path], object]) -> Callable[[Path], str]:
    def problem(path: Path) -> str:
        with pytest.raises(ValueError) as caught:
            load(path)
        return str(caught.value)

    return problem


def _report(path: Path) -> str:
    run_dir = path.parent / "run"
    run_dir.mkdir()
    path.rename(run_dir / "answers.jsonl")
    return "\n".join(read_run(run_dir).problems)


# Each loader with a good first line of its own kind; line 2 is the broken one.
LOADERS = {
    "records": ('{"doc_id": "a", "text": "t", "doc_type": "note"}', _records, "c.jsonl:2: "),
    "queries": ('{"query_id": "q1", "query": "Is it fixed?"}', _raised(load_queries), "c.jsonl:2: "),
    "answers": ('{"query_id": "q1", "condition": "dense", "answer": "yes"}', _raised(read_answers), "c.jsonl:2: "),
    "report": ('{"query_id": "q1", "condition": "dense", "answer": "yes"}', _report, "answers.jsonl:2: skipped, "),
}
CUT = "invalid JSON: the line is not complete JSON"
BROKEN = {
    "cut after a value": ('{"query_id": "q2", "answer": "x"', f"{CUT} (Expecting ',' delimiter at its end)"),
    "cut after a comma": ('{"query_id": "q2", ', f"{CUT} (Expecting property name enclosed in double quotes at its end)"),
    "cut inside a string": ('{"query_id": "q2", "answer": "the fix la', f"{CUT} (it ends inside a string)"),
    "missing colon": ('{"query_id" "q2"}', "invalid JSON: Expecting ':' delimiter at column 13"),
    "extra data": ('{"query_id": "q2"} ,', "invalid JSON: Extra data at column 20"),
}


@pytest.mark.parametrize("ending", ["\n", "\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("broken", BROKEN, ids=list(BROKEN))
@pytest.mark.parametrize("loader", LOADERS, ids=list(LOADERS))
def test_a_bad_line_is_named_with_its_line_and_column_or_as_cut_short(tmp_path, loader, broken, ending):
    good, problem, where = LOADERS[loader]
    line, message = BROKEN[broken]
    path = tmp_path / "c.jsonl"
    path.write_bytes((good + ending + line + ending + good.replace("1", "3") + ending).encode("utf-8"))
    said = problem(path)
    assert where + message in said, said
    assert not re.search(r"column 1\b", said), said


@pytest.mark.parametrize("loader", ["queries", "answers"])
def test_a_line_separator_inside_a_string_does_not_end_the_line(tmp_path, loader):
    """U+2028 is legal in a JSON string; str.splitlines() treats it as a line break."""
    good, _, _ = LOADERS[loader]
    path = tmp_path / "c.jsonl"
    path.write_text(
        "\ufeff" + good.replace("yes", "yes\u2028no").replace("Is it fixed?", "Is it\u2028fixed?") + "\n", encoding="utf-8"
    )  # with a byte-order mark, as some editors write
    loaded = load_queries(path) if loader == "queries" else read_answers(path)
    assert len(loaded) == 1


def test_answers_must_be_json_objects(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('"query_id condition answer"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"a.jsonl:1: expected a JSON object, got str"):
        read_answers(path)
