"""The claim reader's rules at their edges (car_rag.claims), each found by a mutation the
vocabulary examples of test_claims.py let through: letter case, questions, a state known only
by its label, a negated claim before a plain one, the first claim of a state."""

from __future__ import annotations

import pytest

from car_rag.claims import ClaimReader, sentences
from car_rag.policy import Policy

SECURITY = ClaimReader(Policy(name="t", scope_keys=("s",), vocabulary=("security",)))
# drug-like states without claims or terms: the label is the only word for each
LABELS_ONLY = ClaimReader(
    Policy.model_validate(
        dict(
            name="t",
            scope_keys=("s",),
            states={
                "recalled": {"doc_types": ["recall"], "label": "recalled"},
                "approved": {"doc_types": ["drug_label"], "label": "approved", "opposite": "recalled"},
            },
        )
    )
)
# a state with claims of its own and no terms: its label is neither a claim nor a term
CLAIMS_ONLY = ClaimReader(
    Policy.model_validate(
        dict(
            name="t",
            scope_keys=("s",),
            states={
                "approved": {
                    "doc_types": ["drug_label"],
                    "label": "approved",
                    "claims": [r"\bstill approved\b"],
                    "opposite": "recalled",
                },
                "recalled": {"doc_types": ["recall"], "label": "recalled"},
            },
        )
    )
)


def _reads(reader: ClaimReader, text: str) -> tuple[list[str], str | None, list[tuple[str, str]]]:
    reading = reader.read(text)
    return reading.asserted(), reading.lead, [(c.state, c.polarity) for c in reading.claims]


@pytest.mark.parametrize(
    ("reader", "sentence"),
    [
        (SECURITY, "Never has it been fixed."),  # a negator before a claim
        (SECURITY, "It remains not vulnerable."),  # a negator inside a claim
        (SECURITY, "Unclear: it has been fixed."),  # a hedge
        (SECURITY, "It was not fixed."),  # a denied term
        (LABELS_ONLY, "The lot is recalled."),  # a label's claim
    ],
)
def test_letter_case_does_not_change_a_reading(reader: ClaimReader, sentence: str) -> None:
    assert _reads(reader, sentence.upper()) == _reads(reader, sentence) == _reads(reader, sentence.lower())


def test_a_question_claims_nothing_and_the_answer_after_it_is_read() -> None:
    answer = "Is it patched? It remains vulnerable."
    assert _reads(SECURITY, answer) == (["vulnerable"], "vulnerable", [("vulnerable", "asserts")])


def test_a_negated_claim_does_not_hide_the_same_claim_later_in_the_sentence() -> None:
    # "no longer unpatched" denies the state (a double negative asserts its opposite, issue 30);
    # the later "remains unpatched" is still read.
    reading = SECURITY.read("It is no longer unpatched but it remains unpatched.")
    assert "vulnerable" in reading.asserted()


def test_a_state_known_only_by_its_label_is_claimed_and_denied_by_it() -> None:
    assert _reads(LABELS_ONLY, "The lot is recalled.") == (["recalled"], "recalled", [("recalled", "asserts")])
    # denied: asserts the opposite where there is one, else only the denial
    assert _reads(LABELS_ONLY, "The drug is no longer approved.")[0] == ["recalled"]
    assert _reads(LABELS_ONLY, "The lot is not recalled.") == ([], None, [("recalled", "denies")])


def test_a_state_with_claims_is_not_also_claimed_or_denied_by_its_label() -> None:
    assert _reads(CLAIMS_ONLY, "It is still approved.")[0] == ["approved"]
    assert _reads(CLAIMS_ONLY, "It is approved.") == ([], None, [])
    assert _reads(CLAIMS_ONLY, "It is not approved.") == ([], None, [])


def test_first_is_the_first_claim_asserting_that_state() -> None:
    reading = SECURITY.read("It remains vulnerable. It has been fixed in 2.4.")
    patched, vulnerable = reading.first("patched"), reading.first("vulnerable")
    assert patched is not None and vulnerable is not None
    assert (patched.text, vulnerable.text) == ("has been fixed", "remains vulnerable")
    assert reading.first("recalled") is None
    denial = SECURITY.read("It has not been fixed.")
    assert denial.first("patched") is None  # denied, not asserted
    denied = denial.first("vulnerable")
    assert denied is not None and denied.rule == "denied-term of patched"


def test_blank_lines_are_not_sentences() -> None:
    assert sentences("first line\n \nsecond line") == ["first line", "second line"]
