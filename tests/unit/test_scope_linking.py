"""Scope linking: a question that names a plain-word package, drug or party gets an observed
scope; a word that is also ordinary English is not linked where the evidence says no.
No model, no Chroma: graphs, candidates and a real BM25 index over the records' texts."""

from __future__ import annotations

import pytest

from car_rag import CallerContext, Record, load_policy
from car_rag.adapters import AuthorityGraph
from car_rag.channels.fusion import FusedHit
from car_rag.channels.incremental_bm25 import IncrementalBM25Index
from car_rag.latent_scope import detect_ambiguity, read_question_scope
from car_rag.policy import Policy
from car_rag.scope_linking import accepted_links, candidate_links, words

SEC = load_policy("security-advisory")
DRUG = Policy(name="labels", scope_keys=("drug",), rules=())


def record(doc_id: str, text: str, **scope: str) -> Record:
    return Record(doc_id=doc_id, text=text, doc_type="vulnerability_disclosure", scope=scope, tenant=None)


def graph_of(policy: Policy, *records: Record) -> AuthorityGraph:
    graph = AuthorityGraph(policy)
    for r in records:
        graph.add(r)
    return graph


def bm25(graph: AuthorityGraph) -> IncrementalBM25Index:
    index = IncrementalBM25Index()
    index.build(list(graph.records), [r.text for r in graph.records.values()])
    return index


def hits(*scored: tuple[str, float]) -> list[FusedHit]:
    return [FusedHit(d, s, r) for r, (d, s) in enumerate(scored, 1)]


LABELS = graph_of(
    DRUG,
    record("met-1", "Metformin hydrochloride tablets: label.", drug="metformin"),
    record("met-2", "Metformin extended-release: recall notice.", drug="metformin"),
    record("gly-1", "Glyburide tablets: label.", drug="glyburide"),
    record("exp-1", "Express delivery pack of glyburide tablets.", drug="express"),
)


@pytest.mark.parametrize(
    ("question", "linked"),
    [
        ("Is metformin still approved?", [("drug", "metformin", "metformin")]),
        ("Is Metformin's label current?", [("drug", "metformin", "Metformin")]),  # case, possessive
        ("Are the metformins recalled?", [("drug", "metformin", "metformins")]),  # a plural ending, fuzzy
        ("Is glyburide or metformin recalled?", [("drug", "glyburide", "glyburide"), ("drug", "metformin", "metformin")]),
        ("Is the insulin label current?", []),  # a value no record holds
    ],
)
def test_plain_word_values_the_store_holds_are_candidates(question, linked):
    assert [(c.key, c.value, c.words) for c in candidate_links(question, LABELS)] == linked


def test_punctuation_and_run_together_forms_match_and_the_longest_match_wins():
    graph = graph_of(
        SEC,
        record("n1", "Node.js HTTP parser smuggling.", package="node.js", cve_id="CVE-2024-1"),
        record("n2", "node advisory", package="node", cve_id="CVE-2024-2"),
        record("c1", "Roberts v. Moore", package="roberts_v_moore_312us760", cve_id="CVE-2024-3"),
    )
    assert [c.value for c in candidate_links("Is the nodejs parser fixed?", graph)] == ["node.js"]
    assert [c.value for c in candidate_links("Is the Node.js parser fixed?", graph)] == ["node.js"]
    assert [c.value for c in candidate_links("Is Roberts v. Moore, 312 U.S. 760 (2010) good law?", graph)] == [
        "roberts_v_moore_312us760"
    ]


def test_short_values_link_only_verbatim():
    graph = graph_of(
        SEC,
        record("c", "C trade", package="C", cve_id="CVE-2024-1"),
        record("go", "go module", package="go", cve_id="CVE-2024-2"),
    )
    assert [c.value for c in candidate_links("Is the C trade cleared?", graph)] == ["C"]
    assert candidate_links("Is the c trade cleared?", graph) == []
    assert candidate_links("Go ahead and trade?", graph) == []
    # Written verbatim, "go" is a candidate; whether it links is the evidence's call (accepted_links).
    assert [c.value for c in candidate_links("Can I go ahead and trade?", graph)] == ["go"]


def test_stop_words_and_questions_of_only_stop_words_link_nothing():
    graph = graph_of(SEC, record("a", "an advisory", package="the", cve_id="CVE-2024-1"))
    assert candidate_links("Is it the one?", graph) == []
    assert candidate_links("the and of", graph) == []
    scope = read_question_scope("the and of", [], graph, SEC)
    assert scope.named == {} and scope.links == ()


