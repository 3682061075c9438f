"""The trust model: an edge voids its target only when its superseder is trusted for it.

One check (:meth:`car_rag.trust.Trust.distrust`) decides for rules, explicit edges, waiting
edges and far-future dates alike; an untrusted edge is kept as a claim that voids nothing
and is shown, with the rule it breaks, only to a reader who may read both records.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from car_rag import CallerContext, load_policy
from car_rag.graph import AuthorityGraph, Edge
from car_rag.layout import RecordLayout
from car_rag.records import Record
from car_rag.resolution import Anchor, resolve_authority
from car_rag.serve.keys import KeysFileError, hash_key, load_api_keys
from car_rag.trust import TRUST_REASONS, Trust
from helpers_records import rec

POLICY = load_policy("security-advisory")
SCOPE = {"package": "lodash", "cve_id": "CVE-2019-10744"}
ACME, GLOBEX = CallerContext("acme"), CallerContext("globex")


def _disclosure(doc_id: str, **governance: Any) -> Record:
    return rec(doc_id, "vulnerability_disclosure", at=0, scope=SCOPE, **governance)


def _patch(doc_id: str, at: int = 30, **governance: Any) -> Record:
    return rec(doc_id, "patch_release", at=at, scope=SCOPE, **governance)


def _graph(*records: Record, policy=POLICY) -> AuthorityGraph:
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    return graph


def _status(graph: AuthorityGraph, doc_id: str, caller: CallerContext | None):
    result = resolve_authority(graph, graph.policy, "q", [Anchor(doc_id, 1)], caller)
    item = result.get(doc_id)
    assert item is not None
    return item


@pytest.mark.parametrize(
    ("superseder", "target", "broken"),
    [
        ({"tenant": "acme"}, {"tenant": "acme"}, None),
        ({"tenant": "acme", "allowed_principals": ["admin"]}, {"tenant": "acme"}, None),
        ({}, {}, None),
        ({"publisher": "nvd"}, {"tenant": "acme"}, None),
        ({}, {"tenant": "acme"}, "public_not_publisher"),
        ({"tenant": "acme"}, {}, "tenant_over_public"),
        ({"tenant": "acme"}, {"tenant": "globex"}, "other_tenant"),
    ],
)
def test_the_default_rules_who_may_void_whom(superseder, target, broken) -> None:
    assert Trust().distrust(_patch("p", **superseder), _disclosure("d", **target)) == broken
    assert broken is None or broken in TRUST_REASONS


def test_a_deployment_may_trust_every_public_record_over_tenants() -> None:
    anyone = Trust(public_voids_tenants="any")
    assert anyone.distrust(_patch("p"), _disclosure("d", tenant="acme")) is None
    assert anyone.distrust(_patch("p", tenant="acme"), _disclosure("d")) == "tenant_over_public"


def test_only_a_public_record_has_a_publisher() -> None:
    with pytest.raises(ValidationError, match="only a public record"):
        _patch("p", tenant="acme", publisher="nvd")


def test_a_record_without_a_publisher_keeps_its_fingerprint() -> None:
    # Stored fingerprints predate the field: an unchanged record must not look changed.
    record = _patch("p")
    assert '"publisher"' not in record.model_dump_json(exclude={"publisher"})
    assert record.fingerprint() != _patch("p", publisher="nvd").fingerprint()


def test_a_rule_across_tenants_is_a_claim_that_voids_nothing() -> None:
    graph = _graph(_disclosure("globex-d", tenant="globex"), _patch("acme-p", tenant="acme"))
    assert graph.edges() == []
    assert graph.disputes("globex-d") == [Edge("acme-p", "globex-d", "patch_fixes_disclosure", untrusted="other_tenant")]
    item = _status(graph, "globex-d", GLOBEX)
    assert (item.status, item.hidden_superseder, item.disputed_by) == ("active", False, [])


def test_an_explicit_edge_and_a_waiting_edge_across_tenants_void_nothing() -> None:
    # The waiting edge names an id globex has not written yet: its record must not arrive voided.
    squatter = rec("acme-x", "note", at=40, scope=SCOPE, tenant="acme", supersedes=["globex-d", "globex-next"])
    graph = _graph(_disclosure("globex-d", tenant="globex"), squatter, _disclosure("globex-next", tenant="globex"))
    assert graph.edges() == [] and not graph.is_superseded("globex-next")
    for doc_id in ("globex-d", "globex-next"):
        assert _status(graph, doc_id, GLOBEX).status == "active"
        assert graph.disputes(doc_id)[0].untrusted == "other_tenant"


def test_a_far_future_public_patch_voids_a_tenant_only_from_a_publisher() -> None:
    far = 365 * 7900  # 9999-ish: after every later patch
    squat = _graph(_disclosure("globex-d", tenant="globex"), _patch("pub-p", at=far), _patch("globex-p", tenant="globex"))
    assert {(e.superseder, e.target) for e in squat.edges()} == {("globex-p", "globex-d")}
    assert _status(squat, "globex-p", GLOBEX).status == "active"
    published = _graph(_disclosure("globex-d", tenant="globex"), _patch("nvd-p", at=far, publisher="nvd"))
    assert _status(published, "globex-d", GLOBEX).superseded_by == ["nvd-p"]


def test_a_reader_who_reads_both_sees_the_claim_with_its_rule() -> None:
    # A tenant's own record claiming to void a public one: acme reads both, globex only one.
    graph = _graph(_disclosure("pub-d"), _patch("acme-p", tenant="acme"))
    item = _status(graph, "pub-d", ACME)
    assert item.status == "active"
    assert [(e.superseder, e.untrusted) for e in item.disputed_by] == [("acme-p", "tenant_over_public")]
    assert item.to_dict()["disputed_by"] == [
        {"doc_id": "acme-p", "rule": "patch_fixes_disclosure", "untrusted": "tenant_over_public"}
    ]
    other = _status(graph, "pub-d", GLOBEX)
    assert (other.status, other.disputed_by, other.hidden_superseder) == ("active", [], False)
    assert "acme-p" not in resolve_authority(graph, POLICY, "q", [Anchor("pub-d", 1)], GLOBEX).doc_ids()


def test_a_hidden_superseder_of_the_same_tenant_still_voids() -> None:
    graph = _graph(_disclosure("acme-d", tenant="acme"), _patch("acme-fix", tenant="acme", allowed_principals=["admin"]))
    item = _status(graph, "acme-d", ACME)
    assert (item.status, item.hidden_superseder, item.superseded_by) == ("superseded", True, [])


def test_a_private_publisher_record_does_not_flag_a_tenant_reader() -> None:
    # Trusted, but of no tenant of the reader's: were it to flag, its date would leak.
    graph = _graph(_disclosure("acme-d", tenant="acme"), _patch("nvd-p", publisher="nvd", allowed_principals=["nvd-staff"]))
    assert graph.is_superseded("acme-d")
    item = _status(graph, "acme-d", ACME)
    assert (item.status, item.hidden_superseder) == ("active", False)
    assert _status(graph, "acme-d", CallerContext("acme", {"nvd-staff"})).superseded_by == ["nvd-p"]


def test_untrusted_edges_close_no_cycle() -> None:
    # globex's patch claims acme's disclosure; acme's record naming globex's patch would close a
    # cycle were claims linked, and acme's next write would be refused for it.
    graph = _graph(
        _disclosure("acme-d", tenant="acme"),
        _patch("globex-p", tenant="globex"),
        rec("acme-n", "note", scope=SCOPE, tenant="acme", supersedes=["globex-p"]),
        rec("acme-d", "vulnerability_disclosure", at=0, scope=SCOPE, tenant="acme", supersedes=["acme-n"]),
    )
    assert {(e.superseder, e.target) for e in graph.edges()} == {("acme-d", "acme-n")}


def test_removing_a_claimant_removes_its_claims_and_a_target_waits_again() -> None:
    graph = _graph(_disclosure("globex-d", tenant="globex"), rec("acme-x", "note", tenant="acme", supersedes=["globex-d"]))
    graph.remove("globex-d")
    assert graph.disputes("globex-d") == []
    graph.add(_disclosure("globex-d", tenant="globex"))
    assert [c.superseder for c in graph.disputes("globex-d")] == ["acme-x"]
    graph.remove("acme-x")
    assert graph.disputes("globex-d") == [] and graph.claims_involving("acme-x") == []


def test_claims_by_names_what_a_write_would_claim() -> None:
    graph = _graph(_disclosure("globex-d", tenant="globex"))
    claims = graph.claims_by(_patch("acme-p", tenant="acme"))
    assert [(c.target, c.untrusted) for c in claims] == [("globex-d", "other_tenant")]
    assert graph.claims_by(_patch("globex-p", tenant="globex")) == []
    assert "acme-p" not in graph


def test_a_graph_linked_before_the_trust_model_keeps_untrusted_edges_as_claims() -> None:
    records = [_disclosure("globex-d", tenant="globex"), _patch("acme-p", tenant="acme")]
    old_edge = Edge("acme-p", "globex-d", "patch_fixes_disclosure")
    graph = AuthorityGraph(POLICY)
    graph.load_edges(records, [old_edge])
    assert graph.edges() == [] and graph.disputes("globex-d")[0].untrusted == "other_tenant"


def test_without_tenants_every_edge_is_linked_as_before() -> None:
    graph = _graph(_disclosure("d"), _patch("p1"), _patch("p2", at=60))
    assert not graph.has_disputes()
    assert {(e.superseder, e.target) for e in graph.edges()} == {("p1", "d"), ("p2", "d"), ("p2", "p1")}


def test_a_publisher_survives_the_flat_metadata_layout_and_plain_metadata_is_no_publisher() -> None:
    # The integrations read records back from a framework's metadata: the field must round-trip,
    # and a document's own 'publisher' metadata must not make it trusted.
    layout = RecordLayout()
    published = _patch("p", publisher="nvd")
    assert layout.record(layout.metadata(published), published.text, POLICY) == published
    plain = _patch("q", metadata={"publisher": "Some Press"})
    back = layout.record(layout.metadata(plain), plain.text, POLICY)
    assert back.publisher is None and back.metadata == {"publisher": "Some Press"}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"tenant": "acme", "write": True, "publisher": True}, "needs write = true and no tenant"),
        ({"publisher": True}, "needs write = true and no tenant"),
        ({"write": True, "publisher": "yes"}, "publisher: Input should be a valid boolean"),
        ({"write": True, "publisher_scopes": {"package": ["lodash"]}}, "only a publisher key (publisher = true)"),
        ({"write": True, "publisher": True, "publisher_scopes": {}}, "names no scope key"),
        ({"write": True, "publisher": True, "publisher_scopes": {"package": []}}, "non-empty list of non-blank values"),
        ({"write": True, "publisher": True, "publisher_scopes": {"package": [" "]}}, "non-empty list of non-blank values"),
        ({"write": True, "publisher": True, "publisher_scopes": {"package": "lodash"}}, "publisher_scopes.package"),
        ({"write": True, "publisher": True, "publisher_scopes": {"package": [1]}}, "valid string"),
    ],
)
def test_a_keys_file_declares_publishers_or_says_what_is_wrong(tmp_path, entry, problem) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [{"name": "nvd", "sha256": hash_key("k"), **entry}]}))
    with pytest.raises(KeysFileError, match=re.escape(problem)):
        load_api_keys(path)
    path.write_text(json.dumps({"keys": [{"name": "nvd", "sha256": hash_key("k"), "write": True, "publisher": True}]}))
    key = load_api_keys(path).lookup("k")
    assert key is not None and key.publisher and key.tenant is None


def test_a_keys_file_names_the_scopes_of_a_publisher_key(tmp_path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(
        f'[[keys]]\nname = "nvd"\nsha256 = "{hash_key("k")}"\nwrite = true\npublisher = true\n'
        'publisher_scopes = { package = ["lodash", "express"] }\n'
        f'[[keys]]\nname = "osv"\nsha256 = "{hash_key("o")}"\nwrite = true\npublisher = true\n'
    )
    path.chmod(0o600)
    assert load_api_keys(path).publisher_scopes == {"nvd": {"package": ("lodash", "express")}}  # osv: every scope


def test_a_publisher_with_scopes_voids_tenants_records_only_in_them() -> None:
    scoped = Trust().with_publishers({"nvd": {"package": ("lodash",)}})
    nvd = _patch("p", publisher="nvd")
    assert scoped.distrust(nvd, _disclosure("d", tenant="acme")) is None
    express = rec("e", "vulnerability_disclosure", at=0, scope={"package": "express"}, tenant="acme")
    assert scoped.distrust(nvd, express) == "publisher_out_of_scope"
    assert scoped.distrust(nvd, rec("u", "vulnerability_disclosure", at=0, tenant="acme")) == "publisher_out_of_scope"
    assert scoped.distrust(nvd, express.model_copy(update={"tenant": None})) is None  # public over public, as ever
    assert scoped.distrust(_patch("q", publisher="osv"), express) is None  # a publisher it does not name: every scope
    assert Trust(public_voids_tenants="any", publisher_scopes=scoped.publisher_scopes).distrust(nvd, express) is None
    assert "publisher_out_of_scope" in TRUST_REASONS


def test_an_out_of_scope_publisher_record_is_a_claim_shown_with_its_rule() -> None:
    policy = POLICY.model_copy(update={"trust": Trust().with_publishers({"nvd": {"package": ("express",)}})})
    graph = _graph(_disclosure("globex-d", tenant="globex"), _patch("nvd-p", publisher="nvd"), policy=policy)
    assert graph.edges() == []
    item = _status(graph, "globex-d", GLOBEX)
    assert item.status == "active" and [e.untrusted for e in item.disputed_by] == ["publisher_out_of_scope"]


@pytest.mark.parametrize("scopes", [{"nvd": {}}, {"nvd": {"package": ()}}, {"nvd": {"package": ("",)}}])
def test_a_policys_publisher_scopes_are_checked(scopes) -> None:
    with pytest.raises(ValidationError, match="'nvd'"):
        Trust(publisher_scopes=scopes)


def test_a_claimant_of_several_chain_members_is_listed_under_the_same_one_in_any_graph() -> None:
    """A public record claims eight acme notes that void one acme disclosure: which note's chain lists
    it is a tie (one anchor, one group) broken by id, not by the order a set of ids iterates in (which
    the hash seed and the graph's history change, as the trust fuzz found)."""
    notes = [rec(f"note-{n}", at=n + 1, tenant="acme", supersedes=["acme-d"]) for n in range(8)]
    claimant = rec("pub-claim", at=20, supersedes=[r.doc_id for r in notes])
    records = [_disclosure("acme-d", tenant="acme"), *notes, claimant]
    for graph in (_graph(*records), _graph(*reversed(records))):
        item = _status(graph, "acme-d", ACME)
        result = resolve_authority(graph, graph.policy, "q", [Anchor("acme-d", 1)], ACME)
        claimed = result.get("pub-claim")
        assert item.status == "superseded" and claimed is not None and claimed.anchor_id == "note-0"
