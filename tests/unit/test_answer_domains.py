"""The answer classifier takes a domain where a user's own corpus has no suite name (the
framework evaluators pass one): ``security``, ``legal`` and ``compliance`` name themselves."""

from __future__ import annotations

import pytest

from car_rag.eval.answers import classify, suite_kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [("security", "security"), ("legal", "legal"), ("compliance", "compliance"), ("ghsa-freeform", "security")],
)
def test_domains_and_suites_name_their_kind(name: str, kind: str) -> None:
    assert suite_kind(name) == kind


def test_a_domain_classifies_like_its_suites_and_an_unknown_one_is_refused() -> None:
    answer = "No, it is still vulnerable: no patch has been released."
    assert classify(answer, "security", "patched") == classify(answer, "ghsa-freeform", "patched")
    assert classify(answer, "security", "patched").label == "confident_wrong"
    with pytest.raises(ValueError, match="no answer classifier for suite 'cooking'"):
        suite_kind("cooking")
