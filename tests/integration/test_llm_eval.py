"""Reader-answer classification and the ``eval-llm`` command.

The model path is driven through the real ``openai`` client against FakeOpenAIServer, a
real HTTP server on 127.0.0.1 speaking the chat-completions API with scripted answers.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from car_rag.eval.answers import GoldAnswer, classify, extract_versions, normalise_version
from car_rag_evals.llm import AnswerCache, ChatClient, Job, answer_jobs, cache_key
from fake_openai import FakeOpenAIServer

# Only the tests that talk to a server need the openai client; the classifier tests do not.
needs_openai = pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="the openai client is not installed")

PATCHED = GoldAnswer("patched", "v1.15.0")


@pytest.mark.parametrize(
    "text, label",
    [
        ("(1) Yes, the vulnerability is patched. (2) The version that fixes it is 1.15.0.", "correct"),
        ("It was fixed in v1.15.0 and later.", "correct"),
        ("Yes, it has been patched; upgrade to 1.15 or later.", "correct"),
        ("Yes, the vulnerability is patched. The version that fixes it is 1.13.2.", "patched_wrong_version"),
        ("Yes, it is patched. The version that fixes it is not explicitly mentioned in the documents.", "patched_no_version"),
        ("The vulnerability has not been patched.", "confident_wrong"),
        ("No patch is available for this issue.", "confident_wrong"),
        ("The flaw remains unpatched.", "confident_wrong"),
        ("The documents do not indicate that it has been fixed. Therefore, the vulnerability is not patched.", "confident_wrong"),
        ("(1) No. (2) There is no version that fixes it.", "confident_wrong"),
        ("I cannot confirm whether it has been patched.", "uncertain"),
        ("There is no information about whether this was patched.", "uncertain"),
        ("The documents do not mention a patch for this issue.", "uncertain"),
        (
            "The documents do not indicate that the issue has been fixed. There is no mention of a patch or a version.",
            "uncertain",
        ),
        ("It is unclear if a patch exists.", "uncertain"),
        ("The vulnerability has not been explicitly stated as patched in the provided documents.", "uncertain"),
        ("It may have been fixed in a later release.", "uncertain"),
        ("", "uncertain"),
        # from the offline reader's answers (evals/labels/qwen_ghsa_tuning.labels.jsonl)
        ("Yes, the vulnerability is still unmitigated at 8.2.", "confident_wrong"),
        # claiming both ways is mixed, whichever comes first (issue 30; the lead decided before)
        ("[EP-9] No, the vulnerability is not patched. The vulnerability was fixed in [EP-1].", "mixed"),
        ("It was fixed in [EP-1]. No, the vulnerability is not patched.", "mixed"),
        ("[EP-1] No, the vulnerability is not patched. The vulnerability is fixed in 1.15.0.", "mixed"),
        # a claim about an earlier version than the fix is not about now
        ("It was fixed in 1.15.0. Version 1.14 is not patched.", "correct"),
        ("The latest version of the library does not contain this vulnerability.", "patched_no_version"),
        ("The vulnerability has been patched. The version that fixes it is django 8.1.", "patched_wrong_version"),
        ("The vulnerability is patched in version 4 of the patch release.", "patched_wrong_version"),
    ],
)
def test_security_classifier_negation_and_hedges(text, label):
    got = classify(text, "ghsa-freeform", PATCHED)
    assert got.label == label, got.reason
    assert got.reason


def test_security_gold_vulnerable_and_unknown_version():
    assert classify("The vulnerability is not patched.", "cvepatchqa", "vulnerable").label == "correct"
    assert classify("It has been patched in 2.0.", "cvepatchqa", "vulnerable").label == "confident_wrong"
    assert classify("It has been patched.", "cvepatchqa", GoldAnswer("patched")).label == "correct"


def test_versions():
    assert normalise_version("v1.15.0") == normalise_version("1.15") == normalise_version("pkg@1.15.0")
    assert normalise_version("2.24.0-beta.4") != normalise_version("2.24.0")
    assert extract_versions("CVSS 7.5; fixed in 3.33.4 on 2026-04-04 (CVE-2025-62718)") == ["3.33.4"]
    # npm-style "package@version" names a version (a Qwen answer: "ci4ms@v3.79.1")
    assert extract_versions("fixed in [payload@v3.79.1](https://example.test/compare/v3.79.0...v3.79.1)") == ["v3.79.1"]


@pytest.mark.parametrize(
    "text, gold, label",
    [
        ("The precedent has been overruled by the en banc court.", "overruled", "correct"),
        ("It has not been overruled and remains good law.", "overruled", "confident_wrong"),
        ("It is no longer good law.", "overruled", "correct"),
        ("The documents do not indicate whether it has been overruled.", "overruled", "uncertain"),
        ("Yes, it is still good law.", "good_law", "correct"),
    ],
)
def test_legal_classifier(text, gold, label):
    assert classify(text, "legalprecedentqa", gold).label == label


@pytest.mark.parametrize(
    "text, gold, label",
    [
        ("The trade is non-compliant: a blackout is in effect.", "non_compliant", "correct"),
        ("Yes, the pre-clearance is still valid.", "active", "correct"),
        ("The pre-clearance is still valid.", "non_compliant", "confident_wrong"),
        ("The trade is compliant under the emergency exception.", "compliant", "correct"),
        ("I cannot determine whether the trade is permitted.", "active", "uncertain"),
    ],
)
def test_compliance_classifier(text, gold, label):
    assert classify(text, "finsuperqa", gold).label == label


def _jobs(n: int) -> list[Job]:
    return [
        Job(f"q{i}", "dense", [{"role": "user", "content": f"question {i}"}], {"controlling_in_context": i % 2 == 0})
        for i in range(n)
    ]


@needs_openai
def test_retries_on_500(tmp_path):
    with FakeOpenAIServer(fail_first=2) as server:
        client = ChatClient(server.base_url, "fake", max_retries=3, timeout=10, cache=AnswerCache(tmp_path / "c.jsonl"))
        assert client.complete([{"role": "user", "content": "hi"}]) == "It has been patched in 1.15.0."
        assert len(server.requests) == 3
        assert server.requests[-1]["temperature"] == 0


@needs_openai
def test_cache_hit_on_rerun_sends_nothing(tmp_path):
    cache_path = tmp_path / "cache.jsonl"
    with FakeOpenAIServer(answer=lambda m: "echo " + m[-1]["content"]) as server:
        first = answer_jobs(
            _jobs(5), ChatClient(server.base_url, "fake", cache=AnswerCache(cache_path)), concurrency=2, progress=False
        )
        assert len(server.requests) == 5
        again = ChatClient(server.base_url, "fake", cache=AnswerCache(cache_path))  # a new process would reload the file
        second = answer_jobs(_jobs(5), again, concurrency=2, progress=False)
        assert len(server.requests) == 5 and again.calls == 0 and again.cache_hits == 5
    assert [r["answer"] for r in first] == [r["answer"] for r in second] == [f"echo question {i}" for i in range(5)]
    lines = [json.loads(line) for line in cache_path.read_text().splitlines()]
    assert {entry["key"] for entry in lines} == {cache_key("fake", j.messages) for j in _jobs(5)}


@needs_openai
def test_concurrency_limit_respected(tmp_path):
    with FakeOpenAIServer(delay=0.15) as server:
        client = ChatClient(server.base_url, "fake", cache=AnswerCache(tmp_path / "c.jsonl"))
        rows = answer_jobs(_jobs(9), client, concurrency=3, progress=False)
    assert len(rows) == 9 and len(server.requests) == 9
    assert 2 <= server.peak <= 3


@needs_openai
def test_calls_sharing_a_system_prompt_run_back_to_back_and_rows_keep_job_order(tmp_path):
    systems = ["plain rules", "xml rules"]
    jobs = [
        Job(
            f"q{i // 2}",
            ["dense", "car-audit"][i % 2],
            [{"role": "system", "content": systems[i % 2]}, {"role": "user", "content": f"question {i}"}],
        )
        for i in range(6)
    ]
    with FakeOpenAIServer(answer=lambda m: m[-1]["content"]) as server:
        rows = answer_jobs(
            jobs, ChatClient(server.base_url, "fake", cache=AnswerCache(tmp_path / "c.jsonl")), concurrency=1, progress=False
        )
    sent = [r["messages"][0]["content"] for r in server.requests]
    assert sent == ["plain rules"] * 3 + ["xml rules"] * 3  # a local server reuses the evaluated prefix
    assert [r["answer"] for r in rows] == [f"question {i}" for i in range(6)]


@needs_openai
def test_jobs_with_the_same_prompt_are_one_call_each_keeping_their_own_row(tmp_path):
    same = [{"role": "user", "content": "the same five records"}]
    jobs = [
        Job("q0", "dense", same, {"controlling_in_context": False}),
        Job("q0", "car-plain", same, {"controlling_in_context": True}),
        *_jobs(2),
    ]
    with FakeOpenAIServer(answer=lambda m: "echo " + m[-1]["content"], delay=0.1) as server:
        rows = answer_jobs(
            jobs, ChatClient(server.base_url, "fake", cache=AnswerCache(tmp_path / "c.jsonl")), concurrency=4, progress=False
        )
    assert len(server.requests) == 3
    assert [(r["condition"], r["answer"], r["controlling_in_context"]) for r in rows[:2]] == [
        ("dense", "echo the same five records", False),
        ("car-plain", "echo the same five records", True),
    ]
    assert [r["answer"] for r in rows[2:]] == ["echo question 0", "echo question 1"]


@needs_openai
def test_failed_call_is_reported_not_cached(tmp_path):
    errors = []
    with FakeOpenAIServer(fail_first=100) as server:
        client = ChatClient(server.base_url, "fake", max_retries=0, cache=AnswerCache(tmp_path / "c.jsonl"))
        rows = answer_jobs(_jobs(2), client, concurrency=1, progress=False, on_error=lambda j, e: errors.append(j.query_id))
    assert rows == [] and sorted(errors) == ["q0", "q1"]
    assert not (tmp_path / "c.jsonl").exists()


# --------------------------------------------------------------------------- --answers end to end


def test_eval_llm_answers_end_to_end(corpora, tmp_path, capsys):
    from car_rag.cli import main

    queries = [json.loads(line) for line in (corpora / "ghsa-freeform.queries.jsonl").read_text().splitlines()[:2]]
    rows = [
        {
            "query_id": queries[0]["query_id"],
            "condition": "dense",
            "answer": "The vulnerability is not patched.",
            "controlling_in_context": False,
        },
        {
            "query_id": queries[1]["query_id"],
            "condition": "dense",
            "answer": "I cannot confirm whether it has been patched.",
            "controlling_in_context": False,
        },
        {
            "query_id": queries[0]["query_id"],
            "condition": "car-xml",
            "answer": "Yes, it is patched; fixed in 1.15.0 [EP-1].",
            "controlling_in_context": True,
        },
        {
            "query_id": queries[1]["query_id"],
            "condition": "car-xml",
            "answer": "Yes, it has been fixed.",
            "controlling_in_context": True,
        },
    ]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert (
        main(["eval-llm", "--suite", "ghsa-freeform", "--answers", str(answers), "--out", str(out), "--corpora", str(corpora)])
        == 0
    )
    labelled = [json.loads(line) for line in (out / "answers.labelled.jsonl").read_text().splitlines()]
    assert [r["label"] for r in labelled] == ["confident_wrong", "uncertain", "correct", "patched_no_version"]
    assert all(r["reason"] for r in labelled)
    report = json.loads((out / "report.json").read_text())
    assert report["conditions"]["car-xml"]["rates"]["correct"]["successes"] == 1
    assert report["conditions"]["dense"]["by_retrieval"]["not_in_context"]["counts"]["confident_wrong"] == 1
    assert (out / "labels.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "car-xml" in (out / "report.md").read_text()


@needs_openai
def test_contexts_from_a_store_through_a_real_server_to_labels(tmp_path):
    """The model path end to end on the demo corpus: four conditions' contexts built from a
    real store, sent through the real openai client to a loopback server, then classified."""
    from pathlib import Path

    from car_rag_evals.llm import build_jobs
    from car_rag_evals.suites import custom_suite

    demo = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"
    security = [line for line in (demo / "queries.jsonl").read_text().splitlines() if '"sec-' in line]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(security) + "\n")
    suite = custom_suite(demo / "corpus.jsonl", queries, str(demo / "policy.toml"), name="demo-security")
    conditions = ("dense", "car-plain", "car-audit", "car-audit-omit")
    jobs = build_jobs(
        suite, conditions, k=5, stores_dir=tmp_path / "stores", anchors="bm25", k1=5, progress=False, kind="security"
    )
    assert len(jobs) == 4 * len(security)
    by = {(j.query_id, j.condition): j for j in jobs}
    xml = by[("demo-q01", "car-audit")].messages[-1]["content"]
    assert "<evidence" in xml and "sec-lodash-4.17.12-release" in xml and "<supersedes" in xml
    superseded_packet = re.compile(r'<evidence-packet [^>]*status="superseded"')
    assert superseded_packet.search(xml) and not superseded_packet.search(
        by[("demo-q01", "car-audit-omit")].messages[-1]["content"]
    )
    assert all(j.meta["controlling_in_context"] for j in jobs if j.condition.startswith("car"))
    assert "Is the vulnerability patched?" in by[("demo-q01", "dense")].messages[-1]["content"]

    # A scripted reader that says "patched" only when the context states a supersession.
    def reader(messages):
        return "Yes, it is patched [EP-1]." if "<supersedes" in messages[-1]["content"] else "No, it has not been patched."

    with FakeOpenAIServer(answer=reader) as server:
        client = ChatClient(server.base_url, "scripted", cache=AnswerCache(tmp_path / "cache.jsonl"))
        rows = answer_jobs(jobs, client, concurrency=2, progress=False)
        # One call per distinct prompt (dense and car-plain may retrieve the same records).
        assert len(server.requests) == len({cache_key("scripted", j.messages) for j in jobs}) and len(rows) == len(jobs)
    gold = GoldAnswer("patched", "4.17.12")
    labels = {(r["query_id"], r["condition"]): classify(r["answer"], "ghsa-freeform", gold).label for r in rows}
    assert labels[("demo-q01", "car-audit")] != "confident_wrong" and labels[("demo-q01", "car-plain")] == "confident_wrong"


@pytest.mark.parametrize("audit", ["car-audit", "car-xml"])  # a run recorded before the rename pairs as it did
def test_paired_confident_wrong_counts_and_exact_mcnemar(audit):
    from car_rag.eval.stats import mcnemar_exact
    from car_rag_evals.llm import paired

    rows = []
    for i in range(10):
        rows.append({"query_id": f"q{i}", "condition": "dense", "label": "confident_wrong" if i < 8 else "correct"})
        rows.append({"query_id": f"q{i}", "condition": audit, "label": "confident_wrong" if i in (0, 9) else "uncertain"})
    rows.append({"query_id": "q99", "condition": "dense", "label": "confident_wrong"})  # not answered under the audit form
    (pair,) = paired(rows)
    assert (pair["a"], pair["b"], pair["n"]) == ("dense", audit, 10)
    assert (pair["a_count"], pair["b_count"], pair["only_a"], pair["only_b"], pair["both"]) == (8, 2, 7, 1, 1)
    assert pair["ratio_b_to_a"] == 0.25
    assert pair["mcnemar_p"] == pytest.approx(0.0703125, abs=1e-6)  # 2 * P(X <= 1), X ~ Bin(8, 1/2) = 2 * 9/256
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(5, 5) == 1.0


def test_compare_runs_pairs_one_condition_across_two_runs_within_a_query_span(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "evals"))
    import compare_runs
    from car_rag.queries import load_queries
    from car_rag_evals.suites import load_suite

    ids = [q.query_id for q in load_queries(load_suite("ghsa-freeform").queries)][:6]
    a, b = tmp_path / "before" / "answers.labelled.jsonl", tmp_path / "after" / "answers.labelled.jsonl"
    for path, wrong in ((a, {0, 1, 2, 5}), (b, {2})):
        path.parent.mkdir()
        rows = [
            {
                "query_id": q,
                "condition": c,
                "answer": "",
                "label": "confident_wrong" if i in wrong and c == "car-xml" else "correct",
            }
            for i, q in enumerate(ids)
            for c in ("car-xml", "dense")
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.md"
    assert compare_runs.main(["--a", str(a), "--b", str(b), "--first", "2", "--last", "5", "--out", str(out)]) == 0
    row = next(line for line in out.read_text().splitlines() if line.startswith("| confident_wrong"))
    # Queries 2-5 only: under A, 2 and 3 are confident wrong (6 is outside the span); under B, 3.
    assert row.split(" | ")[1:5] == ["2", "1", "1", "0"]
    assert "answered in both runs: 4" in out.read_text()
    with pytest.raises(SystemExit):  # an empty or inverted span is refused, not reported as 0 queries
        compare_runs.main(["--a", str(a), "--b", str(b), "--first", "5", "--last", "2", "--out", str(out)])


def _demo_security_suite(tmp_path):
    from car_rag_evals.suites import custom_suite

    demo = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"
    security = [line for line in (demo / "queries.jsonl").read_text().splitlines() if '"sec-' in line]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(security) + "\n")
    return custom_suite(demo / "corpus.jsonl", queries, str(demo / "policy.toml"), name="demo-security"), len(security)


@needs_openai
def test_reader_conditions_and_repair_only_for_flagged_answers(tmp_path):
    """car-reader, fresh-plain and car-reader-repair on the demo corpus through a loopback
    server: the guard flags the reader's stale answers, and only those are asked again."""
    from car_rag_evals.llm import build_jobs, guard_rows, repair_rows

    suite, n = _demo_security_suite(tmp_path)
    conditions = ("fresh-plain", "car-reader", "car-reader-repair")
    jobs = build_jobs(
        suite, conditions, k=5, stores_dir=tmp_path / "stores", anchors="bm25", k1=5, progress=False, kind="security"
    )
    assert [j.condition for j in jobs] == ["fresh-plain", "car-reader"] * n  # repair has no job of its own
    by = {(j.query_id, j.condition): j for j in jobs}
    reader = by[("demo-q01", "car-reader")].messages[-1]["content"]
    assert "<digest>" in reader and "patched." in reader and 'status="current"' in reader
    fresh = by[("demo-q01", "fresh-plain")].messages
    assert "oldest to newest" in fresh[0]["content"] and "2024-03-19" in fresh[-1]["content"]
    assert all(isinstance(j.meta["context_tokens"], int) and j.result is not None for j in jobs)

    # A scripted reader (a fake, not a model) that answers stale until it is told what controls.
    def scripted(messages):
        if len(messages) > 2:
            return "Yes, it is patched [EP-1]."
        return "No, it is not patched."

    with FakeOpenAIServer(answer=scripted) as server:
        client = ChatClient(server.base_url, "scripted", cache=AnswerCache(tmp_path / "cache.jsonl"))
        rows = answer_jobs(jobs, client, concurrency=1, progress=False)
        first_calls = len(server.requests)
        repaired = repair_rows(rows, jobs, client, suite.policy, progress=False)
        repair_calls = len(server.requests) - first_calls
    flagged = [r for r in repaired if r["repair_findings"]]
    assert len(repaired) == n and repair_calls == len(flagged) > 0
    assert all(r["repaired"] and r["answer"].startswith("Yes") and r["original_answer"].startswith("No") for r in flagged)
    assert all(not r["repaired"] and r["answer"] == r["original_answer"] for r in repaired if not r["repair_findings"])
    guard_rows(rows + repaired, jobs, suite.policy)
    assert all("guard" in r for r in rows + repaired)
    assert all(not r["guard"]["flagged"] for r in repaired if r["repaired"])
    assert all(r["prompt_tokens"] > 0 for r in rows)


