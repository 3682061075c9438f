"""``car-rag guard`` end to end on a real store (Chroma + MiniLM): answers judged against the
evidence file where it has their line, against a re-retrieval's whole scopes where it does not."""

from __future__ import annotations

import json
from pathlib import Path

from car_rag.cli import main

SCOPE = {"package": "electron", "cve_id": "CVE-2026-34768"}
CORPUS = [
    {
        "doc_id": "disclosure",
        "doc_type": "vulnerability_disclosure",
        "scope": SCOPE,
        "published_at": "2026-02-20",
        "text": "### Impact\nOn Windows, app.setLoginItemSettings wrote the login item's executable path to the Run registry "
        "key without quoting it.\n\n### Fixed Versions\n* `41.0.0-beta.8`\n* `40.8.0`\n* `39.8.1`\n",
    },
    *[
        {
            "doc_id": f"rel-{v}",
            "doc_type": "patch_release",
            "scope": SCOPE,
            "published_at": f"2026-03-{day}",
            "text": f"# Release Notes for v{v}\n\n## Fixes\n\n* Quoted the executable path written by setLoginItemSettings.",
        }
        for v, day in (("39.8.1", "01"), ("40.8.0", "05"), ("41.0.0-beta.8", "10"))
    ],
    {
        "doc_id": "zip-cve",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "zipcraft", "cve_id": "CVE-2099-1"},
        "published_at": "2025-01-01",
        "text": "Zip Slip path traversal in zipcraft archives. No patch is available.",
    },
]
QUESTION = "Does Electron's setLoginItemSettings still write an unquoted executable path on Windows?"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_guard_with_and_without_the_readers_evidence(tmp_path: Path, capsys) -> None:
    corpus = _jsonl(tmp_path / "corpus.jsonl", CORPUS)
    queries = _jsonl(tmp_path / "queries.jsonl", [{"query_id": "q1", "query": QUESTION, "gold_doc_ids": ["rel-41.0.0-beta.8"]}])
    answers = _jsonl(
        tmp_path / "answers.jsonl",
        [
            {"query_id": "q1", "condition": "car-plain", "answer": "Yes, it is patched in 39.8.1 [Document 1]."},
            {"query_id": "q1", "condition": "dense", "answer": "Yes, it is patched in 39.8.1."},
            {"query_id": "q1", "condition": "closed-book", "answer": "No, it is not patched."},
        ],
    )
    evidence = _jsonl(
        tmp_path / "evidence.jsonl",
        [
            # the plain reader saw only the 40.8.0 release note: 39.8.1 is a version it could not have read
            {"query_id": "q1", "condition": "car-plain", "context_doc_ids": ["rel-40.8.0"]},
            {"query_id": "q1", "condition": "closed-book", "context_doc_ids": []},
            {"query_id": "q9", "records": ["zip-cve"]},  # no answer to q9: skipped, and said so
        ],
    )
    out = tmp_path / "out"
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
            str(out),
            "--stores",
            str(tmp_path / "stores"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 evidence line(s)" in captured.err and "line 3" in captured.err
    rows = {r["condition"]: r for r in map(json.loads, (out / "guard.jsonl").read_text().splitlines())}
    plain, dense, closed = rows["car-plain"], rows["dense"], rows["closed-book"]
    assert plain["basis"] == "evidence" and [f["kind"] for f in plain["findings"]] == ["unknown_version"]
    # no evidence line: a re-retrieval, over the whole scope of its top records, knows every branch's release
    assert dense["basis"] == "scopes" and dense["judged"] and not dense["flagged"], dense
    # the closed-book reader saw nothing; the question's subject (from the guard's retrieval) is patched
    assert closed["basis"] == "evidence" and [f["kind"] for f in closed["findings"]] == ["stale_state"]
    assert "not in the evidence the answer was given" in closed["findings"][0]["message"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evidence_skipped"] == {"lines": 1, "first": [3]}
    assert "matched no answer and were skipped" in (out / "summary.md").read_text()
