"""car_rag.extract on texts written for each case: citation forms and directions, what gives
no edge (quoted, negated, partial, unresolved), identifier resolution, doc types, cycles,
confidence below τ leaving the target contested, and bad input named by document and field."""

from __future__ import annotations

import json

import pytest

from car_rag.extract import PROVENANCE, AuthorityExtractor, ExtractReport
from car_rag.graph import AuthorityGraph, Edge
from car_rag.policy import Policy, PolicyError, _parse
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, Anchor, resolve_authority

POLICY = """
name = "memos"
scope_keys = ["org"]
rules = []
[record_scope]
metadata_fields = {department = "org"}
[extract]
default_doc_type = "memo"
aliases = {"the old travel rules" = "pol-1"}
[[extract.identifiers]]
pattern = '\\bPOL-(\\d+)\\b'
doc_id = "pol-{1}"
[[extract.identifiers]]
pattern = '\\b(?:EIP|ERC)-(\\d+)\\b'
doc_id = ["eip-{1}", "erc-{1}"]
[[extract.doc_types]]
doc_type = "policy"
title = '\\bpolicy\\b'
[[extract.doc_types]]
doc_type = "notice"
metadata = {kind = "^notice$"}
"""


def _policy(extra: str = "") -> Policy:
    return _parse(POLICY + extra, ".toml", "test.toml")


def _docs(*texts: str, ids: tuple[str, ...] = ()) -> list[dict[str, object]]:
    """pol-1 … pol-N with these texts (or the given ids)."""
    names = ids or tuple(f"pol-{i}" for i in range(1, len(texts) + 1))
    return [{"doc_id": d, "text": t} for d, t in zip(names, texts)]


def _edges(report: ExtractReport) -> dict[tuple[str, str], float]:
    return {(e.superseder, e.superseded): e.confidence for e in report.edges}


def _extract(*texts: str, extra: str = "") -> ExtractReport:
    return AuthorityExtractor(_policy(extra)).extract(_docs(*texts))


# --------------------------------------------------------------------------- citation forms
@pytest.mark.parametrize(
    "sentence, edge",
    [
        ("This policy replaces POL-1.", ("pol-3", "pol-1")),
        ("This memo supersedes POL-1 in full.", ("pol-3", "pol-1")),
        ("It obsoletes POL-1.", ("pol-3", "pol-1")),
        ("This decision overrules POL-1.", ("pol-3", "pol-1")),
        ("This regulation abrogates POL-1.", ("pol-3", "pol-1")),
        ("The board hereby rescinds POL-1.", ("pol-3", "pol-1")),
        ("This notice withdraws POL-1 and POL-2.", ("pol-3", "pol-1")),
        ("This memo is superseded by POL-1.", ("pol-1", "pol-3")),
        ("Note: this document was replaced by POL-2.", ("pol-2", "pol-3")),
        ("This standard has been abandoned in favor of the registry defined in POL-1.", ("pol-1", "pol-3")),
        ("POL-2 has superseded POL-1.", ("pol-2", "pol-1")),
        ("This regulation repeals POL-1.", ("pol-3", "pol-1")),
        ("This standard is withdrawn and replaced by POL-1.", ("pol-1", "pol-3")),
        ("POL-1 is superseded by this policy.", ("pol-3", "pol-1")),
        ("POL-1 was repealed and replaced by this memo.", ("pol-3", "pol-1")),
        ("POL-1 is hereby rescinded, effective 1 May 2024.", ("pol-3", "pol-1")),
        ("POL-1 is hereby repealed.", ("pol-3", "pol-1")),
    ],
)
def test_a_stated_supersession_gives_an_edge_in_the_direction_of_its_verb(sentence: str, edge: tuple[str, str]) -> None:
    report = _extract("The first policy.", "The second policy.", f"Some context first.\n\n{sentence} More text.")
    assert edge in _edges(report)
    assert _edges(report)[edge] >= DEFAULT_MIN_CONFIDENCE


def test_a_list_after_the_verb_gives_one_edge_per_cited_document() -> None:
    report = _extract("a", "b", "This notice withdraws POL-1 and POL-2.")
    assert set(_edges(report)) == {("pol-3", "pol-1"), ("pol-3", "pol-2")}