def test_the_guard_judges_each_answer_against_the_context_its_condition_showed(tmp_path):
    """The same answer, two contexts: under ``dense`` the first document is the replaced
    disclosure, under ``car-plain`` the release that replaced it; citations are read in each
    context's own numbering ([Document n] in the plain form), and closed-book, which showed
    nothing, is judged against the whole scopes of car-rag's top k."""
    from car_rag_evals.llm import build_jobs, guard_rows

    suite, _ = _demo_security_suite(tmp_path)
    conditions = ("dense", "car-plain", "car-audit", "closed-book")
    jobs = build_jobs(
        suite,
        conditions,
        k=5,
        stores_dir=tmp_path / "stores",
        anchors="bm25",
        k1=5,
        progress=False,
        kind="security",
        query_ids=["demo-q01"],
    )
    by = {j.condition: j for j in jobs}
    assert by["dense"].meta["context_doc_ids"][0] == "sec-lodash-cve-2099-10001-disclosure"
    assert by["car-plain"].meta["context_doc_ids"][0] == "sec-lodash-4.17.12-release"
    rows: list[dict[str, Any]] = [
        {"query_id": "demo-q01", "condition": c, "answer": answer}
        for c in conditions
        for answer in ("Yes, it is patched [Document 1].", "Yes, it is patched [Document 7].")
    ]
    guard_rows(rows, jobs, suite.policy)
    kinds = {(r["condition"], r["answer"][-13:-2]): [f["kind"] for f in r["guard"]["findings"]] for r in rows}
    assert kinds[("dense", "[Document 1")] == ["stale_citation"] and kinds[("car-plain", "[Document 1")] == []
    assert kinds[("dense", "[Document 7")] == kinds[("car-plain", "[Document 7")] == ["unknown_citation"]  # 5 shown
    assert kinds[("car-audit", "[Document 7")] == []  # the audit form numbers packets [EP-n]
    assert {r["condition"]: r["guard"]["basis"] for r in rows} == {
        "dense": "evidence",
        "car-plain": "evidence",
        "car-audit": "evidence",
        "closed-book": "scopes",
    }


