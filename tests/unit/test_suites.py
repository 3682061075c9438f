"""The suites beyond the paper's eight: the mirrors and the real corpora load, a missing mirror
names the command that writes it, and a mirror's store copied from its base answers as one
built from scratch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from car_rag.retriever import ControllingAuthorityRetriever
from car_rag_evals.suites import (
    DEV_SUITES,
    MIRRORS,
    SUITES,
    Suite,
    default_real_dir,
    load_suite,
    open_suite_store,
    store_path,
)

PAPER = (
    "ghsa-freeform",
    "ghsa-structured",
    "finsuperqa",
    "finsuperqa-contaminated",
    "cvepatchqa",
    "cvepatchqa-freeform",
    "legalprecedentqa",
    "legalprecedentqa-freeform",
)


def test_the_paper_suites_stay_as_they_are_and_the_dev_extras_are_apart():
    assert SUITES == PAPER
    assert set(DEV_SUITES) == set(MIRRORS) | {"real-keps", "real-eips"} and not set(DEV_SUITES) & set(SUITES)


def test_every_dev_suite_loads(corpora, tmp_path):
    for mirror in MIRRORS.values():
        (tmp_path / f"{mirror.corpus}.corpus.jsonl").write_text("")
    for name in DEV_SUITES:
        suite = load_suite(name, corpora, mirrors_dir=tmp_path)
        assert suite.corpus.is_file() and suite.queries.is_file()
        if name in MIRRORS:
            base = load_suite(f"{MIRRORS[name].base}-freeform", corpora)
            assert suite.corpus.parent == tmp_path and suite.extends == MIRRORS[name].base
            assert (suite.queries, suite.answer_rule, suite.policy_ref) == (base.queries, base.answer_rule, base.policy_ref)
        else:
            assert suite.corpus.parent == default_real_dir() and suite.answer_rule is None  # gold inclusion
            assert suite.policy.name == "design-proposals"
            assert store_path(suite, tmp_path).name == f"{name.removeprefix('real-')}--design-proposals"


def test_a_missing_mirror_names_the_command_that_writes_it(corpora, tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=rf"python evals/mirror_suites.py --out {missing}"):
        load_suite("cvepatchqa-freeform-mirror-all", corpora, mirrors_dir=missing)


def _records(corpora: Path) -> list[dict]:
    """The first 40 CVEPatchQA records (a base corpus small enough to embed in a unit test)."""
    with (corpora / "cvepatchqa.corpus.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(next(handle)) for _ in range(40)]


def test_a_mirror_store_copied_from_its_base_answers_as_one_built_from_scratch(corpora, tmp_path):
    base = _records(corpora)
    disclosures = [r for r in base if r["doc_type"] == "cve_disclosed" and "supersedes" not in r][:3]
    added = [
        {
            "doc_id": f"mirror-{i}",
            "doc_type": "patch_released",
            "scope": d["scope"],
            "published_at": "2025-01-01T00:00:00",
            "text": f"Release notice: version {i}.0 resolves recently disclosed security concerns.",
            "supersedes": [d["doc_id"]],
        }
        for i, d in enumerate(disclosures)
    ]
    files = {}
    for stem, records in (("tiny", base), ("tiny-mirror-all", base + added)):
        files[stem] = tmp_path / f"{stem}.corpus.jsonl"
        files[stem].write_text("".join(json.dumps(r) + "\n" for r in records))
    queries = corpora / "cvepatchqa.queries.jsonl"
    stores, scratch = tmp_path / "stores", tmp_path / "scratch"
    open_suite_store(Suite("tiny", files["tiny"], queries, "security-advisory"), stores, progress=False).close()
    mirror = Suite("tiny-mirror", files["tiny-mirror-all"], queries, "security-advisory", extends="tiny")
    copied = open_suite_store(mirror, stores, progress=False)
    alone = Suite("tiny-mirror", files["tiny-mirror-all"], queries, "security-advisory")
    built = open_suite_store(alone, scratch, progress=False)
    try:
        config = json.loads((stores / "tiny--security-advisory" / "car-store.json").read_text())
        assert copied.config["collection"] == config["collection"]  # a copy, extended
        assert copied.lexical.doc_ids == built.lexical.doc_ids == [r["doc_id"] for r in base + added]
        for d in disclosures:
            assert copied.graph.is_superseded(d["doc_id"]) and built.graph.is_superseded(d["doc_id"])
        one, other = ControllingAuthorityRetriever(copied), ControllingAuthorityRetriever(built)
        for record in disclosures + base[:3]:
            question = f"Has the flaw in {record['scope']['package']} been fixed? {record['text'][:80]}"
            a, b = one.retrieve(question), other.retrieve(question)
            assert a.doc_ids() == b.doc_ids() and [r.status for r in a] == [r.status for r in b]
    finally:
        copied.close()
        built.close()
