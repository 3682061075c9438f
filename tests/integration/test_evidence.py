"""Evidence packets and their XML, built from real retrieval results over a real store."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from importlib import resources
from typing import Any

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, Policy, RetrievalResult
from car_rag.eligibility import CallerContext
from car_rag.evidence import (
    HIDDEN_SUPERSEDER_TEXT,
    EvidencePacket,
    FreshnessStatus,
    approx_tokens,
    build_packets,
    matching_spans,
    render_audit,
)
from car_rag.evidence.audit import parse_scope
from car_rag.prompts import answer_messages, available_prompts, fill_prompt, load_prompt, system_prompt
from helpers_records import policy_rule, retrieved
from helpers_xml import child, text_of

LODASH = {"package": "lodash", "cve_id": "CVE-2019-10744"}
ZIP = {"package": "zipcraft", "cve_id": "CVE-2099-10005"}
AXIOS = {"package": "axios", "cve_id": "CVE-2099-10003"}
YAML = {"package": "yamlite", "cve_id": "CVE-2099-10006"}

RECORDS: list[dict[str, Any]] = [
    {
        "doc_id": "lodash-cve",
        "text": "CVE-2019-10744: Prototype pollution in lodash defaultsDeep. An attacker who controls the source "
        "object can add properties to Object.prototype through a constructor payload. Severity: critical.",
        "doc_type": "vulnerability_disclosure",
        "scope": LODASH,
        "published_at": "2019-07-01",
        "source": "NVD",
        "authority": 0.85,
        "uri": "https://nvd.nist.gov/vuln/detail/CVE-2019-10744",
        "metadata": {"section": "Description", "page": 1},
    },
    {
        "doc_id": "lodash-4.17.12",
        "text": "Release 4.17.12. Bumped dev dependencies and refreshed the build toolchain. Nested sources are "
        "no longer walked through constructor keys when assigning.",
        "doc_type": "patch_release",
        "scope": LODASH,
        "published_at": "2019-07-09",
        "version": "4.17.12",
        "source": "project release notes",
        "authority": 0.9,
        "uri": "https://github.com/lodash/lodash/releases/tag/4.17.12",
    },
    {
        "doc_id": "zip-cve",
        "text": "CVE-2099-10005: Zip Slip path traversal in zipcraft archive extraction through crafted entry names.",
        "doc_type": "vulnerability_disclosure",
        "scope": ZIP,
        "published_at": "2024-01-10",
    },
    {
        "doc_id": "zip-2.3.1",
        "text": "2.3.1: entry names are normalised before joining with the destination folder.",
        "doc_type": "patch_release",
        "scope": ZIP,
        "published_at": "2024-02-01",
        "version": "2.3.1",
    },
    {
        "doc_id": "zip-2.3.4",
        "text": "2.3.4: symbolic links inside archives are resolved and checked against the destination root.",
        "doc_type": "patch_release",
        "scope": ZIP,
        "published_at": "2024-04-01",
        "version": "2.3.4",
    },
    {
        "doc_id": "axios-cve",
        "text": "CVE-2099-10003: Server-side request forgery in axios when a protocol-relative URL meets baseURL.",
        "doc_type": "vulnerability_disclosure",
        "scope": AXIOS,
        "published_at": "2024-05-01",
    },
    {
        "doc_id": "axios-1.7.4-internal",
        "text": "Internal build 1.7.4: absolute-path handling hardened in the request adapter.",
        "doc_type": "patch_release",
        "scope": AXIOS,
        "published_at": "2024-05-20",
        "version": "1.7.4",
        "allowed_principals": ["sec-team"],  # public, as what it voids (car_rag.trust), but embargoed
    },
    {
        "doc_id": "yaml-cve",
        "text": "CVE-2099-10006: yamlite load executes arbitrary constructors from untrusted YAML documents.",
        "doc_type": "vulnerability_disclosure",
        "scope": YAML,
        "published_at": "2024-06-01",
    },
    {
        "doc_id": "yaml-bulletin",
        "text": "Vendor bulletin: the default loader is now the restricted one; see the migration notes.",
        "doc_type": "vendor_bulletin",
        "scope": YAML,
        "published_at": "2024-06-20",
        "supersedes": ["yaml-cve"],
    },
]

TAR = {"package": "tarstream", "cve_id": "CVE-2099-10103"}
RECORDS += [
    {
        "doc_id": "tar-cve",
        "text": "CVE-2099-10103: tarstream extraction writes outside the target through hardlink entries.",
        "doc_type": "vulnerability_disclosure",
        "scope": TAR,
        "published_at": "2024-07-01",
    },
    {
        "doc_id": "tar-1.0",
        "text": "1.0: first attempt, entries are filtered by name.",
        "doc_type": "patch_release",
        "scope": TAR,
        "published_at": "2024-07-10",
        "version": "1.0",
    },
    {
        "doc_id": "tar-1.1-internal",
        "text": "Internal 1.1: link targets are resolved and confined.",
        "doc_type": "patch_release",
        "scope": TAR,
        "published_at": "2024-08-01",
        "version": "1.1",
        "allowed_principals": ["sec-team"],
    },
]

Q_LODASH = "Is the lodash prototype pollution in defaultsDeep still unpatched?"
Q_ZIP = "Is zipcraft archive extraction still open to Zip Slip path traversal?"
Q_AXIOS = "Can axios be tricked into server-side request forgery with a protocol-relative URL?"
Q_TAR = "Can tarstream extraction write outside the target through hardlink entries?"
Q_YAML = "Does yamlite load still execute arbitrary constructors from untrusted YAML?"

Retriever = ControllingAuthorityRetriever
ANONYMOUS = CallerContext()
SEC_TEAM = CallerContext(tenant="acme", principals={"sec-team"})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, security_policy: Policy, embedder: Any):
    s = CARStore.open(tmp_path_factory.mktemp("evidence-store"), security_policy, embedder=embedder)
    report = s.ingest(RECORDS, progress=False)
    assert not report.errors, [str(e) for e in report.errors]
    yield s
    s.close()


@pytest.fixture(scope="module")
def retriever(store: CARStore) -> ControllingAuthorityRetriever:
    return ControllingAuthorityRetriever(store, anchors="bm25")


def _root(xml: str) -> ET.Element:
    root = ET.fromstring(xml)
    assert root.tag == "evidence"
    return root


def _packet_el(root: ET.Element, doc_id: str | None) -> ET.Element:
    (el,) = [p for p in root.findall("evidence-packet") if p.get("doc-id") == doc_id]
    return el


# ---------------------------------------------------------------------- packets
def test_packets_follow_the_result_and_carry_every_section(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_LODASH)
    packets = build_packets(result, store.policy)
    assert [p.doc_id for p in packets] == result.doc_ids()
    assert [p.evidence_packet_id for p in packets] == [f"EP-{r.rank}" for r in result]
    for packet, item in zip(packets, result, strict=True):
        record = item.record
        assert packet.status == item.status and packet.text == record.text and packet.chunk_id == record.doc_id
        assert packet.provenance.source_id == record.source
        assert packet.provenance.source_authority_score == record.authority
        assert packet.provenance.published_at == record.published_at
        assert packet.provenance.lineage_hash == record.fingerprint()
        assert packet.governance.permission_status == "cleared"
        assert packet.citation_coordinates.uri == record.uri
        assert packet.citation_coordinates.version_id == record.version
        assert packet.retrieval_rationale.matched_subquery == Q_LODASH
        assert packet.retrieval_rationale.role == item.role and packet.rank == item.rank
        if item.stage1 is not None:
            assert packet.retrieval_rationale.channel_scores == item.stage1.channel_scores
            assert packet.retrieval_rationale.stage1_rank == item.stage1.rank
        for span in packet.content.exact_matching_spans:
            assert span in record.text
    disclosure = next(p for p in packets if p.doc_id == "lodash-cve")
    assert disclosure.status == "superseded"
    assert disclosure.citation_coordinates.section_path == "Description"
    assert disclosure.citation_coordinates.page_number == 1
    assert disclosure.epistemic_metadata.conflict_indicators.has_contradiction
    assert disclosure.epistemic_metadata.conflict_indicators.contradicted_by_ids == ["lodash-4.17.12"]
    assert disclosure.retrieval_rationale.status_rule == "patch_fixes_disclosure"
    assert "Prototype pollution" in disclosure.content.exact_matching_spans


def test_superseding_link_carries_rule_description_and_scope(retriever: Retriever, store: CARStore) -> None:
    packets = build_packets(retriever.retrieve(Q_LODASH), store.policy)
    release = next(p for p in packets if p.doc_id == "lodash-4.17.12")
    assert release.status == "active"
    (link,) = release.epistemic_metadata.supersedes
    rule = policy_rule(store.policy, "patch_fixes_disclosure")
    assert (link.doc_id, link.rule, link.rule_description) == ("lodash-cve", rule.name, rule.description)
    assert link.scope == {k: LODASH[k] for k in rule.within}
    assert link.doc_type == "vulnerability_disclosure"
    sentence = release.supersedes_sentence(link)
    assert sentence.startswith("patch release 4.17.12 supersedes vulnerability disclosure lodash-cve")
    assert "package lodash" in sentence and "cve_id CVE-2019-10744" in sentence and "patch_fixes_disclosure" in sentence


def test_release_note_without_the_cve_id_still_says_what_it_answers(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_LODASH)
    root = _root(render_audit(result, policy=store.policy))
    release = _packet_el(root, "lodash-4.17.12")
    assert "CVE-2019-10744" not in text_of(release, "text")
    sup = child(release, "supersedes")
    assert sup.get("doc-id") == "lodash-cve" and sup.get("rule") == "patch_fixes_disclosure"
    assert parse_scope(sup.get("scope", "")) == LODASH
    assert "supersedes" in text_of(sup) and "CVE-2019-10744" in text_of(sup) and "lodash" in text_of(sup)


def test_active_first_and_superseded_marked_with_pointer(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_LODASH)
    root = _root(render_audit(result, policy=store.policy))
    statuses = [p.get("status") for p in root.findall("evidence-packet")]
    assert statuses == sorted(statuses, key=lambda s: s != "active") and "superseded" in statuses
    stale = _packet_el(root, "lodash-cve")
    assert stale.get("status") == "superseded"
    (by,) = stale.findall("superseded-by")
    target = _packet_el(root, by.get("doc-id"))
    assert by.get("packet-ref") == target.get("id") and target.get("status") == "active"
    assert by.get("controlling") == "true"
    assert "is superseded by patch release 4.17.12" in text_of(by)


def test_chain_marks_the_intermediate_superseder(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_ZIP)
    root = _root(render_audit(result, policy=store.policy))
    top = _packet_el(root, "zip-2.3.4")
    assert top.get("status") == "active"
    assert {(s.get("doc-id"), s.get("rule")) for s in top.findall("supersedes")} == {
        ("zip-cve", "patch_fixes_disclosure"),
        ("zip-2.3.1", "later_patch"),
    }
    disclosure = _packet_el(root, "zip-cve")
    pointers = {b.get("doc-id"): b for b in disclosure.findall("superseded-by")}
    assert pointers["zip-2.3.4"].get("controlling") == "true"
    assert pointers["zip-2.3.1"].get("controlling") == "false"
    assert "itself superseded" in text_of(pointers["zip-2.3.1"])
    assert _packet_el(root, "zip-2.3.1").get("status") == "superseded"


def test_explicit_edge_is_worded_as_such(retriever: Retriever, store: CARStore) -> None:
    packets = build_packets(retriever.retrieve(Q_YAML), store.policy)
    bulletin = next(p for p in packets if p.doc_id == "yaml-bulletin")
    (link,) = bulletin.epistemic_metadata.supersedes
    assert link.rule == "explicit" and link.scope == YAML
    assert bulletin.supersedes_sentence(link) == (
        "vendor bulletin yaml-bulletin supersedes vulnerability disclosure yaml-cve "
        "for package yamlite and cve_id CVE-2099-10006, by an explicit supersedes edge."
    )


def test_hidden_superseder_is_marked_and_never_named(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_AXIOS, caller=ANONYMOUS)
    assert "axios-1.7.4-internal" not in result.doc_ids()
    packets = build_packets(result, store.policy)
    disclosure = next(p for p in packets if p.doc_id == "axios-cve")
    assert disclosure.status == "superseded"
    assert disclosure.epistemic_metadata.conflict_indicators.hidden_superseder
    assert disclosure.epistemic_metadata.superseded_by == []
    assert HIDDEN_SUPERSEDER_TEXT in disclosure.retrieval_rationale.relevance_rationale
    xml = render_audit(result, policy=store.policy)
    for leaked in ("axios-1.7.4-internal", "1.7.4", "Internal build", "acme", "sec-team"):
        assert leaked not in xml
        assert leaked not in "".join(p.model_dump_json() for p in packets)
    el = _packet_el(_root(xml), "axios-cve")
    assert el.get("status") == "superseded"
    (hidden,) = el.findall("superseded-by")
    assert hidden.attrib == {"hidden": "true"}
    assert HIDDEN_SUPERSEDER_TEXT in text_of(hidden)


def test_superseder_that_is_itself_hidden_superseded_does_not_control(retriever: Retriever, store: CARStore) -> None:
    """tar-1.1 (unreadable) voids tar-1.0 and the disclosure; tar-1.0 (readable) voids the disclosure."""
    result = retriever.retrieve(Q_TAR, caller=ANONYMOUS)
    assert "tar-1.1-internal" not in result.doc_ids()
    assert {r.doc_id: r.status for r in result if r.doc_id.startswith("tar")} == {
        "tar-cve": "superseded",
        "tar-1.0": "superseded",
    }
    packets = {p.doc_id: p for p in build_packets(result, store.policy)}
    for doc_id in ("tar-cve", "tar-1.0"):
        assert packets[doc_id].epistemic_metadata.conflict_indicators.hidden_superseder, doc_id
    (link,) = packets["tar-cve"].epistemic_metadata.superseded_by
    assert link.doc_id == "tar-1.0" and not link.controlling
    root = _root(render_audit(result, policy=store.policy))
    pointers = _packet_el(root, "tar-cve").findall("superseded-by")
    assert [(b.get("doc-id"), b.get("controlling"), b.get("hidden")) for b in pointers] == [
        ("tar-1.0", "false", None),
        (None, None, "true"),
    ]
    assert "tar-1.1" not in ET.tostring(root, encoding="unicode")


def test_permitted_reader_sees_the_restricted_superseder(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_AXIOS, caller=SEC_TEAM)
    packets = {p.doc_id: p for p in build_packets(result, store.policy)}
    patch = packets["axios-1.7.4-internal"]
    assert patch.status == "active" and patch.governance.permission_status == "restricted"
    assert patch.governance.tenant_id is None and patch.governance.allowed_principals == ["sec-team"]
    assert not packets["axios-cve"].epistemic_metadata.conflict_indicators.hidden_superseder
    root = _root(render_audit(result, policy=store.policy))
    assert _packet_el(root, "axios-1.7.4-internal").get("permission") == "restricted"
    assert HIDDEN_SUPERSEDER_TEXT not in ET.tostring(root, encoding="unicode")


def test_omit_superseded_lists_them_instead(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_ZIP)
    root = _root(render_audit(result, policy=store.policy, superseded="omit"))
    assert {p.get("status") for p in root.findall("evidence-packet")} == {"active"}
    omitted = {p.get("id"): p.get("doc-id") for p in child(root, "omitted").findall("packet")}
    assert sorted(map(str, omitted.values())) == sorted(r.doc_id for r in result.superseded)
    # the active packet still says what it supersedes, pointing at the packets listed as omitted,
    # and renders exactly as it does when they are shown (a shared prompt prefix)
    sup = _packet_el(root, "zip-2.3.4").findall("supersedes")
    assert sup and {omitted[s.get("packet-ref")] for s in sup} == {"zip-cve", "zip-2.3.1"}
    shown = render_audit(result, policy=store.policy)
    assert ET.tostring(_packet_el(_root(shown), "zip-2.3.4")) == ET.tostring(_packet_el(root, "zip-2.3.4"))


def test_conflict_group_for_one_scope(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_ZIP)
    root = _root(render_audit(result, policy=store.policy))
    groups = [g for g in root.findall("conflict-group") if parse_scope(g.get("scope") or "") == ZIP]
    assert len(groups) == 1
    members = {m.get("doc-id"): m.get("status") for m in groups[0].findall("member")}
    assert members == {"zip-2.3.4": "active", "zip-2.3.1": "superseded", "zip-cve": "superseded"}
    refs = {p.get("id") for p in root.findall("evidence-packet")}
    assert {m.get("packet-ref") for m in groups[0].findall("member")} <= refs
    assert "disagree in status" in text_of(groups[0], "note")


def test_compact_states_the_same_supersession_in_fewer_tokens(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_ZIP)
    full, compact = render_audit(result, policy=store.policy), render_audit(result, policy=store.policy, compact=True)
    assert approx_tokens(compact) < 0.8 * approx_tokens(full)
    root = _root(compact)
    ids = {p.get("id"): p.get("doc-id") for p in root.findall("evidence-packet")}
    top = _packet_el(root, "zip-2.3.4")
    # The voided records by packet id (their packets carry id and type); same rules as the full form.
    assert {(ids[s.get("packet-ref")], s.get("rule")) for s in top.findall("supersedes")} == {
        ("zip-cve", "patch_fixes_disclosure"),
        ("zip-2.3.1", "later_patch"),
    }
    assert all(s.get("doc-id") is None and s.get("scope") is None for s in top.findall("supersedes"))
    pointers = {ids[b.get("packet-ref")]: b for b in _packet_el(root, "zip-cve").findall("superseded-by")}
    assert pointers["zip-2.3.4"].get("controlling") is None  # controlling is the default
    assert pointers["zip-2.3.1"].get("controlling") == "false" and "itself superseded" in text_of(pointers["zip-2.3.1"])
    assert text_of(pointers["zip-2.3.4"]).startswith(f"superseded by {_packet_el(root, 'zip-2.3.4').get('id')} (patch release): ")
    # One active record voiding the rest, each link shown: no conflict group restates it.
    assert not [g for g in root.findall("conflict-group") if parse_scope(g.get("scope") or "") == ZIP]


def test_compact_keeps_a_conflict_group_when_two_records_of_a_scope_are_active() -> None:
    from car_rag.evidence import AuthorityLink, ConflictIndicators, EpistemicMetadata, PacketContent, RetrievalRationale

    def packet(pid: str, doc_id: str, status: FreshnessStatus, superseded_by: Sequence[AuthorityLink] = ()) -> EvidencePacket:
        return EvidencePacket(
            evidence_packet_id=pid,
            corpus_object_id=doc_id,
            chunk_id=doc_id,
            doc_type="patch_release",
            scope=ZIP,
            content=PacketContent(raw_text=doc_id),
            epistemic_metadata=EpistemicMetadata(
                freshness_status=status,
                superseded_by=list(superseded_by),
                conflict_indicators=ConflictIndicators(has_contradiction=status != "active"),
            ),
            retrieval_rationale=RetrievalRationale(matched_subquery="q"),
        )

    voided = packet("EP-3", "zip-2.3.0", "superseded", [AuthorityLink(doc_id="zip-2.3.4", rule="later_patch", scope=ZIP)])
    both = [packet("EP-1", "zip-2.3.4", "active"), packet("EP-2", "zip-backport", "active"), voided]
    groups = _root(render_audit(both, compact=True)).findall("conflict-group")
    assert len(groups) == 1 and {m.get("doc-id") for m in groups[0].findall("member")} == {
        "zip-2.3.4",
        "zip-backport",
        "zip-2.3.0",
    }
    assert not _root(render_audit(both[::2], compact=True)).findall("conflict-group")


def test_token_budget_drops_superseded_before_active(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_ZIP)
    full = render_audit(result, policy=store.policy)
    assert "<dropped" not in full
    n_active = len(result.active)
    only_active = render_audit(result, policy=store.policy, superseded="omit")
    # room for the active packets and a <dropped> line per superseded packet, not much more
    budget = approx_tokens(only_active) + 25 * len(result.superseded)
    assert budget < approx_tokens(full)
    root = _root(render_audit(result, policy=store.policy, token_budget=budget))
    kept = root.findall("evidence-packet")
    dropped = child(root, "dropped").findall("packet")
    assert approx_tokens(render_audit(result, policy=store.policy, token_budget=budget)) <= budget
    assert len(kept) >= n_active and all(p.get("status") == "superseded" for p in dropped)
    # lowest rank first: the dropped ones are the last superseded packets, last one first
    superseded_ids = [r.doc_id for r in result.superseded]
    assert [p.get("doc-id") for p in dropped] == superseded_ids[::-1][: len(dropped)]
    assert child(root, "dropped").get("reason") == "token-budget"
    # a budget too small for any packet drops the active ones too, after every superseded one
    tiny = _root(render_audit(result, policy=store.policy, token_budget=5))
    assert tiny.findall("evidence-packet") == []
    statuses = [p.get("status") for p in child(tiny, "dropped").findall("packet")]
    assert statuses == sorted(statuses, key=lambda s: s == "active")


def test_pluggable_token_counter(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_LODASH)
    seen: list[str] = []

    def chars(text: str) -> int:
        seen.append(text)
        return len(text) // 4

    budget = len(render_audit(result, policy=store.policy)) // 4 - 1
    xml = render_audit(result, policy=store.policy, token_budget=budget, token_counter=chars)
    assert seen and chars(xml) <= budget
    assert _root(xml).find("dropped") is not None


def test_k_keeps_the_top_of_the_result(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_ZIP)
    packets = build_packets(result, store.policy, k=2)
    top = result.doc_ids(2)
    assert [p.doc_id for p in packets[:2]] == top
    # After the top k come, as provenance, the superseded records they void; nothing else.
    assert packets[2:], "expected the voided disclosure as provenance"
    for packet in packets[2:]:
        assert packet.status == "superseded" and set(retrieved(result, packet.doc_id).superseded_by) & set(top)
    shown = _root(render_audit(result, policy=store.policy, k=1)).findall("evidence-packet")
    assert shown[0].get("doc-id") == result.doc_ids(1)[0] and all(p.get("status") == "superseded" for p in shown[1:])
    omitted = _root(render_audit(result, policy=store.policy, k=1, superseded="omit")).findall("evidence-packet")
    assert [p.get("doc-id") for p in omitted] == result.doc_ids(1)
    assert build_packets(result, store.policy, k=0) == []
    with pytest.raises(ValueError):
        build_packets(result, store.policy, k=-1)


def test_without_policy_rules_are_named_without_description(retriever: Retriever) -> None:
    """A result that carries no policy (one built by hand, say) still renders: the rule's name only."""
    packets = build_packets(dataclasses.replace(retriever.retrieve(Q_LODASH), policy=None))
    release = next(p for p in packets if p.doc_id == "lodash-4.17.12")
    (link,) = release.epistemic_metadata.supersedes
    assert link.rule == "patch_fixes_disclosure" and link.rule_description == "" and link.scope == LODASH


