"""Bad input against a store that holds data: the fuzzer of ``evals/fuzz_inputs.py`` on a
small run, and the store-level cases it found (each failed before its fix).

The command line runs 10,000 cases (``evals/results/fuzz_inputs.txt``); here 60, two of
them through ``car-rag ingest`` as a subprocess.
"""

from __future__ import annotations

import json

import pytest

import fuzz_inputs as fi  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag import CARStore
from car_rag.cli import main

GOOD = {"doc_id": "good", "text": "a record that is fine", "doc_type": "note"}


def test_fuzzer_small_run_passes(embedder, tmp_path) -> None:
    report = fi.run_fuzz(60, seed=7, cli_cases=2, embedder=embedder, workdir=tmp_path)
    assert report.violations == [], fi.format_report(report)
    s = report.stats
    assert s["cases"] == 60 and s["integrity_checks"] == 60 and s["cli_cases"] == 2
    assert s["kind_records"] and s["kind_policy"] and s["record_errors"] and s["policy_errors"]
    assert s["cli_check_queries"] == len(fi.CHECK_QUERIES) * len(fi.CHECK_CALLERS)
    assert s["reopened_records"] >= len(fi.CHECK_RECORDS)
    assert "result: PASS" in fi.format_report(report)


def test_fuzzer_cases_are_seeded() -> None:
    import random

    def draw(seed: int) -> list[tuple[str, str, bytes]]:
        rng = random.Random(seed)
        cases = [fi.build_case(rng, n) for n in range(1, 80)]
        return [(c.category, c.what, c.policy or c.corpus_bytes()) for c in cases if c.items is None]

    assert draw(3) == draw(3) and draw(3) != draw(4)


@pytest.fixture
def store(tmp_path, embedder):
    with CARStore.open(tmp_path / "store", "security-advisory", embedder=embedder) as store:
        store.ingest([GOOD], progress=False)
        yield store


@pytest.mark.parametrize("key", ["#x", "$where", "chroma:document"])
def test_scope_keys_chroma_refuses_are_rejected_and_the_rest_is_stored(store, key) -> None:
    """Chroma refused the metadata and the whole batch failed with an exception."""
    report = store.ingest([{**GOOD, "doc_id": "neighbour"}, {**GOOD, "doc_id": "bad", "scope": {key: "a"}}], progress=False)
    assert report.added == ["neighbour"]
    [err] = report.errors
    assert (err.line, err.doc_id, err.field) == (2, "bad", f"scope.{key}") and "reserved for Chroma" in err.message


def test_errors_of_records_given_as_items_name_one_source(store) -> None:
    report = store.ingest([{**GOOD, "doc_id": "x", "tenant": "*"}, {**GOOD, "doc_id": "#", "scope": {"#k": "v"}}], progress=False)
    assert [str(e).split(":")[0] for e in report.errors] == ["<records>", "<records>"]


def test_a_record_the_store_could_not_read_back_is_rejected_and_the_store_reopens(store, embedder) -> None:
    """Metadata nested 250 deep was stored, and the store then failed to open."""
    nested: object = "leaf"
    for _ in range(250):
        nested = [nested]
    report = store.ingest([{**GOOD, "doc_id": "deep", "metadata": {"m": nested}}], progress=False)
    assert [(e.doc_id, e.field) for e in report.errors] == [("deep", "metadata")]
    store.close()
    with CARStore.open(store.path, embedder=embedder) as again:
        assert list(again.records) == ["good"]


def test_integer_too_long_for_python_is_a_bad_line(store, tmp_path) -> None:
    """json.loads raised ValueError (not JSONDecodeError): the whole file failed."""
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({**GOOD, "doc_id": "ok"}) + "\n" + '{"doc_id": "big", "metadata": {"n": ' + "9" * 5000 + "}}\n")
    report = store.ingest(path, progress=False)
    assert report.added == ["ok"]
    [err] = report.errors
    assert err.line == 2 and err.message.startswith("invalid JSON: Exceeds the limit")


def test_cli_store_path_that_is_a_file_is_an_error_not_a_traceback(tmp_path, capsys) -> None:
    corpus, not_a_dir = tmp_path / "c.jsonl", tmp_path / "file"
    corpus.write_text(json.dumps(GOOD) + "\n")
    not_a_dir.write_text("")
    assert main(["ingest", str(corpus), "--store", str(not_a_dir), "--policy", "security-advisory", "--quiet"]) == 1
    assert capsys.readouterr().err.startswith("car-rag ingest: error: ")
