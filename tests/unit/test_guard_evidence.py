"""The guard judges what the reader saw: multi-branch release notes, the reader's evidence
against a re-retrieval's whole scopes, ambiguity, citation forms. Graphs and results built
by hand (no model, no vector store: fast tier)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from authority_fixtures import authority_result
from car_rag.ambiguity import Ambiguity, AmbiguousScope
from car_rag.eligibility import CallerContext
from car_rag.graph import AuthorityGraph
from car_rag.guard import GuardReport, check_answer, scope_evidence, seen_evidence
from car_rag.guard.evidence import Numbering
from car_rag.policy import load_policy
from car_rag.records import Record, tenant_key
from car_rag.resolution import RetrievalResult

ELECTRON = {"package": "electron", "cve_id": "CVE-2026-34768"}


def _release(version: str, day: str, note: str = "Quoted the executable path written by setLoginItemSettings.") -> dict[str, Any]:
    return {
        "doc_id": f"rel-{version}",
        "doc_type": "patch_release",
        "scope": ELECTRON,
        "published_at": f"2026-{day}",
        "text": f"# Release Notes for v{version}\n\n## Fixes\n\n* {note}",
    }


# One advisory fixed on four release lines (the real GHSA-jfqx-fxh3-c62j lists 41.0.0-beta.8,
# 40.8.0, 39.8.1 and 38.8.6), after an incomplete fix on the 40 line; the disclosure names the
# affected range and the fixed versions. The policy's later_patch rule makes every later
# release replace the earlier ones; only 41.0.0-beta.8 is active.
MULTI_BRANCH: list[dict[str, Any]] = [
    {
        "doc_id": "disclosure",
        "doc_type": "vulnerability_disclosure",
        "scope": ELECTRON,
        "published_at": "2026-02-20",
        "text": "### Impact\nOn Windows, app.setLoginItemSettings wrote the executable path unquoted.\n\n"
        "### Affected versions\n* `40.7.0` and earlier\n\n"
        "### Fixed Versions\n* `41.0.0-beta.8`\n* `40.8.0`\n* `39.8.1`\n* `38.8.6`\n",
    },
    _release("40.7.1", "02-25", "Partly quoted the executable path (incomplete)."),
    _release("39.8.1", "03-01"),
    _release("40.8.0", "03-05"),
    _release("41.0.0-beta.8", "03-10"),
    {
        "doc_id": "minimist",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "minimist", "cve_id": "CVE-2021-44906"},
        "published_at": "2022-03-17",
        "text": "Prototype pollution in minimist. Affected versions: up to 1.2.5.",
    },
]


def _graph(records: Sequence[dict[str, Any]], policy: str = "security-advisory") -> AuthorityGraph:
    graph = AuthorityGraph(load_policy(policy))
    for rec in records:
        graph.add(Record.model_validate(rec))
    return graph


def _kinds(report: GuardReport) -> list[str]:
    assert report.judged, report.reason
    return sorted(f.kind for f in report.findings)


def _rescan(anchors: list[str], records: Sequence[dict[str, Any]] = MULTI_BRANCH, k: int = 1, **kw: Any) -> Any:
    """The guard without the reader's evidence: a re-retrieval (here: ``anchors``) over the
    whole scopes of its top ``k``."""
    result, policy = authority_result("security-advisory", records, anchors)
    return scope_evidence(result, _graph(records), policy, k=k, **kw)


MULTI_BRANCH_ANSWERS = [
    # (answer, findings without the reader's evidence)
    ("Yes, it is patched in 41.0.0-beta.8.", []),
    ("Yes, it is patched in 40.8.0.", []),
    ("It has been fixed in 39.8.1; upgrade to 39.8.1 on the 39 line.", []),
    ("Patched: fixed in 38.8.6.", []),  # only the disclosure's "Fixed Versions" names it
    ("Yes, fixed in 41.0.0-beta.8, 40.8.0 and 39.8.1.", []),
    ("Yes, it is patched in 40.7.1.", ["superseded_version"]),  # the incomplete fix 40.8.0 replaced
    ("Yes, it is patched in 40.7.0.", ["superseded_version"]),  # the disclosure's affected range
    ("Yes, it is patched in 40.9.3.", ["unknown_version"]),
    ("Versions up to 40.7.0 are affected; it is fixed in 40.8.0.", []),  # the affected range named as such
]


@pytest.mark.parametrize("answer, kinds", MULTI_BRANCH_ANSWERS, ids=[a for a, _ in MULTI_BRANCH_ANSWERS])
def test_multi_branch_fix_versions_without_the_readers_evidence(answer: str, kinds: list[str]) -> None:
    # The re-retrieval's top record is the newest release; its scope holds every release note.
    report = check_answer(answer, _rescan(["rel-41.0.0-beta.8"]))
    assert _kinds(report) == kinds, report
    assert report.basis == "scopes"


def test_the_old_top_k_judgement_flagged_correct_branch_versions() -> None:
    # What the issue reported: judged against the top record only, a correct branch version is "unknown".
    result, policy = authority_result("security-advisory", MULTI_BRANCH, ["rel-41.0.0-beta.8"])
    assert _kinds(check_answer("Yes, it is patched in 40.8.0.", result, policy, k=1)) == ["unknown_version"]
    assert _kinds(check_answer("Yes, it is patched in 40.8.0.", _rescan(["rel-41.0.0-beta.8"]))) == []


@pytest.mark.parametrize(
    "shown, answer, kinds",
    [
        (["rel-40.8.0"], "Yes, it is patched in 40.8.0.", []),
        (["disclosure"], "Yes, it is patched in 39.8.1.", []),  # the disclosure's fixed versions were shown
        (["disclosure"], "Yes, it is patched in 38.8.6 and 41.0.0-beta.8.", []),
        (["rel-39.8.1", "rel-40.8.0"], "Yes: 39.8.1 or 40.8.0, depending on your line.", []),
        # the reader saw only 40.8.0: a version it could not have read is unknown, though the scope holds it
        (["rel-40.8.0"], "Yes, it is patched in 39.8.1.", ["unknown_version"]),
        # it saw only the incomplete fix; the guard knows 40.8.0 replaced it
        (["rel-40.7.1"], "Yes, it is patched in 40.7.1.", ["superseded_version"]),
        (["disclosure"], "Yes, it is patched in 40.7.0.", ["superseded_version"]),
        (["rel-40.8.0"], "Yes, it is patched in 40.9.3.", ["unknown_version"]),
    ],
)
def test_multi_branch_fix_versions_with_the_readers_evidence(shown: list[str], answer: str, kinds: list[str]) -> None:
    report = check_answer(answer, seen_evidence(_graph(MULTI_BRANCH), shown))
    assert _kinds(report) == kinds, report
    assert report.basis == "evidence"


def test_the_evidence_decides_what_is_known() -> None:
    answer = "Yes, it is patched in 39.8.1."
    assert _kinds(check_answer(answer, _rescan(["rel-40.8.0"]))) == []  # in the scope
    assert _kinds(check_answer(answer, seen_evidence(_graph(MULTI_BRANCH), ["rel-40.8.0"]))) == ["unknown_version"]
    # the rendered text the reader saw counts, as its records do
    text = "[Document 1] (patch_release)\n# Release Notes for v40.8.0 (also backported as 39.8.1)"
    assert _kinds(check_answer(answer, seen_evidence(_graph(MULTI_BRANCH), ["rel-40.8.0"], text=text))) == []
    # a re-retrieval with only the reader's text: the text alone decides the versions
    assert _kinds(check_answer(answer, _rescan(["rel-40.8.0"], text="[Document 1] Release Notes for v40.8.0"))) == [
        "unknown_version"
    ]


def test_a_stale_state_is_found_whether_or_not_the_reader_saw_the_controller() -> None:
    graph = _graph(MULTI_BRANCH)
    saw_both = check_answer("No, it is not patched.", seen_evidence(graph, ["disclosure", "rel-41.0.0-beta.8"]))
    assert _kinds(saw_both) == ["stale_state"]
    saw_disclosure = check_answer("No, it is not patched.", seen_evidence(graph, ["disclosure"]))
    (finding,) = saw_disclosure.findings
    assert finding.kind == "stale_state" and "not in the evidence the answer was given" in finding.message
    assert finding.packet_ids == ("Document 1",)


def test_the_question_subject_comes_from_retrieval_when_the_reader_saw_another() -> None:
    # A reader shown only another package's disclosure says "not patched"; the question is about electron.
    retrieval, _ = authority_result("security-advisory", MULTI_BRANCH, ["disclosure"])
    graph = _graph(MULTI_BRANCH)
    alone = check_answer("No, it is not patched.", seen_evidence(graph, ["minimist"]))
    assert _kinds(alone) == []  # judged against minimist, which is unpatched
    told = check_answer("No, it is not patched.", seen_evidence(graph, ["minimist"], subject=retrieval))
    assert _kinds(told) == ["stale_state"]


def test_whole_scopes_are_caller_gated() -> None:
    records = [
        *MULTI_BRANCH,
        {
            "doc_id": "internal",
            "doc_type": "vulnerability_disclosure",
            "scope": ELECTRON,
            "published_at": "2026-02-21",
            "tenant": "initech",
            "text": "### Internal note\nFixed in 40.8.5 (internal build).",
        },
    ]
    answer = "Yes, it is patched in 40.8.5."
    assert _kinds(check_answer(answer, _rescan(["rel-40.8.0"], records))) == []
    acme = CallerContext(tenant="acme")
    result, policy = authority_result("security-advisory", records, ["rel-40.8.0"], caller=acme)
    gated = scope_evidence(result, _graph(records), policy, k=1, caller=acme)
    assert "internal" not in {p.doc_id for p in gated.packets}
    assert _kinds(check_answer(answer, gated)) == ["unknown_version"]


# ---------------------------------------------------------------------------- citations


def test_citations_follow_the_evidence_form() -> None:
    graph = _graph(MULTI_BRANCH)
    plain = seen_evidence(graph, ["rel-40.8.0", "disclosure"], form="documents")
    assert _kinds(check_answer("Patched in 40.8.0 [Document 1].", plain)) == []
    (finding,) = check_answer("Patched in 40.8.0 [Document 4].", plain).findings
    assert finding.kind == "unknown_citation" and "[Document 4]" in finding.message and finding.packet_ids == ("Document 4",)
    assert _kinds(check_answer("Patched in 40.8.0 [EP-1].", plain)) == []  # not a citation of the plain form
    packets = seen_evidence(graph, ["rel-40.8.0", "disclosure"], form="packets", numbers=[1, 3])
    assert _kinds(check_answer("Patched in 40.8.0 [EP-1].", packets)) == []
    assert _kinds(check_answer("Patched in 40.8.0 [EP-2].", packets)) == ["unknown_citation"]
    assert _kinds(check_answer("Patched in 40.8.0 [Document 1].", packets)) == []


def test_packet_forms_showed_the_replaced_records_as_provenance() -> None:
    # eval-llm lists the top k; the reader and XML forms also showed the records they replace, under
    # packet numbers nobody recorded: their versions were seen, and a citation of them is not judged.
    graph = _graph(MULTI_BRANCH)
    with_provenance = seen_evidence(graph, ["rel-41.0.0-beta.8"], form="packets", provenance=True)
    assert _kinds(check_answer("Yes, it is patched in 39.8.1 [EP-4].", with_provenance)) == []
    assert _kinds(check_answer("Yes, it is patched in 39.8.1 [EP-1].", with_provenance)) == []
    listed_only = seen_evidence(graph, ["rel-41.0.0-beta.8"], form="packets")
    assert _kinds(check_answer("Yes, it is patched in 39.8.1 [EP-4].", listed_only)) == ["unknown_citation", "unknown_version"]
    # the audit XML that omits replaced records still lists their ids: cited, not read
    omitted = seen_evidence(graph, ["rel-41.0.0-beta.8"], form="packets", unnumbered=True)
    assert _kinds(check_answer("Yes, it is patched in 39.8.1 [EP-4].", omitted)) == ["unknown_version"]


def test_findings_cite_as_the_evidence_numbers() -> None:
    graph = _graph(MULTI_BRANCH)
    forms: tuple[tuple[Numbering, str, str], ...] = (
        ("documents", "[Document 1]", "[Document 2]"),
        ("packets", "[EP-1]", "[EP-2]"),
    )
    for form, first, second in forms:
        (finding,) = check_answer(
            "No, it is not patched.", seen_evidence(graph, ["disclosure", "rel-41.0.0-beta.8"], form=form)
        ).findings
        assert first in finding.message and second in finding.message, finding.message
        other = "EP-" if form == "documents" else "Document"
        assert other not in finding.message
    stale = check_answer("It is still vulnerable [Document 1].", seen_evidence(graph, ["disclosure", "rel-41.0.0-beta.8"]))
    assert _kinds(stale) == ["stale_citation", "stale_state"]


def test_a_plain_rendering_of_a_result_is_judged_by_document_numbers() -> None:
    result, policy = authority_result("security-advisory", [MULTI_BRANCH[0], MULTI_BRANCH[4]], ["disclosure"])
    assert [r.doc_id for r in result] == ["rel-41.0.0-beta.8", "disclosure"]  # the controller first
    report = check_answer("It remains vulnerable [Document 2].", result, policy, form="documents")
    assert _kinds(report) == ["stale_citation", "stale_state"]
    assert _kinds(check_answer("It is patched in 41.0.0-beta.8 [Document 1].", result, policy, form="documents")) == []


@pytest.mark.parametrize("form, numbering", [("plain", "documents"), ("reader", "packets"), ("audit", "packets")])
def test_the_guard_takes_the_evidence_form_the_reader_was_shown(form: str, numbering: str) -> None:
    """One vocabulary: the form the evidence was rendered in says how it numbers its records."""
    result, policy = authority_result("security-advisory", [MULTI_BRANCH[0], MULTI_BRANCH[4]], ["disclosure"])
    for answer in ("It remains vulnerable [Document 2].", "It remains vulnerable [EP-2].", "Patched [Document 9] [EP-9]."):
        by_form = check_answer(answer, result, policy, form=form)  # type: ignore[arg-type]
        assert by_form == check_answer(answer, result, policy, form=numbering), (form, answer)  # type: ignore[arg-type]
    graph = _graph(MULTI_BRANCH)
    ids = ["disclosure", "rel-41.0.0-beta.8"]
    assert seen_evidence(graph, ids, form=form).form == numbering  # type: ignore[arg-type]
    assert scope_evidence(result, graph, policy, form=form).form == numbering  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'plain', 'reader', 'audit'"):
        check_answer("It is patched.", result, policy, form="xml")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- ambiguity


def _puppet(n: int) -> dict[str, Any]:
    return {"package": "puppet", "cve_id": f"CVE-2024-0025{n}"}


# Three advisories written alike; only the first was patched.
PUPPET: list[dict[str, Any]] = [
    {
        "doc_id": f"disc-{n}",
        "doc_type": "cve_disclosed",
        "scope": _puppet(n),
        "published_at": "2024-01-02",
        "text": f"CVE-2024-0025{n} has been identified in puppet. The flaw permits XML external entity injection. "
        "Affected versions: puppet up to and including 9.8. No patch is currently available.",
    }
    for n in (1, 2, 3)
] + [
    {
        "doc_id": "patch-1",
        "doc_type": "patch_released",
        "scope": _puppet(1),
        "published_at": "2024-01-20",
        "text": "Release notice: the maintainer team has published version 35.1 as a maintenance update.",
    }
]

AMBIGUOUS = Ambiguity(
    3,
    {"patched": 1, "vulnerable": 2},
    (
        AmbiguousScope(_puppet(1), 0.34, "patched", ("patch-1",)),
        AmbiguousScope(_puppet(2), 0.33, "vulnerable", ("disc-2",)),
        AmbiguousScope(_puppet(3), 0.33, "vulnerable", ("disc-3",)),
    ),
)


def _puppet_result(ambiguity: Ambiguity | None) -> RetrievalResult:
    result, _ = authority_result(
        "security-advisory", PUPPET, ["disc-1", "disc-2", "disc-3"], query="Has the XXE flaw in puppet been patched?"
    )
    result.ambiguity = ambiguity
    return result


AMBIGUITY_CASES = [
    # (answer, findings when the question is ambiguous, findings when it is clear)
    ("Yes, it is patched in 35.1.", ["ambiguous_state"], []),
    ("No, it is not patched.", ["ambiguous_state"], ["stale_state"]),
    ("It depends on which advisory you mean: one of them is patched in 35.1, the others remain vulnerable.", [], []),
    ("The question matches several puppet advisories and I cannot tell which one is meant.", [], []),
    ("One of these advisories is patched in 35.1 while two remain vulnerable.", [], []),
    ("If you mean CVE-2024-00251, it has been patched in 35.1.", [], []),
    ("The documents do not indicate whether it has been patched.", [], []),
]


@pytest.mark.parametrize("answer, ambiguous, clear", AMBIGUITY_CASES, ids=[a[:50] for a, _, _ in AMBIGUITY_CASES])
def test_an_answer_that_picks_one_of_several_scopes(answer: str, ambiguous: list[str], clear: list[str]) -> None:
    assert _kinds(check_answer(answer, _puppet_result(AMBIGUOUS))) == ambiguous
    assert _kinds(check_answer(answer, _puppet_result(None))) == clear


def test_the_ambiguity_finding_says_what_the_scopes_hold() -> None:
    (finding,) = check_answer("Yes, it is patched in 35.1.", _puppet_result(AMBIGUOUS)).findings
    assert "3 scopes" in finding.message and "1 patched" in finding.message and "2 vulnerable" in finding.message
    assert finding.quote and set(finding.packet_ids) <= {"EP-1", "EP-2", "EP-3", "EP-4"}


def test_scopes_all_in_one_state_are_not_an_ambiguous_state() -> None:
    one_state = Ambiguity(2, {"vulnerable": 2}, AMBIGUOUS.members[1:])
    result, _ = authority_result("security-advisory", PUPPET, ["disc-2", "disc-3"])
    result.ambiguity = one_state
    assert _kinds(check_answer("No, it is not patched.", result)) == []


def test_ambiguity_reaches_the_guard_with_the_readers_evidence() -> None:
    graph = _graph(PUPPET)
    shown = ["patch-1", "disc-1", "disc-2", "disc-3"]
    told = seen_evidence(graph, shown, ambiguity=AMBIGUOUS)
    assert _kinds(check_answer("Yes, it is patched in 35.1.", told)) == ["ambiguous_state"]
    assert _kinds(check_answer("It depends which one you mean.", told)) == []
    assert _kinds(check_answer("Yes, it is patched in 35.1.", seen_evidence(graph, shown))) == []


# ---------------------------------------------------------------------------- bad input


def test_evidence_records_the_store_lacks_are_named() -> None:
    with pytest.raises(ValueError, match="'rel-9.9.9'"):
        seen_evidence(_graph(MULTI_BRANCH), ["rel-40.8.0", "rel-9.9.9"])
    with pytest.raises(ValueError, match="numbers"):
        seen_evidence(_graph(MULTI_BRANCH), ["rel-40.8.0"], numbers=[1, 2])


def test_no_records_and_no_text_cannot_be_judged() -> None:
    report = check_answer("It is patched.", seen_evidence(_graph(MULTI_BRANCH), []))
    assert not report.judged and "no evidence" in report.reason


def test_a_closed_book_answer_is_judged_against_the_question_subject() -> None:
    retrieval, _ = authority_result("security-advisory", MULTI_BRANCH, ["disclosure"])
    nothing_shown = seen_evidence(_graph(MULTI_BRANCH), [], subject=retrieval)
    report = check_answer("No, it is not patched; 40.8.0 is affected.", nothing_shown)
    assert _kinds(report) == ["stale_state", "unknown_version"]  # saw nothing: no version is known


def test_a_tenants_evidence_is_named_by_the_ids_its_writers_gave() -> None:
    # The store holds acme's records under tenant keys; acme's reader saw (and cites) its own ids.
    held = [{**r, "tenant": "acme", "doc_id": tenant_key("acme", r["doc_id"])} for r in MULTI_BRANCH]
    graph = _graph(held)
    evidence = seen_evidence(graph, ["rel-41.0.0-beta.8", "disclosure"], caller=CallerContext("acme"))
    assert _kinds(check_answer("Yes, it is patched in 40.9.3.", evidence)) == ["unknown_version"]
    assert _kinds(check_answer("Yes, it is patched in 41.0.0-beta.8.", evidence)) == []
    with pytest.raises(ValueError, match="not in the store"):  # another tenant's reader holds no such record
        seen_evidence(graph, ["rel-41.0.0-beta.8"], caller=CallerContext("globex"))
