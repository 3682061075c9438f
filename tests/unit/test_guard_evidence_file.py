"""``car-rag guard --evidence``: the evidence file, read strictly; bad input is a clear error
naming the line and field, never a traceback (fast tier: no store is opened)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from car_rag.cli import main
from car_rag_evals.guard_run import _form, read_evidence, unmatched_lines


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8")
    return path


AMBIGUITY = {
    "scopes": 2,
    "states": {"patched": 1, "vulnerable": 1},
    "members": [
        {"scope": {"package": "puppet", "cve_id": "CVE-1"}, "probability": 0.5, "state": "patched", "controlling": ["p1"]},
        {"scope": {"package": "puppet", "cve_id": "CVE-2"}, "probability": 0.5, "state": "vulnerable", "controlling": ["d2"]},
    ],
}


def test_every_evidence_shape_is_read(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "e.jsonl",
        {"query_id": "q1", "condition": "car-plain", "records": ["a", "b"]},
        # car-rag query --format json --with-text, with a query id: ranks number the records, texts were seen
        {
            "query_id": "q2",
            "records": [{"rank": 1, "doc_id": "a", "text": "Release 1.2.3"}, {"rank": 3, "doc_id": "c"}],
            "ambiguity": AMBIGUITY,
        },
        # an eval-llm answers.jsonl row is evidence as it stands
        {"query_id": "q3", "condition": "car-reader", "answer": "…", "label": "correct", "context_doc_ids": ["a"]},
        {"query_id": "q4", "condition": "x", "text": "[Document 1] (patch_release)\nRelease 1.2.3", "ambiguity": None},
        "",
    )
    q1, q2, q3, q4 = read_evidence(path)
    assert (q1.doc_ids, q1.numbers, q1.condition, q1.states_ambiguity) == (("a", "b"), None, "car-plain", False)
    assert (q2.doc_ids, q2.numbers, q2.condition, q2.text) == (("a", "c"), (1, 3), None, "Release 1.2.3")
    assert q2.ambiguity is not None and q2.ambiguity.states == {"patched": 1, "vulnerable": 1}
    assert [m.controlling for m in q2.ambiguity.members] == [("p1",), ("d2",)]
    assert q3.doc_ids == ("a",) and _form("car-reader", q3) == "packets"
    assert q4.doc_ids is None and q4.states_ambiguity and q4.ambiguity is None and _form("x", q4) == "documents"
    assert _form("dense", None) == "documents" and _form("car-xml", None) == "packets"


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", ":2: not JSON"),
        ("[1, 2]", ":2: must be a JSON object"),
        ({"condition": "dense", "records": ["a"]}, ":2: missing field 'query_id'"),
        ({"query_id": 7, "records": ["a"]}, ":2: missing field 'query_id'"),
        ({"query_id": "q", "condition": 3, "records": ["a"]}, ":2: 'condition' must be text"),
        ({"query_id": "q"}, ":2: no evidence: give 'records', 'context_doc_ids' or 'text'"),
        ({"query_id": "q", "records": "a"}, ":2: 'records' must be a list"),
        ({"query_id": "q", "records": [{"rank": 1}]}, r":2: records\[0\]: must be a doc id or a record object with 'doc_id'"),
        ({"query_id": "q", "records": [{"doc_id": "a", "rank": 0}]}, r":2: records\[0\].rank: must be a whole number >= 1"),
        (
            {"query_id": "q", "records": [{"doc_id": "a", "rank": 1}, "b"]},
            ":2: 'records': give 'rank' for every record or for none",
        ),
        ({"query_id": "q", "context_doc_ids": [None]}, r":2: context_doc_ids\[0\]"),
        ({"query_id": "q", "text": 5}, ":2: 'text' must be the rendered evidence"),
        ({"query_id": "q", "records": ["a"], "form": "xml"}, ":2: 'form' must be one of"),
        ({"query_id": "q", "records": ["a"], "dated": "yes"}, ":2: 'dated' must be true or false"),
        ({"query_id": "q", "records": ["a"], "ambiguity": {"scopes": 1, "states": {}}}, ":2: ambiguity.scopes"),
        ({"query_id": "q", "records": ["a"], "ambiguity": {"scopes": 2, "states": {"patched": "one"}}}, ":2: ambiguity.states"),
        (
            {"query_id": "q", "records": ["a"], "ambiguity": {"scopes": 2, "states": {}, "members": [{"scope": {}}]}},
            r":2: ambiguity.members\[0\]",
        ),
        (
            {"query_id": "ok", "condition": "dense", "records": ["b"]},
            ":2: a second evidence line for query 'ok', condition 'dense' "
            r"\(first: line 1\)",
        ),
    ],
)
def test_bad_evidence_lines_are_named(tmp_path: Path, line: object, message: str) -> None:
    path = _write(tmp_path / "e.jsonl", {"query_id": "ok", "condition": "dense", "records": ["a"]}, line)
    with pytest.raises(ValueError, match=f"^{path}{message}"):
        read_evidence(path)


def test_a_missing_evidence_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--evidence .*nowhere.jsonl: no such file"):
        read_evidence(tmp_path / "nowhere.jsonl")


def test_evidence_for_no_answer_is_counted_and_skipped(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "e.jsonl",
        {"query_id": "q1", "condition": "dense", "records": ["a"]},
        {"query_id": "q1", "condition": "car-xml", "records": ["a"]},  # q1 was not answered under car-xml
        {"query_id": "q2", "records": ["a"]},  # q2 was not asked at all
        {"query_id": "q1", "records": ["a"]},  # every other condition of q1
    )
    rows = [{"query_id": "q1", "condition": "dense", "answer": "x"}, {"query_id": "q1", "condition": "car-plain", "answer": "y"}]
    assert unmatched_lines(read_evidence(path), rows) == [2, 3]


def _cli(tmp_path: Path, evidence: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    corpus = _write(tmp_path / "c.jsonl", {"doc_id": "a", "text": "t", "doc_type": "vulnerability_disclosure"})
    queries = _write(tmp_path / "q.jsonl", {"query_id": "q1", "query": "Is it patched?", "gold_doc_ids": ["a"]})
    answers = _write(tmp_path / "a.jsonl", {"query_id": "q1", "condition": "dense", "answer": "Yes."})
    code = main(
        [
            "guard",
            "--corpus",
            str(corpus),
            "--queries",
            str(queries),
            "--policy",
            "security-advisory",
            "--answers",
            str(answers),
            "--evidence",
            str(evidence),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ('{"query_id": "q1", "records": ["a"]}\n{oops\n', ":2: not JSON"),
        ('{"records": ["a"]}\n', ":1: missing field 'query_id'"),
    ],
)
def test_the_command_reports_bad_evidence_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    evidence = tmp_path / "evidence.jsonl"
    if content is not None:
        evidence.write_text(content, encoding="utf-8")
    code, err = _cli(tmp_path, evidence, capsys)
    assert code == 1 and err.startswith("car-rag guard: error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