@pytest.mark.parametrize(
    "header, edges",
    [
        ("Replaces: POL-1", {("pol-3", "pol-1")}),
        ("Supersedes: POL-1, POL-2", {("pol-3", "pol-1"), ("pol-3", "pol-2")}),
        ("Superseded-By: POL-2", {("pol-2", "pol-3")}),
        ('---\ntitle: x\nreplaces:\n  - POL-1\n  - "POL-2"\nstatus: final\n---', {("pol-3", "pol-1"), ("pol-3", "pol-2")}),
        ("---\nsuperseded-by: [POL-1]\n---", {("pol-1", "pol-3")}),
        ("| Field | Value |\n|---|---|\n| Supersedes | the old travel rules |", {("pol-3", "pol-1")}),
        ("**Obsoletes:** 2", {("pol-3", "pol-2")}),
        ("Repealed-By: POL-2", {("pol-2", "pol-3")}),
        # A document-control table with a supersession column and one row: the document's own.
        (
            "| Number | Title | Supersedes |\n|---|---|---|\n| POL-3 | Travel | POL-1, POL-2 |",
            {("pol-3", "pol-1"), ("pol-3", "pol-2")},
        ),
        ("| **Number** | **Superseded by** |\n| --- | :---: |\n| POL-3 | POL-2 |", {("pol-2", "pol-3")}),
        ("| Supersedes | POL-1 |\n|---|---|\n| Effective | 1 May 2024 |", {("pol-3", "pol-1")}),
        ("| Supersedes | Effective |\n|---|---|\n| POL-1 | 1 May 2024 |", {("pol-3", "pol-1")}),
        ("| Superseded by | Date |\n|---|---|\n| POL-2 | 1 May 2024 |", {("pol-2", "pol-3")}),
        ("Rescinds: POL-1", {("pol-3", "pol-1")}),
        # An RFC's two-column header: the author beside the value is not part of it; Updates is not supersession.
        (
            "Request for Comments: 3                                  Adobe\n"
            "Obsoletes: 1, 2                                 J. Reschke, Ed.\n"
            "Updates: 4                                           greenbytes",
            {("pol-3", "pol-1"), ("pol-3", "pol-2")},
        ),
    ],
)
def test_header_fields_give_edges_with_header_confidence(header: str, edges: set[tuple[str, str]]) -> None:
    report = _extract("a", "b", f"{header}\n\nThe body of the memo.")
    assert set(_edges(report)) == edges
    assert all(e.sources == ["header"] and e.confidence >= 0.9 for e in report.edges)


def test_a_citation_inside_a_quotation_is_not_a_supersession() -> None:
    report = _extract("a", "b", 'The press wrote that "this policy replaces POL-1", which is wrong: both apply.')
    assert _edges(report) == {}
    assert [(s.reason, s.citation) for s in report.skipped] == [("quoted", "POL-1")]


@pytest.mark.parametrize(
    "sentence, reason",
    [
        ("This memo does not replace POL-1.", "negated"),
        ("This memo is no longer superseded by POL-1.", "negated"),
        ("This memo replaces the travel limits of POL-1.", "partial"),
        ("This memo replaces POL-1's travel limits.", "partial"),
        ("This memo partially supersedes POL-1.", "partial"),
        ("The fee rule of POL-1 is hereby repealed.", "partial"),
        ("POL-1 is not rescinded by this memo.", "negated"),
        ('The headline read "POL-1 is hereby repealed", wrongly.', "quoted"),
        ("We argue in favor of POL-1.", "not a supersession"),
    ],
)
def test_negated_partial_and_supportive_citations_give_no_edge(sentence: str, reason: str) -> None:
    report = _extract("a", "b", sentence)
    assert _edges(report) == {}
    assert reason in {s.reason for s in report.skipped}


def test_citations_without_a_verb_give_nothing_however_often_they_appear() -> None:
    report = _extract("a", "b", "This memo builds on POL-1 and POL-2. See POL-1 for the definitions; POL-2 is compatible.")
    assert _edges(report) == {} and report.skipped == []


@pytest.mark.parametrize(
    "text",
    [
        "Updates: POL-1\n\nThe body.",
        "This memo updates POL-1.",
        "This memo amends POL-1 and supplements POL-2.",
        "POL-1 was rescinded in 2019.",
        "POL-1 has been repealed.",
        "Unlike POL-1, which was repealed in 2010, this memo adds rules.",
        "This version replaces the version of 12 March 2019.",
        "This policy supersedes all previous versions.",
        "The board rescinded POL-1 in 2019.",
        "| Number | Updates |\n|---|---|\n| POL-3 | POL-1 |",
        # A table of several rows (a register, a revision history) does not say which row is this document.
        "| Number | Replaces |\n|---|---|\n| POL-3 | POL-1 |\n| POL-2 | POL-1 |",
    ],
)
def test_look_alikes_of_supersession_give_no_edge(text: str) -> None:
    """Updating or amending keeps the cited document in force; a past repeal is history (whose act
    is not said); a version of the document itself, or no citation, is no other record."""
    assert _edges(_extract("a", "b", text)) == {}


