"""Names that moved or were renamed in the restructure (issue 31): every old import path still
works, and each renamed name warns once used, naming the new one, for one release."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

from car_rag import load_policy, load_records
from car_rag.adapters import DictStore
from car_rag.evidence import render, render_audit, render_plain, render_reader
from car_rag.evidence.render import EVIDENCE_FORMS, evidence_form

DEMO = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"


@pytest.fixture(scope="module")
def result():
    store = DictStore.of(load_records(DEMO / "corpus.jsonl").records)
    policy = load_policy(DEMO / "policy.toml")
    return store.resolve(policy, "Is lodash still vulnerable?", ["sec-lodash-cve-2099-10001-disclosure"])


def _warns(new: str):
    return pytest.warns(DeprecationWarning, match=f"use {new}")


def test_render_is_each_form_and_ignores_what_a_form_does_not_take(result) -> None:
    assert render(result) == render(result, "plain") == render_plain(result)
    assert render(result, "reader", k=2) == render_reader(result, k=2)
    assert render(result, "audit", compact=True, rationale=False) == render_audit(result, compact=True, rationale=False)
    # one call site switches forms by name alone: the audit-only options leave the other forms as they were
    assert render(result, "plain", compact=True, query_id="q") == render_plain(result)
    assert render(result, "reader", rationale=False, dated=True) == render_reader(result)


@pytest.mark.parametrize("old, new", [("xml", "audit"), ("evidence", "plain")])
def test_the_cli_and_service_form_names_warn_and_render_the_new_form(result, old: str, new: str) -> None:
    with _warns(repr(new)):
        text = render(result, old)  # type: ignore[arg-type]
    assert text == render(result, new)  # type: ignore[arg-type]
    with _warns(repr(new)) as caught:
        assert evidence_form(old) == new
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_an_unknown_form_names_the_forms(result) -> None:
    with pytest.raises(ValueError, match="'plain', 'reader', 'audit'"):
        render(result, "json")  # type: ignore[arg-type]
    assert EVIDENCE_FORMS == ("plain", "reader", "audit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [evidence_form(f) for f in EVIDENCE_FORMS] == list(EVIDENCE_FORMS)  # the current names do not warn


@pytest.mark.parametrize("module", ["car_rag", "car_rag.evidence", "car_rag.evidence.audit"])
def test_render_xml_is_render_audit_and_warns(result, module: str) -> None:
    render_xml = importlib.import_module(module).render_xml
    with _warns("render_audit") as caught:
        assert render_xml(result, k=2, compact=True) == render_audit(result, k=2, compact=True)
    assert caught[0].filename == __file__


def test_the_audit_xml_module_warns_on_import_and_keeps_its_names(result) -> None:
    sys.modules.pop("car_rag.evidence.audit_xml", None)
    with _warns("car_rag.evidence.audit"):
        audit_xml = importlib.import_module("car_rag.evidence.audit_xml")
    from car_rag.evidence.audit import format_scope, parse_scope
    from car_rag.evidence.wording import compact_relation_text

    assert (audit_xml.format_scope, audit_xml.parse_scope, audit_xml.compact_relation_text) == (
        format_scope,
        parse_scope,
        compact_relation_text,
    )
    with _warns("render_audit"):
        assert audit_xml.render_xml(result) == render_audit(result)


def test_the_ambiguity_sentence_moved_to_wording() -> None:
    from car_rag.ambiguity import Ambiguity, AmbiguousScope
    from car_rag.evidence import digest, wording

    ambiguity = Ambiguity(
        2,
        {"patched": 1, "vulnerable": 1},
        (
            AmbiguousScope({"package": "p", "cve_id": "A"}, 0.5, "patched", ("a",)),
            AmbiguousScope({"package": "p", "cve_id": "B"}, 0.5, "vulnerable", ("b",)),
        ),
    )
    with _warns("car_rag.evidence.wording.ambiguity_sentence"):
        said = digest.ambiguity_sentence(ambiguity)
    assert said == wording.ambiguity_sentence(ambiguity)
    assert said.startswith("The question matches 2 subjects it does not tell apart (all p): 1 patched (A); 1 vulnerable (B).")


# Every name these modules exported before the split (0eec40e), by module.
BEFORE = {
    "car_rag.policy": [
        "EXPLICIT_RULE",
        "Hierarchy",
        "LLMScopeExtractor",
        "LEVEL_ORDERS",
        "Policy",
        "PolicyArg",
        "PolicyError",
        "RecordScope",
        "Rule",
        "State",
        "WILDCARD",
        "builtin_policies",
        "builtin_vocabularies",
        "load_policy",
        "version_is_higher",
    ],
    "car_rag.guard": [
        "EvidenceForm",
        "Finding",
        "FindingKind",
        "GuardEvidence",
        "GuardReport",
        "check_answer",
        "repair_messages",
        "scope_evidence",
        "seen_evidence",
    ],
    "car_rag.evidence": [
        "HIDDEN_SUPERSEDER_TEXT",
        "AuthorityLink",
        "CitationCoordinates",
        "ConflictIndicators",
        "EpistemicMetadata",
        "EvidencePacket",
        "FreshnessStatus",
        "Governance",
        "PacketContent",
        "Provenance",
        "RetrievalRationale",
        "SupersededMode",
        "build_packets",
        "hidden_only",
        "matching_spans",
        "record_label",
        "scope_groups",
        "DigestLine",
        "authority_digest",
        "oldest_first",
        "render_plain",
        "render_reader",
        "TokenCounter",
        "approx_tokens",
    ],
}


@pytest.mark.parametrize("module", list(BEFORE))
def test_names_that_moved_still_import_from_where_they_were(module: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and without a warning: only renamed names warn
        missing = [name for name in BEFORE[module] if not hasattr(importlib.import_module(module), name)]
    assert missing == []


def test_the_moved_names_are_the_same_objects() -> None:
    from car_rag import guard, policy, rules
    from car_rag.guard import evidence, findings

    assert (policy.Rule, policy.Hierarchy, policy.WILDCARD, policy.version_is_higher) == (
        rules.Rule,
        rules.Hierarchy,
        rules.WILDCARD,
        rules.version_is_higher,
    )
    assert (guard.GuardEvidence, guard.Finding, guard.EvidenceForm) == (evidence.GuardEvidence, findings.Finding, guard.Numbering)
