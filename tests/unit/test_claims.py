"""Every claim pattern and every negated term of the packaged vocabularies, one example
each: the pattern matches it and the claim reader asserts the state it should (fast tier)."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from car_rag.claims import ClaimReader
from car_rag.policy import Policy

VOCABULARIES = {
    p.name[: -len(".toml")]: tomllib.loads(p.read_text(encoding="utf-8"))["states"]
    for p in (resources.files("car_rag") / "vocabularies").iterdir()
    if p.name.endswith(".toml")
}

# (vocabulary, state, "claims" | "terms", index) -> (sentence, the state the reader must assert)
EXAMPLES: dict[tuple[str, str, str, int], tuple[str, str]] = {
    ("security", "vulnerable", "claims", 0): ("The flaw is still unpatched.", "vulnerable"),
    ("security", "vulnerable", "claims", 1): ("The server remains exploitable.", "vulnerable"),
    ("security", "vulnerable", "terms", 0): ("Version 2 is no longer vulnerable.", "patched"),
    ("security", "vulnerable", "terms", 1): ("The current release is not affected.", "patched"),
    ("security", "vulnerable", "terms", 2): ("It isn't exploitable any more.", "patched"),
    ("security", "vulnerable", "terms", 3): ("The latest version does not contain this vulnerability.", "patched"),
    ("security", "vulnerable", "terms", 4): ("The package is not unpatched.", "patched"),
    ("security", "vulnerable", "terms", 5): ("The flaw isn't unfixed any more.", "patched"),
    ("security", "patched", "claims", 0): ("The vulnerability has been fixed.", "patched"),
    ("security", "patched", "claims", 1): ("It was resolved in 2.3.1.", "patched"),
    ("security", "patched", "claims", 2): ("The release that fixes it is 2.3.1.", "patched"),
    ("security", "patched", "claims", 3): ("A patch is available.", "patched"),
    ("security", "patched", "claims", 4): ("Upgrade to version 2.3.1.", "patched"),
    ("security", "patched", "claims", 5): ("Release 2.3.1 fixes it.", "patched"),
    ("security", "patched", "terms", 0): ("The vulnerability hasn't been patched.", "vulnerable"),
    ("security", "patched", "terms", 1): ("It was never fixed.", "vulnerable"),
    ("security", "patched", "terms", 2): ("The issue is not yet addressed.", "vulnerable"),
    ("security", "patched", "terms", 3): ("The bug isn't resolved.", "vulnerable"),
    ("security", "patched", "terms", 4): ("It has not been remediated.", "vulnerable"),
    ("security", "patched", "terms", 5): ("The flaw is not mitigated.", "vulnerable"),
    ("security", "patched", "terms", 6): ("The defect was not corrected.", "vulnerable"),
    ("security", "patched", "terms", 7): ("There are no patches for it.", "vulnerable"),
    ("security", "patched", "terms", 8): ("There is no official fix.", "vulnerable"),
    ("security", "patched", "terms", 9): ("There is no update for this.", "vulnerable"),
    ("security", "patched", "terms", 10): ("There is no remediation.", "vulnerable"),
    ("security", "patched", "terms", 11): ("No patched version exists.", "vulnerable"),
    ("security", "patched", "terms", 12): ("There is no fixed version.", "vulnerable"),
    ("security", "patched", "terms", 13): ("There is no version that fixes it.", "vulnerable"),
    ("legal", "good_law", "claims", 0): ("The ruling is still good law.", "good_law"),
    ("legal", "good_law", "claims", 1): ("The holding remains intact.", "good_law"),
    ("legal", "good_law", "claims", 2): ("The standard still applies.", "good_law"),
    ("legal", "good_law", "terms", 0): ("It is no longer good law.", "overruled"),
    ("legal", "good_law", "terms", 1): ("The precedent is not valid.", "overruled"),
    ("legal", "good_law", "terms", 2): ("The decision doesn't bind lower courts.", "overruled"),
    ("legal", "good_law", "terms", 3): ("The case is no longer controlling.", "overruled"),
    ("legal", "good_law", "terms", 4): ("The opinion is not authoritative.", "overruled"),
    ("legal", "good_law", "terms", 5): ("The rule is not in force.", "overruled"),
    ("legal", "good_law", "terms", 6): ("The ruling is not precedential.", "overruled"),
    ("legal", "overruled", "claims", 0): ("The standard has been modified by a later decision.", "overruled"),
    ("legal", "overruled", "claims", 1): ("Smith was abrogated.", "overruled"),
    ("legal", "overruled", "claims", 2): ("The holding is invalid.", "overruled"),
    ("legal", "overruled", "terms", 0): ("The ruling hasn't been overruled.", "good_law"),
    ("legal", "overruled", "terms", 1): ("It was never overturned.", "good_law"),
    ("legal", "overruled", "terms", 2): ("The holding is not abrogated.", "good_law"),
    ("legal", "overruled", "terms", 3): ("The judgment was not reversed.", "good_law"),
    ("legal", "overruled", "terms", 4): ("The case has not been superseded.", "good_law"),
    ("legal", "overruled", "terms", 5): ("The standard has not been modified.", "good_law"),
    ("legal", "overruled", "terms", 6): ("The test was not replaced.", "good_law"),
    ("legal", "overruled", "terms", 7): ("The order was not vacated.", "good_law"),
    ("legal", "overruled", "terms", 8): ("The doctrine was never altered.", "good_law"),
    ("legal", "overruled", "terms", 9): ("The rule has not changed.", "good_law"),
    ("legal", "overruled", "terms", 10): ("The ruling is not invalid.", "good_law"),
    ("compliance", "active", "claims", 0): ("The pre-clearance is still valid.", "active"),
    ("compliance", "active", "claims", 1): ("The employee may trade today.", "active"),
    ("compliance", "active", "claims", 2): ("The trade is compliant with current policy.", "active"),
    ("compliance", "active", "claims", 3): ("Compliance approved the employee's request to trade.", "active"),
    ("compliance", "active", "claims", 4): ("The transaction passes compliance review.", "active"),
    ("compliance", "active", "terms", 0): ("The clearance is not valid.", "non_compliant"),
    ("compliance", "active", "terms", 1): ("The approval is no longer active.", "non_compliant"),
    ("compliance", "active", "terms", 2): ("The clearance is not in effect.", "non_compliant"),
    ("compliance", "active", "terms", 3): ("The trade is not permitted.", "non_compliant"),
    ("compliance", "active", "terms", 4): ("Trading is not allowed.", "non_compliant"),
    ("compliance", "active", "terms", 5): ("The employee must not trade.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 0): ("The trade is non-compliant.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 1): ("The employee is in violation of the policy.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 2): ("Trading violates the blackout.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 3): ("Trading is prohibited.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 4): ("A blackout is in effect.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 5): ("The pre-clearance is invalid.", "non_compliant"),
    ("compliance", "non_compliant", "claims", 6): ("The pre-clearance has been superseded by a blackout.", "non_compliant"),
    ("compliance", "non_compliant", "terms", 0): ("The pre-clearance has not been superseded.", "active"),
    ("compliance", "non_compliant", "terms", 1): ("The approval was never voided.", "active"),
    ("compliance", "non_compliant", "terms", 2): ("The clearance is not revoked.", "active"),
    ("compliance", "non_compliant", "terms", 3): ("Trading isn't prohibited.", "active"),
    ("compliance", "non_compliant", "terms", 4): ("The trade is not non-compliant.", "active"),
    ("compliance", "non_compliant", "terms", 5): ("The pre-clearance was never invalidated.", "active"),
    ("compliance", "non_compliant", "terms", 6): ("There is no blackout.", "active"),
    ("compliance", "compliant", "claims", 0): ("The trade is compliant under an emergency trading exception.", "compliant"),
    ("compliance", "compliant", "claims", 1): ("The emergency exception applies.", "compliant"),
    ("compliance", "compliant", "claims", 2): ("The blackout was superseded by the emergency exception.", "compliant"),
    ("compliance", "compliant", "terms", 0): ("The trade is not compliant.", "non_compliant"),
    ("drug", "approved", "claims", 0): ("The drug is still approved.", "approved"),
    ("drug", "approved", "terms", 0): ("The product is no longer approved.", "recalled"),
    ("drug", "approved", "terms", 1): ("It is not marketed any more.", "recalled"),
    ("drug", "approved", "terms", 2): ("The tablets are not on the market.", "recalled"),
    ("drug", "recalled", "claims", 0): ("The lots have been withdrawn.", "recalled"),
    ("drug", "recalled", "claims", 1): ("Yes, recalled in 2024.", "recalled"),
    ("drug", "recalled", "terms", 0): ("The product was not recalled.", "approved"),
    ("drug", "recalled", "terms", 1): ("The drug was never withdrawn.", "approved"),
}


def _patterns() -> list[tuple[str, str, str, int]]:
    return [
        (v, s, kind, i)
        for v, states in VOCABULARIES.items()
        for s, state in states.items()
        for kind in ("claims", "terms")
        for i in range(len(state.get(kind, [])))
    ]


def test_every_pattern_has_an_example() -> None:
    assert sorted(_patterns()) == sorted(EXAMPLES)


@pytest.mark.parametrize("key", sorted(EXAMPLES), ids=lambda k: "-".join(map(str, k)))
def test_pattern_example(key: tuple[str, str, str, int]) -> None:
    vocabulary, state, kind, index = key
    sentence, expected = EXAMPLES[key]
    pattern = VOCABULARIES[vocabulary][state][kind][index]
    assert re.search(pattern, sentence, re.IGNORECASE), f"{pattern!r} does not match {sentence!r}"
    reader = ClaimReader(Policy(name="t", scope_keys=("s",), vocabulary=(vocabulary,)))
    assert reader.read(sentence).asserted() == [expected], (sentence, reader.read(sentence))


@pytest.mark.parametrize(
    ("answer", "gold", "label"),
    [
        # precedence: an exception overrides a restriction, a restriction voids a pre-clearance
        (
            "Yes. The pre-clearance is still active and the trade is compliant under an emergency exception.",
            "compliant",
            "correct",
        ),
        ("The pre-clearance was revoked; the trade is permitted under the emergency exception.", "compliant", "correct"),
        ("The pre-clearance is still valid, but a blackout is in effect.", "non_compliant", "correct"),
        ("Yes, the employee may trade. The trade is compliant under an exception.", "active", "confident_wrong"),
    ],
)
def test_compliance_answers_conclude_with_the_state_of_highest_precedence(answer: str, gold: str, label: str) -> None:
    from car_rag.eval.answers import classify

    assert classify(answer, "finsuperqa", gold).label == label


def test_without_precedence_two_states_are_mixed() -> None:
    from car_rag.eval.answers import classify

    assert classify("It is still good law. Later it was overruled.", "legalprecedentqa", "good_law").label == "mixed"
    assert classify("It is still good law and it was overruled.", "legalprecedentqa", "good_law").label == "mixed"
    assert classify("It was still good law in 2018. Later it was overruled.", "legalprecedentqa", "overruled").label == "correct"


def _reader(vocabulary: str) -> ClaimReader:
    return ClaimReader(Policy(name="t", scope_keys=("s",), vocabulary=(vocabulary,)))


@pytest.mark.parametrize(
    ("answer", "scope"),
    [
        ("Earlier versions remain vulnerable.", "earlier"),
        ("Versions before 2.4.1 are still vulnerable.", "earlier"),
        ("If you haven't upgraded to 2.4.1, you remain vulnerable.", "earlier"),
        ("It was still vulnerable in 2.3.0.", "past"),
        ("You remain vulnerable until you upgrade.", "until"),
        ("It remains vulnerable.", None),
    ],
)
def test_a_claim_about_earlier_versions_the_past_or_a_condition_carries_its_scope(answer: str, scope: str | None) -> None:
    claim = _reader("security").read(answer).first("vulnerable")
    assert claim is not None and claim.scope == scope


def test_scoped_claims_give_way_to_a_claim_about_now_and_asserted_still_lists_them() -> None:
    reading = _reader("security").read("It was fixed in 2.4.1; earlier versions remain vulnerable.")
    assert reading.asserted() == ["patched", "vulnerable"]  # unchanged for the guard: every state asserted
    assert reading.lead == "patched"
    assert reading.current() == ["patched"] and reading.contradicted() == []
    alone = _reader("security").read("Earlier versions remain vulnerable.")
    assert alone.current() == ["vulnerable"]  # nothing about now to give way to


def test_asserting_and_denying_one_state_is_contradicted() -> None:
    reading = _reader("compliance").read("The employee may trade, but the trade is not permitted.")
    assert reading.contradicted() == ["active"]
    agree = _reader("legal").read("It is good law; it was not overruled.")
    assert agree.current() == ["good_law"] and agree.contradicted() == []


@pytest.mark.parametrize(
    ("answer", "state"),
    [
        ("It is not the case that it was overruled.", "good_law"),  # a negated clause denies the claim in it
        ("It has not been overruled, modified or abrogated.", "good_law"),  # the negator reaches the end of its list
        ("Not surprisingly, it was overruled.", "overruled"),  # and ends at a comma
        ("No court has overruled it.", "good_law"),  # "no <subject> has <term>"
        ("Lower courts should no longer apply the superseded doctrine.", None),  # not "no <three words> <term>"
        ("It may still be good law.", None),  # a hedge
        ("The documents do not mention it, so it remains good law.", "good_law"),  # a conclusion after the hedge
        ("The documents do not mention it, so it is unclear whether it remains good law.", None),  # hedged again
    ],
)
def test_negation_scope_hedges_and_conclusions(answer: str, state: str | None) -> None:
    assert _reader("legal").read(answer).current() == ([state] if state else [])


def test_a_condition_is_not_a_claim() -> None:
    reader = _reader("security")
    assert reader.read("It remains vulnerable until a fix is released.").current() == ["vulnerable"]
    assert reader.read("You remain vulnerable until you upgrade to 2.4.1.").current() == ["patched"]