def test_each_subject_of_a_declared_repeal_gives_an_edge_and_hereby_is_surer_than_none() -> None:
    listed = _edges(_extract("a", "b", "POL-1 and POL-2 are hereby rescinded."))
    bare = _edges(_extract("a", "b", "POL-1 is rescinded."))
    assert listed == {("pol-3", "pol-1"): 0.9, ("pol-3", "pol-2"): 0.9}
    assert DEFAULT_MIN_CONFIDENCE <= bare[("pol-3", "pol-1")] < listed[("pol-3", "pol-1")]


def test_an_instruction_to_replace_is_not_a_statement_about_documents() -> None:
    assert _edges(_extract("a", "b", "Replace POL-1 tables with the new schedule before filing.")) == {}


def test_hedged_and_subjectless_statements_get_a_confidence_below_tau() -> None:
    hedged = _edges(_extract("a", "b", "This memo will replace POL-1 once approved."))
    unclear = _edges(_extract("a", "b", "The new opcode replaces POL-1 entirely."))
    assert 0 < hedged[("pol-3", "pol-1")] < DEFAULT_MIN_CONFIDENCE
    assert 0 < unclear[("pol-3", "pol-1")] < DEFAULT_MIN_CONFIDENCE


# --------------------------------------------------------------------------- resolution
def test_an_identifier_that_names_no_document_is_reported_and_gives_no_edge() -> None:
    report = _extract("a", "b", "This policy replaces POL-9.\n\nSuperseded-By: POL-8")
    assert _edges(report) == {}
    assert {(s.citation, s.tried) for s in report.unresolved} == {("POL-9", ("pol-9",)), ("POL-8", ("pol-8",))}
    assert any("unresolved: pol-3: 'POL-9' (tried pol-9: no such document)" in line for line in report.problems())


def test_templates_are_tried_in_order_and_the_first_known_document_wins() -> None:
    docs = _docs("x", "This specification supersedes the defunct ERC-67, which is older.", ids=("erc-67", "erc-681"))
    report = AuthorityExtractor(_policy()).extract(docs)
    assert set(_edges(report)) == {("erc-681", "erc-67")}


def test_a_title_and_an_alias_resolve_a_cited_document() -> None:
    docs = [
        {"doc_id": "travel-2019", "title": "Travel Policy", "text": "Economy class only."},
        {"doc_id": "travel-2024", "title": "Travel and Expenses", "text": "This memo replaces the Travel Policy of March 2019."},
        {"doc_id": "pol-1", "text": "Old rules."},
        {"doc_id": "pol-2", "text": "This memo supersedes the old travel rules."},
    ]
    edges = _edges(AuthorityExtractor(_policy()).extract(docs))
    assert edges[("travel-2024", "travel-2019")] == pytest.approx(0.85)  # by title: a little less sure
    assert edges[("pol-2", "pol-1")] == pytest.approx(0.9)


def test_an_edge_whose_superseder_is_not_in_the_input_is_reported_not_stored() -> None:
    extractor = AuthorityExtractor(_policy(), known={"pol-7"})
    report = extractor.extract(_docs("a", "b", "POL-7 has superseded POL-1."))
    assert report.edges == [] and [(e.superseder, e.superseded) for e in report.unattached] == [("pol-7", "pol-1")]


# --------------------------------------------------------------------------- records
def test_records_carry_doc_type_scope_and_edges_with_source_and_confidence() -> None:
    docs = [
        {
            "doc_id": "pol-1",
            "title": "Travel Policy",
            "text": "Economy only.",
            "department": "finance",
            "published_at": "2019-03-01",
        },
        {"doc_id": "pol-2", "text": "This notice replaces POL-1.", "metadata": {"kind": "notice", "department": "finance"}},
        {"doc_id": "pol-3", "text": "Lunch is at noon."},
    ]
    report = AuthorityExtractor(_policy()).extract(docs)
    one, two, three = report.records
    assert (one.doc_type, two.doc_type, three.doc_type) == ("policy", "notice", "memo")
    assert one.metadata["title"] == "Travel Policy" and one.published_at is not None and one.scope == {"org": "finance"}
    assert two.supersedes == ["pol-1"] and two.supersedes_confidence == {"pol-1": 0.9}
    extracted = two.metadata[PROVENANCE]
    assert extracted["doc_type"] == {"value": "notice", "source": "doc_types.1.metadata.kind", "confidence": 1.0}
    assert extracted["scope"] == {"org": {"value": "finance", "source": "metadata_fields", "confidence": 1.0}}
    assert extracted["supersedes"][0]["evidence"][0]["text"] == "This notice replaces POL-1."
    assert report.untyped == ["pol-3"] and three.metadata[PROVENANCE]["doc_type"]["source"] == "default"
    assert json.loads(two.model_dump_json())["supersedes"] == [{"id": "pol-1", "confidence": 0.9}]


