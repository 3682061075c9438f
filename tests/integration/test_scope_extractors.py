"""Scope for records that carry none, through a real store (Chroma + MiniLM) and the real CLI.

The issue's case: a disclosure and the release that fixes it, with ``doc_type`` but no
``scope``, both came back active with no warning. Now ingest names the rules that cannot fire
for them, ``--strict`` refuses them without touching the store, and the policy's
``[record_scope]`` extractors give them the scope their rules need.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, StoreError, load_policy
from car_rag.cli import main
from fake_openai import FakeOpenAIServer

SECURITY = "security-advisory"
FIELDS = """
[record_scope.metadata_fields]
component = "package"
"""
PATTERNS = """
[record_scope.patterns]
cve_id = '(?i)\\b(CVE-\\d{4}-\\d{4,})\\b'
"""
EXTRACTORS = FIELDS + PATTERNS
"""The built-in security-advisory policy plus these tables: its rules, and scope from a
framework's ``component`` metadata and from CVE ids in the text."""


def with_extractors(tmp_path, tables: str = EXTRACTORS):
    path = tmp_path / "policy.toml"
    builtin = (resources.files("car_rag") / "policies" / f"{SECURITY}.toml").read_text(encoding="utf-8")
    path.write_text(builtin + tables, encoding="utf-8")
    return path


DISCLOSURE = {
    "doc_id": "zlibber-disclosure",
    "doc_type": "vulnerability_disclosure",
    "published_at": "2099-01-02",
    "text": "cve-2099-31337: heap overflow in zlibber inflate; crafted streams write past the window buffer.",
    "metadata": {"component": "zlibber"},
}
RELEASE = {
    "doc_id": "zlibber-1.3.2-release",
    "doc_type": "patch_release",
    "published_at": "2099-01-20",
    "version": "1.3.2",
    "text": "zlibber 1.3.2: window bounds are now checked before every copy. Resolves CVE-2099-31337.",
    "metadata": {"component": "zlibber"},
}
QUESTION = "Is the zlibber inflate heap overflow still exploitable?"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def statuses(store):
    result = ControllingAuthorityRetriever(store, anchors="bm25", k1=5).retrieve(QUESTION)
    return {r.doc_id: r.status for r in result.top(5)}


def test_records_without_scope_are_reported_and_extractors_let_the_fix_void_the_disclosure(tmp_path, embedder):
    with CARStore.open(tmp_path / "plain", SECURITY, embedder=embedder) as store:
        report = store.ingest([DISCLOSURE, RELEASE], progress=False)
        assert report.errors == [] and report.new_edges == []
        assert [str(m) for m in report.missing_scope] == [
            "rule patch_fixes_disclosure cannot fire for 2 records: no package, no cve_id",
            "rule later_patch cannot fire for 1 record: no package, no cve_id",
        ]
        assert "rule patch_fixes_disclosure cannot fire for 2 records" in report.summary()
        assert statuses(store) == {"zlibber-disclosure": "active", "zlibber-1.3.2-release": "active"}

    policy = with_extractors(tmp_path)
    with CARStore.open(tmp_path / "extracted", policy, embedder=embedder) as store:
        report = store.ingest([DISCLOSURE, RELEASE], progress=False)
        assert report.missing_scope == [] and report.scope_filled == {"metadata_fields": 2, "patterns": 2}
        assert "scope filled by metadata_fields 2, patterns 2" in report.summary()
        assert report.newly_superseded == ["zlibber-disclosure"]
        assert store.get("zlibber-disclosure").scope == {"package": "zlibber", "cve_id": "CVE-2099-31337"}
        assert statuses(store) == {"zlibber-1.3.2-release": "active", "zlibber-disclosure": "superseded"}
        # Re-ingesting the same input fills the same scope: nothing changes.
        again = store.ingest([DISCLOSURE, RELEASE], progress=False)
        assert (again.unchanged, again.added, again.updated) == (2, [], [])


def test_a_records_own_scope_wins_over_the_extractors_in_the_store(tmp_path, embedder):
    policy = with_extractors(tmp_path)
    own: dict[str, Any] = {**RELEASE, "scope": {"cve_id": "CVE-2099-40000"}}  # says which CVE it fixes; its text names another
    with CARStore.open(tmp_path / "store", policy, embedder=embedder) as store:
        report = store.ingest([DISCLOSURE, own], progress=False)
        assert store.get(own["doc_id"]).scope == {"cve_id": "CVE-2099-40000", "package": "zlibber"}
        assert report.new_edges == []  # other CVE: the release does not void this disclosure