def test_a_specific_word_with_stage1_support_is_linked_and_narrows_the_posterior_to_it():
    candidates = hits(("gly-1", 0.3), ("met-1", 0.25), ("met-2", 0.2), ("exp-1", 0.25))
    scope = read_question_scope(
        "Has metformin been recalled?", candidates, LABELS, DRUG, document_frequency=bm25(LABELS).document_frequency
    )
    assert [(link.value, link.specificity) for link in scope.links] == [("metformin", 1.0)]
    assert scope.posterior.probability(LABELS.records["met-1"]) == pytest.approx(1.0)
    assert scope.posterior.probability(LABELS.records["gly-1"]) == pytest.approx(0.0)
    assert scope.named == {"drug": ["metformin"]}  # the whole scope (one key): Stage 2 looks it up
    assert detect_ambiguity(candidates, scope.posterior, LABELS, DRUG, margin=0.5) is None


def test_a_common_word_is_not_linked_where_the_posterior_says_no():
    # "express" is a drug value here, but the question uses the verb, and Stage 1 found metformin.
    candidates = hits(("met-1", 0.5), ("met-2", 0.49), ("exp-1", 0.01))
    found = candidate_links("How do labels express the metformin dose?", LABELS)
    assert {c.value for c in found} == {"express", "metformin"}
    prior = read_question_scope(
        "How do labels express the metformin dose?", candidates, LABELS, DRUG, document_frequency=bm25(LABELS).document_frequency
    )
    assert [link.value for link in prior.links] == ["metformin"]
    # A value whose word most records use for something else is weak evidence: only Stage 1 can link it.
    common = graph_of(
        DRUG,
        *[record(f"r{i}", "Take with food; express concerns to your doctor.", drug=f"d{i}") for i in range(9)],
        record("x", "express", drug="express"),
    )
    [candidate] = candidate_links("Is express recalled?", common)
    weak = accepted_links([candidate], common, lambda _k, _v: 0.2, bm25(common).document_frequency)
    assert weak == []
    strong = accepted_links([candidate], common, lambda _k, _v: 0.6, bm25(common).document_frequency)
    assert [x.value for x in strong] == ["express"] and strong[0].specificity == pytest.approx(0.1)


def test_a_value_held_only_by_records_the_caller_may_not_read_is_never_a_candidate():
    graph = graph_of(DRUG, record("p", "Metformin label", drug="metformin").model_copy(update={"tenant": "acme"}))
    assert candidate_links("Is metformin recalled?", graph, CallerContext("other").can_read) == []
    assert [c.value for c in candidate_links("Is metformin recalled?", graph, CallerContext("acme").can_read)] == ["metformin"]


def test_values_added_after_the_index_was_built_are_found():
    graph = graph_of(DRUG, record("a", "Aspirin label", drug="aspirin"))
    assert candidate_links("Is warfarin recalled?", graph) == []
    graph.add(record("w", "Warfarin label", drug="warfarin"))
    assert [c.value for c in candidate_links("Is warfarin recalled?", graph)] == ["warfarin"]
    graph.remove("w")
    assert candidate_links("Is warfarin recalled?", graph) == []


def test_words_are_normalised():
    assert words("Lodash's merge() in Node.js — CVE-2019-10744") == [
        "lodash",
        "merge",
        "in",
        "node",
        "js",
        "cve",
        "2019",
        "10744",
    ]


def test_a_named_scope_too_large_to_look_up_whole_only_narrows_the_posterior():
    # Every record is about the one project the question names: a lookup would put the 20
    # newest ahead of the anchors; the name says nothing the posterior does not already know.
    policy = Policy(name="proposals", scope_keys=("project",), rules=())
    graph = graph_of(policy, *[record(f"eip-{i}", f"Ethereum proposal {i}", project="ethereum") for i in range(30)])
    candidates = hits(("eip-3", 0.5), ("eip-7", 0.3), ("eip-1", 0.2))
    scope = read_question_scope(
        "Which Ethereum proposal defines tokens?",
        candidates,
        graph,
        policy,
        document_frequency=bm25(graph).document_frequency,
        lookup_limit=20,
    )
    assert [link.value for link in scope.links] == ["ethereum"]
    assert scope.named == {}
    assert scope.posterior.probability(graph.records["eip-3"]) == pytest.approx(1.0)
    small = read_question_scope(
        "Which Ethereum proposal defines tokens?",
        candidates,
        graph,
        policy,
        document_frequency=bm25(graph).document_frequency,
        lookup_limit=30,
    )
    assert small.named == {"project": ["ethereum"]}