def test_the_inputs_own_fields_win_over_extraction() -> None:
    docs = [
        {"doc_id": "pol-1", "text": "a"},
        {"doc_id": "pol-2", "text": "This policy replaces POL-1.", "doc_type": "ruling", "supersedes": ["pol-1"]},
    ]
    record = AuthorityExtractor(_policy()).extract(docs).records[1]
    assert record.doc_type == "ruling" and record.supersedes == ["pol-1"] and record.edge_confidence("pol-1") == 1.0


def test_extracted_cycles_are_reported_and_the_graph_rejects_the_closing_record() -> None:
    report = _extract("This memo replaces POL-2.", "This memo replaces POL-1.")
    assert report.cycles == [["pol-1", "pol-2", "pol-1"]]
    graph = AuthorityGraph(_policy())
    graph.add(report.records[0])
    with pytest.raises(ValueError, match="cycle"):
        graph.add(report.records[1])


def test_an_edge_below_tau_leaves_its_target_contested_not_voided() -> None:
    report = _extract("Old guidance.", "This memo will replace POL-1.")
    policy = _policy()
    graph = AuthorityGraph(policy)
    for record in report.records:
        graph.add(record)
    result = resolve_authority(graph, policy, "q", [Anchor("pol-1", 1)], min_confidence=DEFAULT_MIN_CONFIDENCE)
    old = result.get("pol-1")
    assert old is not None and (old.status, old.contested) == ("active", True)
    assert old.contested_by == [Edge("pol-2", "pol-1", "explicit", 0.3)]
    strict = resolve_authority(graph, policy, "q", [Anchor("pol-1", 1)], min_confidence=0.2).get("pol-1")
    assert strict is not None and strict.status == "superseded"


# --------------------------------------------------------------------------- bad input
def test_bad_documents_are_named_by_line_and_field_and_the_rest_go_on() -> None:
    items: list[object] = [
        {"doc_id": "ok", "text": "Fine."},
        {"doc_id": "empty", "text": "  \n "},
        {"doc_id": "garbage", "text": "\x00\x01\x02\ufffd\ufffd" * 50},
        {"doc_id": "huge", "text": "word " * 1_000_000},
        {"text": "no id"},
        "not an object",
        {"doc_id": "ok", "text": "again"},
    ]
    report = AuthorityExtractor(_policy()).extract(items)
    assert [r.doc_id for r in report.records] == ["ok"]
    found = {(e.line, e.doc_id, e.field) for e in report.errors}
    assert found == {
        (2, "empty", "text"),
        (3, "garbage", "text"),
        (4, "huge", "text"),
        (5, None, "doc_id"),
        (6, None, None),
        (7, "ok", "doc_id"),
    }
    huge = next(e for e in report.errors if e.doc_id == "huge")
    assert "5,000,000 characters" in huge.message and "--max-chars" in huge.message


def test_a_large_document_within_the_limit_is_read_whole() -> None:
    text = "filler text. " * 400_000 + "This policy replaces POL-1."
    report = AuthorityExtractor(_policy(), max_chars=len(text)).extract(_docs("a", text))
    assert _edges(report) == {("pol-2", "pol-1"): 0.9}


def test_lines_that_are_not_json_or_not_utf8_are_named(tmp_path) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b'{"doc_id": "a", "text": "fine"}\n{"doc_id": "b", "text": \n\xff\xfe\n')
    report = AuthorityExtractor(_policy()).extract(raw)
    assert [r.doc_id for r in report.records] == ["a"]
    assert [(e.line, e.message.split(":")[0]) for e in report.errors] == [(2, "not JSON"), (3, "not UTF-8")]


@pytest.mark.parametrize(
    "section, where",
    [
        ("[[extract.identifiers]]\npattern = 'POL-(\\d+'\ndoc_id = 'pol-{1}'", "extract.identifiers.0.pattern"),
        ("[[extract.doc_types]]\ndoc_type = 'x'\ntitle = '[unclosed'", "extract.doc_types.0"),
        ("[[extract.doc_types]]\ndoc_type = 'x'\nmetadata = {kind = '(?<'}", "extract.doc_types.0"),
        ("[[extract.doc_types]]\ndoc_type = 'x'", "extract.doc_types.0"),
    ],
)
def test_a_policy_pattern_that_does_not_compile_names_its_field(section: str, where: str) -> None:
    text = 'name = "p"\nscope_keys = ["org"]\nrules = []\n' + section
    with pytest.raises(PolicyError, match=where):
        _parse(text, ".toml", "bad.toml")


def test_many_untyped_documents_are_counted_past_the_first_twenty() -> None:
    report = AuthorityExtractor(_policy()).extract([{"doc_id": f"d{i}", "text": "x"} for i in range(25)])
    untyped = [line for line in report.problems() if line.startswith("untyped:")]
    assert len(report.untyped) == 25 and len(untyped) == 21
    assert untyped[-1] == "untyped: 5 more documents (every one in the JSON report)"