def test_strict_cli_refuses_the_input_and_keeps_the_store(tmp_path, embedder, capsys):
    store_dir = tmp_path / "store"
    held = {**DISCLOSURE, "doc_id": "held", "scope": {"package": "zlibber", "cve_id": "CVE-2099-1"}}
    with CARStore.open(store_dir, SECURITY, embedder=embedder) as store:
        store.ingest([held], progress=False)
    corpus = write_jsonl(tmp_path / "gaps.jsonl", [DISCLOSURE, {**RELEASE, "scope": {"package": "zlibber"}}])

    assert main(["ingest", str(corpus), "--store", str(store_dir), "--quiet", "--strict"]) == 1
    out, err = capsys.readouterr()
    assert "error: rule patch_fixes_disclosure cannot fire for 2 records: no package (1), no cve_id" in err
    assert "nothing stored (strict): rule patch_fixes_disclosure cannot fire" in out and "holds 1 records" in out
    with CARStore.open(store_dir, embedder=embedder) as store:
        assert list(store.records) == ["held"] and store.get("held").scope == held["scope"]

    assert main(["ingest", str(corpus), "--store", str(store_dir), "--quiet"]) == 0  # without --strict: a warning
    out, err = capsys.readouterr()
    assert "warning: rule patch_fixes_disclosure cannot fire for 2 records" in err
    assert "2 added" in out and "rule patch_fixes_disclosure cannot fire for 2 records" in out and "holds 3 records" in out


def test_strict_refuses_a_mapped_metadata_field_no_record_has(tmp_path, embedder):
    policy = with_extractors(tmp_path)
    scoped = [{**r, "metadata": {"module": "zlibber"}, "scope": {"package": "zlibber"}} for r in (DISCLOSURE, RELEASE)]
    with CARStore.open(tmp_path / "store", policy, embedder=embedder) as store:
        report = store.ingest(scoped, progress=False, strict=True)
        assert report.strict_refused and len(store) == 0 and report.missing_scope == []
        assert report.warnings == [
            "record_scope.metadata_fields.component: no record in <records> has metadata field 'component' "
            "(it fills scope key 'package')"
        ]
        report = store.ingest(scoped, progress=False)  # not strict: stored, with the warning
        assert not report.strict_refused and len(report.added) == 2 and report.warnings


def test_reopening_with_other_extractors_is_allowed_and_other_rules_are_not(tmp_path, embedder):
    """Extractors decide the scope of what is ingested next, never an edge between stored
    records (their scope is stored): a store opens under changed extractors and uses them,
    and keeps its policy as built; changed rules are still refused."""
    path = tmp_path / "store"
    with CARStore.open(path, SECURITY, embedder=embedder) as store:
        store.ingest([DISCLOSURE], progress=False)
    policy = with_extractors(tmp_path)
    with CARStore.open(path, policy, embedder=embedder) as store:
        assert store.get("zlibber-disclosure").scope == {}  # stored scope is not rewritten on open
        report = store.ingest([DISCLOSURE, RELEASE], progress=False)  # re-ingest: extracted, so replaced
        assert report.updated == ["zlibber-disclosure"] and report.newly_superseded == ["zlibber-disclosure"]
    assert json.loads((path / "car-store.json").read_text())["policy"]["record_scope"]["patterns"] == {}
    fewer_rules = load_policy(policy)
    fewer_rules = fewer_rules.model_copy(update={"rules": fewer_rules.rules[:1]})
    with pytest.raises(StoreError, match=r"\(its rules differ\)"):
        CARStore.open(path, fewer_rules, embedder=embedder)


def test_an_llm_failure_rejects_that_record_stores_the_others_and_loses_nothing(tmp_path, embedder):
    def answer(messages):  # off the schema for the one record that mentions "broken"
        return "not json" if "broken" in messages[-1]["content"] else '{"package": "zlibber"}'

    with FakeOpenAIServer(answer=answer) as server:
        policy = with_extractors(
            tmp_path,
            PATTERNS + f'[record_scope.llm]\nbase_url = "{server.base_url}"\nmodel = "fake-scope-model"\nmax_retries = 0\n',
        )
        path = tmp_path / "store"
        held = {**DISCLOSURE, "doc_id": "held", "scope": {"package": "zlibber", "cve_id": "CVE-2099-1"}}
        with CARStore.open(path, policy, embedder=embedder) as store:
            store.ingest([held], progress=False)
            assert server.requests == []  # a record with its whole scope asks nothing
            broken = {**RELEASE, "doc_id": "broken-note", "text": "broken release note for CVE-2099-5"}
            corpus = write_jsonl(tmp_path / "feed.jsonl", [DISCLOSURE, broken, RELEASE])
            report = store.ingest(corpus, progress=False)
            (error,) = report.errors
            assert str(error).startswith(
                f"{corpus}:2: record 'broken-note' field 'scope': LLM scope extractor (fake-scope-model)"
            )
            assert sorted(report.added) == ["zlibber-1.3.2-release", "zlibber-disclosure"]
            assert report.newly_superseded == ["zlibber-disclosure"] and report.scope_filled == {"patterns": 2, "llm": 2}
            assert sorted(store.records) == ["held", "zlibber-1.3.2-release", "zlibber-disclosure"]
            assert store.get("held").scope == held["scope"]
        asked = len(server.requests)
        with CARStore.open(path, embedder=embedder) as store:  # answers are cached in the store: nothing re-asked
            again = store.ingest([DISCLOSURE, RELEASE], progress=False)
            assert again.unchanged == 2 and len(server.requests) == asked
        assert len(list((path / "scope-cache").glob("*.json"))) == 2
