"""A negated term followed by when ("not fixed until 2.4") says when the state began, not that
it never did: the claim reader reads no denial there (car_rag.claims; "not fixed until 2.4"
asserts the fix since issue 30), in every connective the rule names and in each vocabulary,
while the same words without the "when" still deny."""

from __future__ import annotations

import pytest

from car_rag.claims import ClaimReader
from car_rag.policy import Policy


def _reader(vocabulary: str) -> ClaimReader:
    return ClaimReader(Policy(name="t", scope_keys=("s",), vocabulary=(vocabulary,)))


@pytest.mark.parametrize(
    "sentence",
    [
        "It was not fixed until 2.4.",
        "The flaw was not patched in 2.3, only in 2.4.",
        "It was not fixed before 2.4.",
        "The flaw was not patched prior to 2.4.",
        "It is not fixed below 2.4.",
        "The bug wasn't resolved until the 2.4 release.",
    ],
)
def test_a_negated_term_that_says_when_denies_nothing(sentence: str) -> None:
    reading = _reader("security").read(sentence)
    assert not [c for c in reading.claims if c.polarity == "denies"] and "vulnerable" not in reading.asserted(), reading


def test_the_same_words_without_when_still_deny() -> None:
    reader = _reader("security")
    assert reader.read("It was not fixed.").asserted() == ["vulnerable"]
    assert "vulnerable" not in reader.read("It was not fixed until 2.4. It is not fixed in 2.3.").asserted()
    assert "vulnerable" in reader.read("It was not fixed until 2.4. Version 2.3 was never patched.").asserted()


def test_when_not_whether_holds_in_the_legal_vocabulary_too() -> None:
    reader = _reader("legal")
    assert reader.read("The ruling was not overruled until 2019.").asserted() == []
    assert reader.read("The ruling was not overruled.").asserted() == ["good_law"]
