"""What a worker with Stage 2 in SQL keeps of scope linking: the forms of the store's scope values
(:class:`ScopeVocabulary`, or mapped from files: :class:`MappedVocabulary`), and no graph kept
alive by its value index (a graph per query)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from car_rag import Policy, Record, scope_linking
from car_rag.graph import AuthorityGraph
from car_rag.scope_linking import _INDEXES, MappedVocabulary, ScopeVocabulary, candidate_links, question_forms, value_index

VALUES = [("package", "express"), ("package", "Node.js"), ("case", "harlan_v_mercer_611f3d204"), ("ticker", "GE")]


def graph_of(policy: Policy) -> AuthorityGraph:
    graph = AuthorityGraph(policy)
    for n, (key, value) in enumerate(VALUES):
        graph.add(Record(doc_id=f"r{n}", text="t", doc_type="advisory", scope={key: value}))
    return graph


def test_the_vocabulary_names_every_value_candidate_links_can_link(demo_policy: Policy) -> None:
    vocabulary = ScopeVocabulary()
    vocabulary.add(VALUES)
    graph = graph_of(demo_policy)
    questions = [
        "Is express still affected?",
        "Does node.js ship the fix?",
        "Was Harlan v. Mercer overruled?",
        "What did GE report?",
        "How do I expresses things?",
        "Nothing here names a value",
    ]
    for question in questions:
        linked = {(link.key, link.value) for link in candidate_links(question, graph)}
        assert linked <= vocabulary.named_by(question), question
    assert vocabulary.named_by("Harlan v. Mercer") == {("case", "harlan_v_mercer_611f3d204")}
    assert vocabulary.named_by("Nothing here names a value") == set()
    assert "node js" in question_forms("Does node.js ship?") and "nodejs" in question_forms("Does node.js ship?")


def test_a_graph_is_not_kept_alive_by_its_value_index(demo_policy: Policy) -> None:
    gc.collect()
    before = len(_INDEXES)
    for _ in range(20):
        graph = graph_of(demo_policy)
        assert value_index(graph).lookup("express") == {("package", "express", False)}
    del graph
    gc.collect()
    assert len(_INDEXES) == before


MORE = [
    *VALUES,
    ("drug", "Métformine"),
    ("city", "東京"),
    ("case", "roberts_v_moore_312us760"),
    ("package", "express"),  # the same value under another key
    ("employee", "EMP030-Harris"),
]
QUESTIONS = [
    "Is express still affected?",
    "Does node.js ship the fix?",
    "Was Harlan v. Mercer overruled?",
    "Roberts v. Moore, 312 U.S. 760",
    "What did GE report?",
    "métformine dosage in 東京",
    "EMP030-Harris's record",
    "Nothing here names a value",
]


def test_the_mapped_vocabulary_names_what_the_heap_one_names(tmp_path: Path) -> None:
    heap = ScopeVocabulary()
    heap.add(MORE)
    mapped = MappedVocabulary.write(tmp_path, iter(dict.fromkeys(MORE)), {"change": 3})
    assert len(mapped) == len(dict.fromkeys(MORE))
    for question in QUESTIONS:
        assert mapped.named_by(question) == heap.named_by(question), question
    assert mapped.named_by("Harlan v. Mercer") == {("case", "harlan_v_mercer_611f3d204")}  # a partial form
    assert mapped.named_by("harlan v mercer 611f3d204") == {("case", "harlan_v_mercer_611f3d204")}  # its full ones
    assert mapped.named_by("東京") == {("city", "東京")} and mapped.named_by("Node.js") == {("package", "Node.js")}
    assert (tmp_path / "index.json").read_text() == '{"kind": "scope-vocabulary", "change": 3}'


def test_a_hit_on_a_shared_hash_names_only_values_with_that_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scope_linking, "hash64", lambda form: 7)  # every form of every value collides
    mapped = MappedVocabulary.write(tmp_path, VALUES)
    assert mapped.named_by("Is express affected?") == {("package", "express")}
    assert mapped.named_by("Nothing here names a value") == set()


def test_pairs_added_after_the_files_are_named_too(tmp_path: Path) -> None:
    mapped = MappedVocabulary.write(tmp_path, VALUES)
    mapped.add([("package", "lodash"), ("package", "express")])
    assert mapped.named_by("lodash and express") == {("package", "lodash"), ("package", "express")}
    assert len(mapped) == len(VALUES)
