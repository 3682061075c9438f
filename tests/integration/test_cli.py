"""The `car-rag` command line, run in-process against real stores."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from car_rag.cli import main
from helpers_xml import child, text_of

DEMO = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli") / "store"
    assert (
        main(["ingest", str(DEMO / "corpus.jsonl"), "--store", str(folder), "--policy", str(DEMO / "policy.toml"), "--quiet"])
        == 0
    )
    return folder


def test_ingest_is_idempotent_and_reports_counts(cli_store, capsys):
    assert main(["ingest", str(DEMO / "corpus.jsonl"), "--store", str(cli_store), "--quiet"]) == 0
    assert "0 added, 0 updated, 45 unchanged, 0 rejected" in capsys.readouterr().out


def test_ingest_names_rejected_records_and_exits_1(cli_store, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"doc_id": "no-type", "text": "x"}) + "\n")
    assert main(["ingest", str(bad), "--store", str(cli_store), "--quiet"]) == 1
    captured = capsys.readouterr()
    assert "record 'no-type' field 'doc_type'" in captured.err and "holds 45 records" in captured.out


def test_query_table_puts_the_controlling_record_first(cli_store, capsys):
    assert (
        main(["query", "--store", str(cli_store), "Is zipcraft still open to Zip Slip path traversal?", "--anchors", "bm25"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    first = lines[1].split()
    assert first[:3] == ["1", "active", "sec-zipcraft-2.3.4-release"]
    assert any(line.split()[:2] == ["prov", "superseded"] and "sec-zipcraft-cve-2099-10005-disclosure" in line for line in lines)


def test_query_json_and_xml(cli_store, capsys):
    question = "Is lodash still vulnerable to CVE-2099-10001?"
    assert main(["query", "--store", str(cli_store), question, "--format", "json", "--k", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scope_ids"] == {"cve_id": ["CVE-2099-10001"]} and len(data["records"]) == 3
    assert data["records"][0]["doc_id"] == "sec-lodash-4.17.12-release" and data["records"][0]["status"] == "active"
    assert main(["query", "--store", str(cli_store), question, "--format", "audit", "--k", "3"]) == 0
    root = ET.fromstring(capsys.readouterr().out)
    assert root.tag == "evidence" and child(root, "evidence-packet").get("doc-id") == "sec-lodash-4.17.12-release"
    assert main(["query", "--store", str(cli_store), question, "--format", "plain", "--k", "3"]) == 0
    plain = capsys.readouterr().out
    assert plain.startswith("[Document 1] (patch_release") and plain.count("[Document ") == 3
    assert main(["query", "--store", str(cli_store), question, "--format", "reader", "--k", "3"]) == 0
    root = ET.fromstring(capsys.readouterr().out)
    # The question names its CVE id (and lodash): the subject is certain, so no probability is stated.
    assert re.match(r"lodash, CVE-2099-10001: patched\.", text_of(root, "digest"))
    assert (child(root, "packet").get("status"), child(root, "packet").get("version")) == ("current", "4.17.12")


def test_query_batch_writes_one_line_per_query(cli_store, tmp_path):
    out = tmp_path / "answers.jsonl"
    assert main(["query", "--store", str(cli_store), "--queries", str(DEMO / "queries.jsonl"), "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    gold = {json.loads(q)["query_id"]: json.loads(q)["gold_doc_ids"] for q in (DEMO / "queries.jsonl").read_text().splitlines()}
    assert [line["query_id"] for line in lines] == list(gold)
    for line in lines:
        assert set(gold[line["query_id"]]) & {r["doc_id"] for r in line["records"]}
        assert all(r["status"] in ("active", "superseded") for r in line["records"])


def test_single_and_batch_json_have_one_shape_and_text_on_request(cli_store, tmp_path, capsys):
    """Batch output is JSON lines of the single-query object (plus its query_id); --with-text adds texts."""
    question = "Is lodash still vulnerable to CVE-2099-10001?"
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query_id": "q1", "query": question}) + "\n")
    base = ["query", "--store", str(cli_store), "--anchors", "bm25", "--k", "3"]
    assert main([*base, question, "--format", "json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert main([*base, "--queries", str(queries)]) == 0  # stdout, json lines by default
    [batch] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert batch.pop("query_id") == "q1"
    for data in (single, batch):
        data.pop("timings_ms")
    assert batch == single and "text" not in single["records"][0]
    assert main([*base, question, "--format", "json", "--with-text"]) == 0
    texted = json.loads(capsys.readouterr().out)
    assert main([*base, "--queries", str(queries), "--format", "json", "--with-text"]) == 0
    [texted_line] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    from car_rag import CARStore

    with CARStore.open(cli_store) as store:
        for data in (texted, texted_line):
            assert [r["text"] for r in data["records"]] == [store.get(r["doc_id"]).text for r in data["records"]]
            assert {k: v for k, v in data["records"][0].items() if k != "text"} == single["records"][0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--queries", "Q", "--format", "table"], "--queries writes JSON lines"),
        (["--queries", "Q", "--format", "plain"], "--queries writes JSON lines"),
        (["question", "--format", "audit", "--with-text"], "--with-text adds record texts"),
        (["question", "--out", "o.jsonl"], "--out goes with --queries"),
        ([], "give either a query text or --queries"),
        (["question", "--queries", "Q"], "give either a query text or --queries"),
    ],
)
def test_conflicting_query_options_are_usage_errors(cli_store, tmp_path, capsys, argv, message):
    argv = [str(tmp_path / "q.jsonl") if a == "Q" else a for a in argv]
    assert main(["query", "--store", str(cli_store), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: car-rag query") and f"car-rag query: error: {message}" in err


def test_query_with_a_caller_hides_what_it_may_not_read(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps(
            {
                "doc_id": "d",
                "text": "yamlite unsafe load deserialization",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": "yamlite", "cve_id": "CVE-1"},
            }
        )
        + "\n"
        + json.dumps(
            {
                "doc_id": "p",
                "text": "Release 3.0.0 notes",
                "doc_type": "patch_release",
                "scope": {"package": "yamlite", "cve_id": "CVE-1"},
                "allowed_principals": ["sec"],  # public, as what it voids (car_rag.trust), but embargoed
            }
        )
        + "\n"
    )
    store = tmp_path / "s"
    assert main(["ingest", str(corpus), "--store", str(store), "--policy", "security-advisory", "--quiet"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "query",
                "--store",
                str(store),
                "yamlite deserialization",
                "--anchors",
                "bm25",
                "--tenant",
                "globex",
                "--format",
                "json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert [(r["doc_id"], r["status"], r["hidden_superseder"]) for r in data["records"]] == [("d", "superseded", True)]


def test_demo_and_policies(capsys):
    assert main(["demo"]) == 0
    assert (
        "car-rag  controlling record shown for 10/10; superseded records shown without their superseder: 0"
        in capsys.readouterr().out
    )
    assert main(["policies"]) == 0
    listing = capsys.readouterr().out
    assert all(
        name in listing for name in ("security-advisory", "legal-precedent", "drug-regulation", "sec-204a1", "versioned-document")
    )


def test_runtime_errors_are_one_line_with_exit_1(tmp_path, capsys):
    missing = tmp_path / "missing"
    assert main(["query", "--store", str(missing), "anything"]) == 1
    err = capsys.readouterr().err
    # query has no --policy: it is not told to pass one
    assert err == f"car-rag query: error: no car-rag store at {missing}: run car-rag ingest first\n"
    assert not missing.exists()
    assert main(["ingest", str(tmp_path / "nope.jsonl"), "--store", str(tmp_path / "s"), "--policy", "nope"]) == 1
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert main(["query", "--store", str(tmp_path / "s"), "--queries", str(tmp_path / "nope.jsonl")]) == 1


@pytest.mark.parametrize(
    "option, value",
    [("--k", "-1"), ("--k", "0"), ("--k1", "0"), ("--k1", "-3"), ("--depth", "0"), ("--depth", "-50"), ("--k", "two")],
)
def test_counts_below_one_are_usage_errors(cli_store, capsys, option, value):
    """`--k -1` used to print every record but the last one."""
    with pytest.raises(SystemExit) as exit_:
        main(["query", "--store", str(cli_store), "lodash prototype pollution", "--anchors", "bm25", option, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: car-rag query") and f"argument {option}: must be" in err and value in err


def test_negative_k_is_an_error_not_a_slice(cli_store):
    from car_rag import CARStore, ControllingAuthorityRetriever

    with CARStore.open(cli_store) as store:
        result = ControllingAuthorityRetriever(store, anchors="bm25").retrieve("lodash prototype pollution")
    assert len(result) > 1 and len(result.top(None)) == len(result) and result.top(0) == []
    for call in (result.top, result.doc_ids, result.to_dict):
        with pytest.raises(ValueError, match="k must be >= 0, got -1"):
            call(-1)


def test_verbose_logs_store_ingest_and_query(tmp_path, capsys):
    store = tmp_path / "s"
    assert (
        main(["-v", "ingest", str(DEMO / "corpus.jsonl"), "--store", str(store), "--policy", "security-advisory", "--quiet"]) == 0
    )
    err = capsys.readouterr().err
    assert f"car-rag: INFO: car_rag.store: created store {store} (policy 'security-advisory'" in err
    assert f"car-rag: INFO: car_rag.store: {store}: ingested {DEMO / 'corpus.jsonl'}: 45 added" in err
    assert main(["query", "-vv", "--store", str(store), "lodash prototype pollution", "--anchors", "bm25"]) == 0
    err = capsys.readouterr().err
    assert f"car_rag.store: opened store {store}: 45 records" in err
    assert re.search(
        r"car-rag: DEBUG: car_rag.retriever: query 'lodash prototype pollution': \d+ anchors \(bm25\), \d+ records", err
    )
    assert main(["query", "--store", str(store), "lodash prototype pollution", "--anchors", "bm25"]) == 0
    assert capsys.readouterr().err == ""
