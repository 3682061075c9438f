"""The authority-consistency guard on hand-written answers, per domain: what it must flag,
what it must leave alone, and bad input. No model, no vector store (fast tier)."""

from __future__ import annotations

import pytest

from authority_fixtures import SCENARIOS, authority_result
from car_rag.guard import GuardReport, check_answer, repair_messages
from car_rag.policy import load_policy


def _guard(name: str, answer: object, **policy_update) -> GuardReport:
    scenario = SCENARIOS[name]
    result, policy = authority_result(name, scenario["records"], scenario["anchors"])
    if policy_update:
        policy = policy.model_copy(update=policy_update)
    return check_answer(answer, result, policy)


def _kinds(report: GuardReport) -> list[str]:
    return sorted(f.kind for f in report.findings)


CASES = [
    # (policy, answer, expected finding kinds) -- true positives
    ("security-advisory", "No, it is not patched.", ["stale_state"]),
    ("security-advisory", "The vulnerability hasn't been fixed yet.", ["stale_state"]),
    ("security-advisory", "lodash remains vulnerable [EP-3].", ["stale_citation", "stale_state"]),
    ("security-advisory", "There is no patch available for this flaw.", ["stale_state"]),
    ("legal-precedent", "Smith v. Jones is still good law.", ["stale_state"]),
    ("legal-precedent", "No, the ruling hasn't been overruled.", ["stale_state"]),
    ("legal-precedent", "The standard has not been modified by later decisions.", ["stale_state"]),
    ("drug-regulation", "Yes, the drug is still approved and on the market.", ["stale_state"]),
    ("sec-204a1", "The pre-clearance is still valid, so J. Doe may trade.", ["stale_state"]),
    # true negatives
    ("security-advisory", "Yes, it is patched in 4.17.12 [EP-1].", []),
    ("security-advisory", "It has been fixed in 4.17.12. Versions before it remain vulnerable.", []),
    ("security-advisory", "The documents do not indicate whether it has been patched.", []),
    ("legal-precedent", "No longer good law: it was overruled en banc [EP-1].", []),
    ("legal-precedent", "Yes, the standard has been modified by a later en banc decision.", []),
    ("drug-regulation", "The product was recalled [EP-1].", []),
    ("sec-204a1", "The trade is non-compliant: a blackout is in effect [EP-1].", []),
    # citations and versions
    ("security-advisory", "It is patched in 4.17.12 [EP-9].", ["unknown_citation"]),
    ("security-advisory", "It is patched in version 4.18.0 [EP-1].", ["unknown_version"]),
]


@pytest.mark.parametrize("name, answer, kinds", CASES, ids=[f"{c[0]}:{c[1][:40]}" for c in CASES])
def test_findings_on_hand_written_answers(name: str, answer: str, kinds: list[str]) -> None:
    report = _guard(name, answer)
    assert report.judged and _kinds(report) == kinds, report


def test_stale_state_finding_says_what_holds_now() -> None:
    (finding,) = _guard("security-advisory", "No, it is not patched.").findings
    assert finding.packet_ids == ("EP-3", "EP-1")
    assert "'vulnerable'" in finding.message and "'patched'" in finding.message
    assert "lodash, CVE-2019-10744: patched." in finding.message


def test_a_claim_about_another_subject_is_not_stale() -> None:
    # EP-2 (minimist) is an active disclosure: "vulnerable" about it is consistent.
    scenario = SCENARIOS["security-advisory"]
    result, policy = authority_result("security-advisory", scenario["records"], ["minimist-cve", "lodash-cve"])
    report = check_answer("minimist is still vulnerable [EP-1].", result, policy)
    assert report.judged and not report.flagged, report


def test_policy_without_states_still_guards_citations_and_versions() -> None:
    report = _guard("security-advisory", "No, it is not patched [EP-7]; see 9.9.9.", states={})
    assert _kinds(report) == ["unknown_citation", "unknown_version"]
    plain = _guard("versioned-document", "SOP-7 version 2 is current [EP-1].")
    assert plain.judged and not plain.flagged


@pytest.mark.parametrize(
    "answer, reason",
    [
        ("", "empty"),
        ("   \n", "empty"),
        (None, "not text"),
        (42, "not text"),
        ("La vulnerabilidad todavía no está corregida en ninguna versión publicada.", "English"),
    ],
)
def test_cannot_judge_instead_of_raising(answer: object, reason: str) -> None:
    report = _guard("security-advisory", answer)
    assert not report.judged and reason in report.reason and not report.flagged


def test_non_utf8_bytes_are_read_not_fatal() -> None:
    report = _guard("security-advisory", b"No, it is not patched \xff\xfe.")
    assert report.judged and _kinds(report) == ["stale_state"]


def test_no_evidence_cannot_judge() -> None:
    report = check_answer("It is patched.", [], load_policy("security-advisory"))
    assert not report.judged and "no evidence" in report.reason


def test_repair_messages_state_the_findings_and_need_a_flag() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    flagged = _guard("legal-precedent", "It is still good law.")
    out = repair_messages(messages, "It is still good law.", flagged)
    assert out[:2] == messages and out[2] == {"role": "assistant", "content": "It is still good law."}
    assert out[3]["role"] == "user" and "overruled" in out[3]["content"] and "[EP-1]" in out[3]["content"]
    with pytest.raises(ValueError, match="flagged"):
        repair_messages(messages, "ok", _guard("legal-precedent", "It was overruled [EP-1]."))


def test_report_serialises() -> None:
    d = _guard("security-advisory", "No, it is not patched.").to_dict()
    assert d["judged"] and d["flagged"] and d["claims"] == ["vulnerable"] and d["findings"][0]["kind"] == "stale_state"
