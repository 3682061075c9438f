"""The plain evidence with ``marked=True`` (an agent's tool output): every replaced record's
header names what replaced it; the default plain form is unchanged (fast tier)."""

from __future__ import annotations

import pytest

from authority_fixtures import SCENARIOS, authority_result
from car_rag.eligibility import CallerContext
from car_rag.evidence import render_plain


def _result(domain: str, records: list[dict] | None = None, caller: CallerContext | None = None):
    scenario = SCENARIOS[domain]
    return authority_result(domain, records or scenario["records"], scenario["anchors"], caller=caller)[0]


def _headers(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("[Document ")]


def test_the_replaced_record_names_its_replacer_and_the_default_is_unchanged() -> None:
    result = _result("security-advisory")
    assert _headers(render_plain(result, k=5, marked=True)) == [
        "[Document 1] (patch_release)",
        "[Document 2] (vulnerability_disclosure)",
        "[Document 3] (vulnerability_disclosure; replaced by patch release 4.17.12)",
    ]
    assert "replaced" not in render_plain(result, k=5)


@pytest.mark.parametrize("domain", sorted(SCENARIOS))
def test_every_superseded_record_shown_is_marked(domain: str) -> None:
    result = _result(domain)
    shown = result.top(None)
    headers = _headers(render_plain(result, marked=True))
    assert len(headers) == len(shown)
    for record, header in zip(shown, headers):
        assert ("; replaced" in header) == (record.status == "superseded"), (domain, record.doc_id, header)


def test_a_hidden_replacer_keeps_its_own_note_and_is_not_named() -> None:
    records = [dict(r) for r in SCENARIOS["security-advisory"]["records"]]
    records[1]["allowed_principals"] = ["embargo"]
    text = render_plain(_result("security-advisory", records, CallerContext(tenant="acme")), k=5, marked=True)
    assert "[Document 1] (vulnerability_disclosure; replaced by a record you are not permitted to read)" in text
    assert "4.17.12" not in text
