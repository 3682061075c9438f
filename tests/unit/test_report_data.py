"""The report's data handling without a browser or a store: the JSON block cannot be closed
by record text, and a damaged run directory is described, not raised on."""

from __future__ import annotations

import json
from pathlib import Path

from car_rag_evals.report import overview
from car_rag_evals.report.page import embed_json, render_page
from car_rag_evals.report.runs import read_run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report_run"


def test_embedded_json_holds_no_markup_and_reads_back():
    data = {"text": "</script><script>alert(1)</script> & <!-- \u2028"}
    embedded = embed_json(data)
    assert not set("<>&\u2028") & set(embedded)
    assert json.loads(embedded) == data
    page = render_page({"queries": [data]}, "<b>title</b>")
    assert page.count("</script>") == 2 and "<title>&lt;b&gt;title&lt;/b&gt;</title>" in page


def test_broken_and_missing_files_become_problems(tmp_path):
    run = read_run(FIXTURE / "llm")
    assert run.kind == "llm" and len(run.answers) == 5
    broken = "answers.labelled.jsonl:4: skipped, invalid JSON: the line is not complete JSON (it ends inside a string)"
    assert run.problems == ["report.json is missing", broken]
    (tmp_path / "answers.jsonl").write_text('{"query_id": "q", "condition": "dense", "answer": "x"}\n[1]\n')
    run = read_run(tmp_path, "ghsa-freeform")
    assert run.suite == "ghsa-freeform" and len(run.answers) == 1
    assert "answers.jsonl:2: skipped, no query_id/condition" in run.problems
    assert "answers.labelled.jsonl is missing: answers shown without labels" in run.problems


def test_bench_result_overview_has_a_row_per_system_with_intervals(tmp_path):
    run = read_run(FIXTURE / "bench")
    assert run.kind == "bench" and run.suite == "ghsa-mini" and set(run.images) == {"tca"}
    table = overview(run)
    assert [row[0] for row in table["rows"]] == ["BM25 (bm25s)", "Dense MiniLM", "car-rag, BM25 anchors, k1=5"]
    assert table["rows"][1][1] == "0.750 [0.30, 0.95]"
    (tmp_path / "broken.json").write_text("{not json")
    run = read_run(tmp_path / "broken.json")
    assert run.bench is None and run.problems[0].startswith("broken.json could not be read")
