"""`car-rag bench` and `car-rag report` on a corpus of one's own, as a newcomer runs them: the demo
corpus saved as ``corpus.jsonl`` (a suite named "corpus", which no answer classifier reads), its
query set and policy, the real MiniLM store. The report works without ``--no-evidence`` and says
that no answer is classified; a query set whose chains are listed newest first is refused by
bench instead of scoring silently wrong."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from car_rag.cli import main
from car_rag_evals.llm.conditions import QUESTION_SUFFIX

SYSTEMS = "car-default,bm25"


@pytest.fixture(scope="module")
def own(tmp_path_factory, demo_corpus_path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("own")
    demo = demo_corpus_path.parent
    paths = {
        "corpus": folder / "corpus.jsonl",
        "queries": folder / "queries.jsonl",
        "policy": folder / "policy.toml",
        "out": folder / "run",
        "stores": folder / "stores",
    }
    for name in ("corpus", "queries"):
        shutil.copy(demo / f"{name}.jsonl", paths[name])
    shutil.copy(demo / "policy.toml", paths["policy"])
    return paths


def _data(page: Path) -> dict:
    found = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)
    assert found, "no data block in the page"
    return json.loads(found.group(1))


@pytest.fixture(scope="module")
def bench_run(own) -> Path:
    assert (
        main(
            [
                "bench",
                "--corpus",
                str(own["corpus"]),
                "--queries",
                str(own["queries"]),
                "--policy",
                str(own["policy"]),
                "--out",
                str(own["out"]),
                "--stores",
                str(own["stores"]),
                "--systems",
                SYSTEMS,
            ]
        )
        == 0
    )
    assert (own["out"] / "corpus.json").is_file()
    return own["out"]


def test_report_on_a_bench_run_over_ones_own_corpus_works_with_evidence(own, bench_run, capsys):
    page = own["out"] / "report.html"
    code = main(
        [
            "report",
            str(bench_run),
            "--corpus",
            str(own["corpus"]),
            "--queries",
            str(own["queries"]),
            "--policy",
            str(own["policy"]),
            "--stores",
            str(own["stores"]),
            "--out",
            str(page),
        ]
    )
    assert code == 0, capsys.readouterr().err
    data = _data(page)
    assert any("no answer classifier" in p and "'corpus'" in p for p in data["problems"]), data["problems"]
    asked = {q["id"]: q for q in data["queries"]}
    assert len(asked) == 10
    for line in own["queries"].read_text(encoding="utf-8").splitlines():
        query = json.loads(line)
        evidence = asked[query["query_id"]]["evidence"]
        assert set(evidence) == {"reader", "audit"}, query["query_id"]
        for text in evidence.values():  # the question as asked: no built-in kind's follow-up question appended
            assert f"Question: {query['query']}" in text and not any(s in text for s in QUESTION_SUFFIX.values()), text


def test_bench_refuses_chains_listed_newest_first_naming_query_and_field(own, bench_run, tmp_path, capsys):
    rows = [json.loads(line) for line in own["queries"].read_text(encoding="utf-8").splitlines()]
    reversed_ = tmp_path / "reversed.queries.jsonl"
    reversed_.write_text("".join(json.dumps({**r, "chain_doc_ids": r["chain_doc_ids"][::-1]}) + "\n" for r in rows))
    code = main(
        [
            "bench",
            "--corpus",
            str(own["corpus"]),
            "--queries",
            str(reversed_),
            "--policy",
            str(own["policy"]),
            "--out",
            str(tmp_path / "run"),
            "--stores",
            str(own["stores"]),
            "--systems",
            SYSTEMS,
        ]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"{reversed_}:1: query 'demo-q01': field 'chain_doc_ids': listed newest first" in err
    assert "docs/bench-queries.md" in err
    assert not (tmp_path / "run" / "corpus.json").exists()  # nothing scored