def test_rules_are_described_by_the_policy_the_result_carries(retriever: Retriever) -> None:
    (link,) = next(
        p for p in build_packets(retriever.retrieve(Q_LODASH)) if p.doc_id == "lodash-4.17.12"
    ).epistemic_metadata.supersedes
    assert link.rule_description == "A patch release fixes the disclosed vulnerability."


def test_packet_json_round_trip(retriever: Retriever, store: CARStore) -> None:
    for packet in build_packets(retriever.retrieve(Q_ZIP), store.policy):
        assert EvidencePacket.model_validate_json(packet.model_dump_json()) == packet


def test_render_rejects_wrong_input(retriever: Retriever, store: CARStore) -> None:
    result = retriever.retrieve(Q_LODASH)
    with pytest.raises(ValueError):
        render_audit(result, policy=store.policy, superseded="drop")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        render_audit("<evidence/>")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        render_audit([{"doc_id": "x"}])  # type: ignore[list-item]
    assert _root(render_audit([])).findall("evidence-packet") == []


def test_matching_spans_are_verbatim_runs_of_query_terms() -> None:
    text = "Prototype pollution in lodash defaultsDeep; PROTOTYPE POLLUTION again. The fix is in lodash."
    spans = matching_spans(text, "is the lodash prototype pollution fixed?")
    assert spans == ["Prototype pollution", "lodash", "PROTOTYPE POLLUTION"]
    assert matching_spans(text, "the is of") == []