def test_the_audit_conditions_former_names_still_work_and_warn(tmp_path):
    from car_rag_evals.llm import build_jobs, condition_name

    suite, _ = _demo_security_suite(tmp_path)
    options = {
        "k": 5,
        "stores_dir": tmp_path / "stores",
        "anchors": "bm25",
        "k1": 5,
        "progress": False,
        "kind": "security",
        "query_ids": ["demo-q01"],
    }
    with pytest.warns(DeprecationWarning) as caught:
        old = build_jobs(suite, ("car-xml", "car-xml-omit"), xml_form="full", **options)
    said = sorted(str(w.message).split(" is deprecated")[0] + " -> " + str(w.message).split("use ")[-1] for w in caught)
    assert said == [
        "build_jobs(xml_form=...) -> audit_layout=...",
        "eval-llm condition 'car-xml' -> 'car-audit'",
        "eval-llm condition 'car-xml-omit' -> 'car-audit-omit'",
    ]
    new = build_jobs(suite, ("car-audit", "car-audit-omit"), audit_layout="full", **options)
    assert [(j.condition, j.messages) for j in old] == [(j.condition, j.messages) for j in new]
    assert [j.condition for j in new] == ["car-audit", "car-audit-omit"]
    assert new[0].messages != build_jobs(suite, ("car-audit",), **options)[0].messages  # compact is the default layout
    assert condition_name("car-xml-omit") == "car-audit-omit" and condition_name("dense") == "dense"
    with pytest.raises(ValueError, match="audit_layout"):
        build_jobs(suite, ("car-audit",), audit_layout="xml", **options)
