"""evals/mirror_suites.py: seeded, and every record it adds is a valid record that voids
exactly its own scope's disclosures (rulings), written in the suite's own frame. Run on the
first questions of each free-form suite over the real corpora."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mirror_suites as ms  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag.graph import AuthorityGraph
from car_rag.policy import load_policy
from car_rag.records import parse_records

QUESTIONS = 6
POLICIES = {"cvepatchqa": "security-advisory", "legalprecedentqa": "legal-precedent"}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module", params=sorted(ms.TEMPLATES))
def base(request, corpora):
    template = ms.TEMPLATES[request.param]
    records = _jsonl(corpora / f"{template.base}.corpus.jsonl")
    queries = _jsonl(corpora / f"{template.queries}.queries.jsonl")[:QUESTIONS]
    return template, records, queries


def test_the_mirror_is_the_same_for_a_seed_and_another_for_another(base):
    template, records, queries = base
    one, again, other = (ms.mirror(template, records, queries, seed) for seed in (3, 3, 4))
    assert one.added == again.added and one.half == again.half and one.per_question == again.per_question
    assert [r["doc_id"] for r in one.added] != [r["doc_id"] for r in other.added]
    assert one.half < {r["doc_id"] for r in one.added}  # half adds a strict subset of all's records


def test_added_records_are_valid_and_void_exactly_their_scope(base):
    template, records, queries = base
    made = ms.mirror(template, records, queries, seed=3)
    loaded = parse_records(records + made.added)
    assert loaded.errors == []
    policy = load_policy(POLICIES[template.base])
    before, after = AuthorityGraph(policy), AuthorityGraph(policy)
    for record in loaded.records[: len(records)]:
        before.add(record)
    for record in loaded.records:
        after.add(record)
    ids = {r["doc_id"] for r in records}
    newly = {d for d in ids if after.is_superseded(d) and not before.is_superseded(d)}
    expected = set()
    for added in made.added:
        targets = {r.doc_id for r in after.lookup(added["scope"]) if r.doc_type == template.target_type}
        assert added["doc_id"] not in ids and set(added["supersedes"]) == targets
        assert {e.target for e in after.superseded_by(added["doc_id"])} == targets  # voids its scope, nothing else
        assert not after.is_superseded(added["doc_id"])
        assert template.voiding.match(added["text"]) and added["doc_type"] == template.voiding_type
        assert all(after.records[added["doc_id"]].sort_time > after.records[t].sort_time for t in targets)
        if template.base == "cvepatchqa":  # like the suite's own patch notes: no product, no CVE
            assert added["scope"]["package"] not in added["text"] and "CVE" not in added["text"]
        expected |= targets
    assert newly == expected and expected
    own = {tuple(sorted(r["scope"].items())) for q in queries for r in records if r["doc_id"] == q["anchor_doc_ids"][0]}
    assert not own & {tuple(sorted(r["scope"].items())) for r in made.added}  # no question's own scope gets one
    counts = made.per_question.values()
    assert all(c["voided_in_base"] <= c["voided_half"] <= c["voided_all"] == c["other_scopes"] for c in counts)
    assert all(c["voided_half"] * 2 >= c["other_scopes"] for c in counts)


def test_a_rerun_writes_the_same_files(corpora, tmp_path):
    first = ms.write_mirrors(corpora, tmp_path / "a", seed=3, limit=2)
    second = ms.write_mirrors(corpora, tmp_path / "b", seed=3, limit=2)
    assert first == second and set(first["suites"]) == set(ms.MIRRORS)
    for entry in first["suites"].values():
        path = tmp_path / "a" / entry["corpus"]
        assert ms._sha256(path) == entry["sha256"] and len(_jsonl(path)) == entry["records"]


def test_a_text_out_of_the_suite_frame_stops_the_script(base):
    template, records, queries = base
    voiding = next(r for r in records if r["doc_type"] == template.voiding_type)
    changed = [dict(r, text="Something else entirely.") if r is voiding else r for r in records]
    with pytest.raises(ValueError, match=voiding["doc_id"]):
        ms.mirror(template, changed, queries, seed=3)