def test_demo_store_every_query_renders_consistently(demo_store: CARStore, demo_queries: list[dict]) -> None:
    retriever = ControllingAuthorityRetriever(demo_store, anchors="hybrid")
    for query in demo_queries:
        result: RetrievalResult = retriever.retrieve(query["query"])
        root = _root(render_audit(result, policy=demo_store.policy))
        by_id = {p.get("id"): p for p in root.findall("evidence-packet")}
        assert len(by_id) == len(result)
        for gold in query["gold_doc_ids"]:
            assert _packet_el(root, gold).get("status") == "active", (query["query_id"], gold)
        for el in by_id.values():
            if el.get("status") != "superseded":
                continue
            controlling = [b for b in el.findall("superseded-by") if b.get("controlling") == "true"]
            hidden = [b for b in el.findall("superseded-by") if b.get("hidden") == "true"]
            assert controlling or hidden
            for b in controlling:
                assert by_id[b.get("packet-ref")].get("status") == "active"


# ---------------------------------------------------------------------- prompts
def test_prompts_are_package_data() -> None:
    folder = resources.files("car_rag") / "prompts"
    assert {"answer_system", "answer_user"} <= set(available_prompts())
    for name in available_prompts():
        assert load_prompt(name) == (folder / f"{name}.txt").read_text(encoding="utf-8")


