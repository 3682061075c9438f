"""`car-rag bench --ablation` on the report fixture's small corpus: every variant that can run
does, with the seed's metrics; the status filter leaves no outdated record in the top k;
the variants that cannot run say why. Query rewrite and HyDE go through the real ``openai``
client to FakeOpenAIServer (a real HTTP server on loopback) and the eval-llm answer cache."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from car_rag.cli import main
from car_rag_evals.ablation import NO_ENDPOINT
from fake_openai import FakeOpenAIServer

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "report_run"
MINI = [
    "--corpus",
    str(RUN / "ghsa-mini.corpus.jsonl"),
    "--queries",
    str(RUN / "ghsa-mini.queries.jsonl"),
    "--policy",
    "security-advisory",
    "--ablation",
]
LLM_VARIANTS = ("V5", "V6", "V9a")
needs_openai = pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="the openai client is not installed")


def _ablation(tmp_path: Path, *options: str) -> dict:
    assert main(["bench", *MINI, "--stores", str(tmp_path / "stores"), "--out", str(tmp_path), *options]) == 0
    return json.loads((tmp_path / "ghsa-mini-ablation.json").read_text())


def _question(messages: list[dict]) -> str:
    """The question the expansion prompt carries: the fake 'rewrites' a question into itself."""
    return messages[-1]["content"].split("Question: ", 1)[1].split("\n", 1)[0]


def _scores(row: dict) -> dict:
    return {m: row[m] for m in ("recall", "chain_recall", "tca", "orr", "crr", "lvr")}


def test_ablation_matrix_runs_and_states_what_it_skipped(tmp_path, capsys):
    result = _ablation(tmp_path)
    variants = result["variants"]
    assert list(variants) == ["V0", "V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9", "V9a", "C1", "C2", "C3"]
    # the seed's contrast: the status filter drops every outdated record and, with them, the chain's provenance;
    # car-rag keeps the superseded records it shows beside their superseders (TCA) and more of the chain
    assert variants["V4"]["orr"] == 0.0 < variants["V2"]["orr"]
    assert variants["V4"]["chain_recall"] < variants["C3"]["chain_recall"] and variants["C3"]["tca"]["value"] == 1.0
    assert variants["V1"]["k"] == 10 and variants["V2"] == {**variants["C1"], "what": variants["V2"]["what"]}
    assert result["date_filter"] == "cutoff 2026-02-01 (median record date)"
    assert variants["V3"]["recall"]["n"] == 4
    for vid in LLM_VARIANTS:
        assert variants[vid]["skipped"] == NO_ENDPOINT == "needs a language model endpoint (--base-url)"
    for vid in ("V7", "V8", "V9"):
        assert variants[vid]["skipped"].startswith("needs a cross-encoder reranker")
    assert "llm" not in result
    table = (tmp_path / "ghsa-mini-ablation.md").read_text()
    assert "| V6 | dense + HyDE | – | skipped: needs a language model endpoint (--base-url) |" in table
    assert "The seed's central contrast" in capsys.readouterr().out


@needs_openai
def test_rewrite_and_hyde_ask_the_model_once_per_query_and_a_rerun_asks_nothing(tmp_path):
    with FakeOpenAIServer(answer=_question) as fake:
        llm = ["--base-url", fake.base_url, "--model", "fake-model"]
        first = _ablation(tmp_path, *llm)
        # one request per query for the rewrite, one for HyDE (V6 and V9a embed the same passages)
        assert len(fake.requests) == 2 * first["queries"] == 8
        assert {r["model"] for r in fake.requests} == {"fake-model"} and {r["temperature"] for r in fake.requests} == {0}
        prompts = [r["messages"][0]["content"] for r in fake.requests]
        assert sum(p.startswith("Rewrite the question below as a search query") for p in prompts) == 4
        assert sum(p.startswith("Please write a passage to answer the question") for p in prompts) == 4
        assert any("Question: Does sprocket still follow symbolic links" in p for p in prompts)
        second = _ablation(tmp_path, *llm)
        assert len(fake.requests) == 8  # everything from OUT/ghsa-mini-ablation.cache.jsonl
    variants = first["variants"]
    for vid in LLM_VARIANTS:
        assert "skipped" not in variants[vid] and variants[vid]["failed"] == 0 and variants[vid]["recall"]["n"] == 4
        assert _scores(second["variants"][vid]) == _scores(variants[vid])
    # a rewrite that is the question itself, and HyDE's mean of the question with a passage that
    # is the question, search with the question's own vector: exactly dense retrieval
    assert _scores(variants["V5"]) == _scores(variants["V6"]) == _scores(variants["V0"])
    assert first["llm"]["rewrite"] == first["llm"]["hyde"] == {"calls": 4, "cached": 0, "failed": 0, "failures": {}}
    assert second["llm"]["rewrite"] == second["llm"]["hyde"] == {"calls": 0, "cached": 4, "failed": 0, "failures": {}}
    table = (tmp_path / "ghsa-mini-ablation.md").read_text()
    assert (
        "Query rewrite and HyDE by `fake-model`" in table and "rewrite: 0 calls to the server, 4 answers from the cache" in table
    )


@needs_openai
def test_failed_and_empty_model_answers_are_counted_per_query_not_fatal(tmp_path):
    def answer(messages):
        return "" if "sprocket" in messages[-1]["content"] else _question(messages)

    # calls go one at a time in prompt order: the first (gizmo-http's rewrite) gets HTTP 500, not retried
    llm = ["--model", "fake-model", "--retries", "0", "--concurrency", "1"]
    with FakeOpenAIServer(answer=answer, fail_first=1) as fake:
        result = _ablation(tmp_path, "--base-url", fake.base_url, *llm)
    rewrite, hyde = result["llm"]["rewrite"], result["llm"]["hyde"]
    assert rewrite["failed"] == 2 and rewrite["failures"]["mini-C"] == "the model returned no text"
    assert rewrite["failures"]["mini-D"].startswith("model call failed: InternalServerError")
    assert hyde["failed"] == 1 and list(hyde["failures"]) == ["mini-C"]
    variants = result["variants"]
    assert variants["V5"]["failed"] == 2 and variants["V5"]["recall"]["n"] == 2
    assert variants["V6"]["failed"] == variants["V9a"]["failed"] == 1 and variants["V6"]["recall"]["n"] == 3
    assert variants["V0"]["recall"]["n"] == 4
    assert "(2 of 4 queries without model text: not scored)" in (tmp_path / "ghsa-mini-ablation.md").read_text()

    # an endpoint that answers nothing: the model's variants say so, the rest of the matrix is computed
    with FakeOpenAIServer(fail_first=100) as down:
        result = _ablation(tmp_path / "down", "--base-url", down.base_url, *llm)
    for vid in LLM_VARIANTS:
        assert result["variants"][vid]["skipped"].startswith("the model gave no text for any query")
        assert result["variants"][vid]["failed"] == 4
    assert result["variants"]["C3"]["tca"]["value"] == 1.0


def test_model_options_need_the_ablation_and_a_model(tmp_path, capsys):
    out = ["--stores", str(tmp_path / "stores"), "--out", str(tmp_path)]
    assert main(["bench", *MINI[:-1], "--base-url", "http://127.0.0.1:9/v1", "--model", "m", *out]) == 2
    assert "--base-url is for --ablation" in capsys.readouterr().err
    assert main(["bench", *MINI, "--base-url", "http://127.0.0.1:9/v1", *out]) == 2
    assert "--base-url needs --model" in capsys.readouterr().err
