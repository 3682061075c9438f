"""`car-rag extract` and `car-rag ingest --extract`, run in-process against a real store (Chroma +
MiniLM): raw text in, records with edges and their confidence out, authority resolved on them;
bad documents named while nothing already written or stored is lost."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from car_rag import ControllingAuthorityRetriever
from car_rag.cli import main
from car_rag.records import load_records
from car_rag.store import CARStore

POLICY = """
name = "hr"
scope_keys = ["org"]
rules = []
[record_scope]
metadata_fields = {department = "org"}
[extract]
default_doc_type = "policy"
[[extract.identifiers]]
pattern = 'HR-(\\d+)'
doc_id = "hr-{1}"
[[extract.doc_types]]
doc_type = "memo"
title = '\\bmemo\\b'
"""

RAW = [
    {"doc_id": "hr-1", "title": "Travel Policy", "text": "Staff fly economy class on every business trip.", "department": "hr"},
    {
        "doc_id": "hr-2",
        "title": "Travel memo",
        "text": "This memo replaces HR-1. Staff may fly business class on flights longer than six hours.",
        "department": "hr",
    },
    {"doc_id": "hr-3", "text": "Parking spaces are assigned by seniority.", "department": "hr"},
]


def _write(path: Path, items: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def test_extract_writes_records_that_ingest_and_resolve(tmp_path, capsys):
    policy = tmp_path / "hr.toml"
    policy.write_text(POLICY, encoding="utf-8")
    raw = _write(tmp_path / "raw.jsonl", RAW)
    out, report = tmp_path / "records.jsonl", tmp_path / "report.json"
    assert main(["extract", str(raw), "--policy", str(policy), "--out", str(out), "--extract-report", str(report)]) == 0
    captured = capsys.readouterr()
    assert "3 records, 1 edges (1 prose), 2 untyped" in captured.out
    assert "untyped: hr-1" in captured.err and "untyped: hr-3" in captured.err
    loaded = load_records(out)
    assert not loaded.errors
    memo = {r.doc_id: r for r in loaded.records}["hr-2"]
    assert (memo.doc_type, memo.supersedes, memo.edge_confidence("hr-1"), memo.scope) == ("memo", ["hr-1"], 0.9, {"org": "hr"})
    assert json.loads(report.read_text())["edges"][0]["evidence"][0]["text"] == "This memo replaces HR-1."

    assert main(["ingest", str(out), "--store", str(tmp_path / "store"), "--policy", str(policy), "--quiet"]) == 0
    with CARStore.open(tmp_path / "store") as store:
        result = ControllingAuthorityRetriever(store).retrieve("Which class do staff fly on business trips?")
        statuses = {r.doc_id: r.status for r in result.top(None)}
    assert statuses.get("hr-1") == "superseded" and statuses.get("hr-2") == "active"


def test_a_failed_extract_leaves_an_earlier_output_as_it_was(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(POLICY.replace("HR-(\\d+)", "HR-(\\d+"), encoding="utf-8")
    out = tmp_path / "records.jsonl"
    out.write_text("earlier output\n", encoding="utf-8")
    assert main(["extract", str(_write(tmp_path / "raw.jsonl", RAW)), "--policy", str(bad), "--out", str(out)]) == 1
    assert "extract.identifiers.0.pattern" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "earlier output\n"


def test_ingest_extract_names_bad_documents_and_keeps_what_is_stored(tmp_path, capsys):
    policy = tmp_path / "hr.toml"
    policy.write_text(POLICY, encoding="utf-8")
    store = tmp_path / "store"
    assert (
        main(
            [
                "ingest",
                str(_write(tmp_path / "a.jsonl", RAW[:1])),
                "--store",
                str(store),
                "--policy",
                str(policy),
                "--extract",
                "--quiet",
            ]
        )
        == 0
    )
    later = [
        RAW[1],  # cites hr-1, already stored
        {"doc_id": "hr-4", "text": ""},
        {"doc_id": "hr-5", "text": "\x00\x01\x02\x03\x04" * 100},
        {"doc_id": "hr-6", "text": "x " * 3000},
    ]
    code = main(
        ["ingest", str(_write(tmp_path / "b.jsonl", later)), "--store", str(store), "--extract", "--max-chars", "5000", "--quiet"]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert "record 'hr-4' field 'text': empty" in captured.err
    assert "record 'hr-5' field 'text': binary data" in captured.err
    assert "record 'hr-6' field 'text': 6,000 characters, more than the limit of 5,000" in captured.err
    with CARStore.open(store) as opened:
        assert sorted(opened.records) == ["hr-1", "hr-2"]
        assert opened.get("hr-2").supersedes == ["hr-1"] and opened.get("hr-1").text == RAW[0]["text"]


def test_ingest_extract_names_a_record_the_store_rejects_by_its_raw_line(tmp_path, capsys):
    """The store numbers the extracted records by item; a user fixes the raw file, by line."""
    policy = tmp_path / "hr.toml"
    policy.write_text(POLICY, encoding="utf-8")
    argv = ["--store", str(tmp_path / "store"), "--policy", str(policy), "--extract", "--quiet"]
    assert main(["ingest", str(_write(tmp_path / "a.jsonl", RAW[:2])), *argv]) == 0  # hr-2 replaces hr-1
    closing = {"doc_id": "hr-1", "text": "This policy replaces HR-2.", "department": "hr"}
    raw = _write(tmp_path / "b.jsonl", [{"doc_id": "hr-4", "text": ""}, RAW[2], closing])
    assert main(["ingest", str(raw), *argv]) == 1
    err = capsys.readouterr().err
    assert f"rejected: {raw}:3: record 'hr-1'" in err and "cycle" in err
    assert f"{raw}:1: record 'hr-4' field 'text': empty" in err


def test_reingesting_a_changed_document_replaces_its_record_and_its_edges(tmp_path, capsys):
    policy = tmp_path / "hr.toml"
    policy.write_text(POLICY, encoding="utf-8")
    store = tmp_path / "store"
    argv = ["--store", str(store), "--policy", str(policy), "--extract", "--quiet"]
    assert main(["ingest", str(_write(tmp_path / "a.jsonl", RAW)), *argv]) == 0
    changed = {**RAW[1], "text": "Staff may fly business class on flights longer than six hours, as HR-1 allows for executives."}
    assert main(["ingest", str(_write(tmp_path / "b.jsonl", [changed])), *argv]) == 0
    assert "0 added, 1 updated" in capsys.readouterr().out
    with CARStore.open(store) as opened:
        assert opened.get("hr-2").supersedes == [] and opened.get("hr-2").text == changed["text"]
        result = ControllingAuthorityRetriever(opened).retrieve("Which class do staff fly on business trips?")
        assert {r.doc_id: r.status for r in result.top(None)}.get("hr-1") == "active"
