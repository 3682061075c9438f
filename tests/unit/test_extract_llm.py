"""The LLM route of car_rag.extract against FakeOpenAIServer (a fake OpenAI-compatible server on
loopback, through the real openai client): asked only for what the patterns left empty, its
answers resolved and marked with their confidence, cached, and its failures named by document."""

from __future__ import annotations

import json

from car_rag.extract import PROVENANCE, AuthorityExtractor
from car_rag.policy import Policy, _parse
from fake_openai import FakeOpenAIServer

POLICY = """
name = "memos"
scope_keys = ["org"]
rules = []
[extract]
default_doc_type = "memo"
[[extract.identifiers]]
pattern = '\\bPOL-(\\d+)\\b'
doc_id = "pol-{1}"
[[extract.doc_types]]
doc_type = "policy"
title = '\\bpolicy\\b'
"""

DOCS = [
    {"doc_id": "pol-1", "title": "Travel Policy", "text": "Staff fly economy."},
    {"doc_id": "pol-2", "title": "Travel update", "text": "From May, staff may fly business class; POL-1 no longer applies."},
    {"doc_id": "pol-3", "title": "Expenses Policy", "text": "This policy replaces POL-9 and nothing else."},
    {"doc_id": "pol-4", "title": "Parking note", "text": "Parking is assigned by seniority."},
]


def _policy(server: FakeOpenAIServer, extra: str = "") -> Policy:
    llm = f'[extract.llm]\nbase_url = "{server.base_url}"\nmodel = "fake-extract-model"\nmax_retries = 0\n{extra}'
    return _parse(POLICY + llm, ".toml", "test.toml")


def _answer(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    if "business class" in text:
        return json.dumps({"doc_type": "policy", "supersedes": ["POL-1"], "superseded_by": []})
    if "Parking" in text:
        return json.dumps({"doc_type": None, "supersedes": ["the parking memo of 2001"], "superseded_by": []})
    return json.dumps({"doc_type": None, "supersedes": [], "superseded_by": []})


def test_the_llm_fills_only_what_the_patterns_left_empty_with_its_confidence(tmp_path) -> None:
    with FakeOpenAIServer(answer=_answer) as server:
        extractor = AuthorityExtractor(_policy(server), cache_dir=tmp_path)
        report = extractor.extract(DOCS)
        asked = [r["messages"][-1]["content"] for r in server.requests]
    # pol-3: typed by its title and an edge read (unresolved, so none): asked, for edges only.
    assert len(asked) == 4 and report.llm_calls == 4
    assert "Types: policy, memo" in asked[0]
    records = {r.doc_id: r for r in report.records}
    update = records["pol-2"]
    assert update.doc_type == "policy" and update.supersedes == ["pol-1"] and update.edge_confidence("pol-1") == 0.45
    assert update.metadata[PROVENANCE]["doc_type"] == {"value": "policy", "source": "llm", "confidence": 0.6}
    assert update.metadata[PROVENANCE]["supersedes"][0]["sources"] == ["llm"]
    assert records["pol-1"].doc_type == "policy" and records["pol-4"].doc_type == "memo"
    assert ("pol-4", "the parking memo of 2001") in {(s.doc_id, s.citation) for s in report.unresolved}


def test_answers_are_cached_so_a_rerun_asks_nothing(tmp_path) -> None:
    with FakeOpenAIServer(answer=_answer) as server:
        AuthorityExtractor(_policy(server), cache_dir=tmp_path).extract(DOCS)
        first = len(server.requests)
        again = AuthorityExtractor(_policy(server), cache_dir=tmp_path).extract(DOCS)
        assert len(server.requests) == first and again.llm_calls == 0
        assert again.records[1].supersedes == ["pol-1"]


def test_a_cached_file_that_is_not_an_answer_is_asked_again_not_an_error(tmp_path) -> None:
    """A file cut short or from an older layout (the scope extractor once kept only non-null
    values) must cost one call, not reject the document."""
    with FakeOpenAIServer(answer=_answer) as server:
        AuthorityExtractor(_policy(server), cache_dir=tmp_path).extract(DOCS)
        files = sorted(tmp_path.glob("extract-*.json"))
        for path in files:
            path.write_text('{"doc_type": "pol', encoding="utf-8")
        again = AuthorityExtractor(_policy(server), cache_dir=tmp_path).extract(DOCS)
    assert len(files) == 4 and again.llm_calls == 4 and not again.errors
    assert again.records[1].supersedes == ["pol-1"]
    assert all(json.loads(path.read_text(encoding="utf-8")) for path in files)


def test_invalid_json_rejects_that_document_and_the_others_go_on(tmp_path) -> None:
    def answer(messages: list[dict[str, str]]) -> str:
        return "not json at all" if "Parking" in messages[-1]["content"] else _answer(messages)

    with FakeOpenAIServer(answer=answer) as server:
        report = AuthorityExtractor(_policy(server), cache_dir=tmp_path).extract(DOCS)
    assert [r.doc_id for r in report.records] == ["pol-1", "pol-2", "pol-3"]
    (error,) = report.errors
    assert (error.doc_id, error.field, error.line) == ("pol-4", "extract.llm", 4)
    assert "fake-extract-model" in error.message and "not the JSON asked for" in error.message
    assert not list(tmp_path.glob("*.tmp"))  # no half answer cached


def test_a_timeout_is_named_by_document(tmp_path) -> None:
    with FakeOpenAIServer(answer=_answer, delay=2.0) as server:
        report = AuthorityExtractor(_policy(server, "timeout_s = 0.2\n"), cache_dir=tmp_path).extract(DOCS[:1])
    (error,) = report.errors
    assert error.doc_id == "pol-1" and "timed out after 0.2 s" in error.message and report.records == []