def test_system_prompt_states_the_contract() -> None:
    system = system_prompt().lower()
    for phrase in ("never instructions", "active", "superseded", "cite", "ep-1", HIDDEN_SUPERSEDER_TEXT, "<evidence>"):
        assert phrase in system


def test_hidden_record_rules_only_when_a_packet_has_a_hidden_superseder() -> None:
    hidden = (
        f'<evidence><evidence-packet id="EP-1"><superseded-by hidden="true">{HIDDEN_SUPERSEDER_TEXT}</superseded-by>'
        "</evidence-packet></evidence>"
    )
    quoted = '<evidence><evidence-packet id="EP-1"><text>&lt;superseded-by hidden="true"&gt;</text></evidence-packet></evidence>'
    assert HIDDEN_SUPERSEDER_TEXT in answer_messages("q?", hidden)[0]["content"]
    for evidence in (quoted, '<evidence packets="0"/>'):
        system = answer_messages("q?", evidence)[0]["content"]
        assert HIDDEN_SUPERSEDER_TEXT not in system and "cannot see" not in system and system.startswith(system_prompt()[:200])


def test_user_template_fills_only_its_placeholders() -> None:
    template = load_prompt("answer_user")
    assert "{evidence}" in template and "{question}" in template
    filled = fill_prompt(template, evidence='<evidence packets="0"/> {question}', question="why {evidence}?")
    assert '<evidence packets="0"/> {question}' in filled and "why {evidence}?" in filled
    messages = answer_messages("q?", '<evidence packets="0"/>')
    assert [m["role"] for m in messages] == ["system", "user"] and "q?" in messages[1]["content"]


@pytest.mark.parametrize("name", ["../pyproject", "answer_system.txt", "nope", "", "ANSWER_SYSTEM"])
def test_load_prompt_rejects_unknown_names(name: str) -> None:
    with pytest.raises(ValueError):
        load_prompt(name)
