"""What a worker with Stage 2 in SQL keeps of scope linking: the forms of the store's scope values
(:class:`ScopeVocabulary`), and no graph kept alive by its value index (a graph per query)."""

from __future__ import annotations

import gc

from car_rag import Policy, Record
from car_rag.graph import AuthorityGraph
from car_rag.scope_linking import _INDEXES, ScopeVocabulary, candidate_links, question_forms, value_index

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
