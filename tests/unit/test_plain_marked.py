"""The plain evidence with ``marked=True`` (an agent's tool output): every replaced record's
header names what replaced it; the default plain form is unchanged (fast tier)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from authority_fixtures import SCENARIOS, authority_result
from car_rag.eligibility import CallerContext
from car_rag.evidence import render_plain
from car_rag_evals.plain_fuzz import plain_cases, render_case


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


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(plain_cases())
def test_marking_adds_only_a_replaced_note_to_replaced_records(case) -> None:
    """Over the plain fuzz's adversarial records: the marked form is the plain form with one
    note appended to each replaced record's header, on that line, and nothing else changed."""
    records, options = case
    result, _ = render_case(records, options)
    given_options = {"k": options["k"], "superseded": options["superseded"], "dated": options["dated"]}
    plain = render_plain(result, **given_options).split("\n")
    marked = render_plain(result, **given_options, marked=True).split("\n")
    assert len(marked) == len(plain)
    shown = [r for r in result.top(options["k"]) if options["superseded"] == "include" or r.status == "active"]
    hidden = {r.doc_id for r in shown if r.hidden_superseder and not r.superseded_by}
    replaced = [n for n, r in enumerate(shown, 1) if r.status == "superseded" and r.doc_id not in hidden]
    changed = [i for i, (a, b) in enumerate(zip(plain, marked)) if a != b]
    assert len(changed) == len(replaced)
    for i in changed:
        assert marked[i].startswith(plain[i][:-1] + "; replaced") and marked[i].endswith(")")
    if not options["dated"]:  # in car-rag's order, the n-th header is the n-th record shown
        assert [int(marked[i].split("]")[0].removeprefix("[Document ")) for i in changed] == replaced
