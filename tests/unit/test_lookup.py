"""The core authority-lookup interface over the dict-store adapter: no model, no Chroma.

The reference is :func:`car_rag.adapters.resolve_authority` over the whole corpus's authority graph
(what the core retriever does): Stage 2 through lookups must resolve the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import car_rag
from car_rag import CallerContext, Record, load_policy, load_records
from car_rag.adapters import (
    LAYOUT_VERSION,
    Anchor,
    AuthorityGraph,
    DictStore,
    LayoutError,
    RecordLayout,
    ScopeQuery,
    resolve_authority,
)
from car_rag.annotations import annotations_for, result_from_annotations
from car_rag.lookup import minimal_queries
from helpers_records import retrieved

DEMO = Path(car_rag.__file__).parent / "data" / "demo"
POLICY = load_policy(DEMO / "policy.toml")
RECORDS = load_records(DEMO / "corpus.jsonl").records


def _reference(records, policy, query, anchors, caller=None):
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    hits = [Anchor(d, rank, channel="ids") for rank, d in enumerate(anchors, 1)]
    return resolve_authority(graph, policy, query, hits, caller)


def _shape(result):
    return [
        (r.doc_id, r.status, r.role, r.anchor_id, r.superseded_by, r.voided_by, r.voids, r.hidden_superseder)
        for r in result.ranked
    ]


@pytest.mark.parametrize("anchor", [r.doc_id for r in RECORDS])
def test_every_demo_record_as_anchor_resolves_as_over_the_whole_graph(anchor):
    result = DictStore.of(RECORDS).resolve(POLICY, "q", [anchor])
    assert _shape(result) == _shape(_reference(RECORDS, POLICY, "q", [anchor]))


def test_demo_queries_with_named_scopes_resolve_as_over_the_whole_graph():
    store = DictStore.of(RECORDS)
    for line in (DEMO / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        anchors = q["anchor_doc_ids"] + [r.doc_id for r in RECORDS[:3]]
        got = store.resolve(POLICY, q["query"], anchors)
        assert _shape(got) == _shape(_reference(RECORDS, POLICY, q["query"], anchors)), q["query_id"]


def _rec(doc_id, doc_type, scope, day, **fields):
    return Record.model_validate(
        dict(doc_id=doc_id, text=f"text {doc_id}", doc_type=doc_type, scope=scope, published_at=f"2024-01-{day:02d}", **fields)
    )


SEC = load_policy("security-advisory")
LODASH = {"package": "lodash", "cve_id": "CVE-1"}
CHAIN = [
    _rec("disc", "vulnerability_disclosure", LODASH, 1),
    _rec("fix-1", "patch_release", LODASH, 2, version="1.0.1"),
    _rec("fix-2", "patch_release", LODASH, 3, version="1.0.2"),
]


def test_a_chain_is_followed_to_its_head_round_by_round():
    store = DictStore.of(CHAIN)
    result = store.resolve(SEC, "is lodash fixed?", ["disc"])
    assert result.doc_ids() == ["fix-2", "fix-1", "disc"]
    assert [r.status for r in result] == ["active", "superseded", "superseded"]
    assert retrieved(result, "disc").superseded_by == ["fix-2"]
    assert _shape(result) == _shape(_reference(CHAIN, SEC, "is lodash fixed?", ["disc"]))


def test_an_explicit_edge_from_another_scope_is_found():
    elsewhere = _rec("bulletin", "vendor_bulletin", {"package": "other"}, 9, supersedes=["disc"])
    result = DictStore.of([*CHAIN, elsewhere]).resolve(SEC, "q", ["disc"])
    assert "bulletin" in retrieved(result, "disc").superseded_by
    assert retrieved(result, "bulletin").role == "superseder"
    assert _shape(result) == _shape(_reference([*CHAIN, elsewhere], SEC, "q", ["disc"]))


def test_the_round_cap_stops_with_a_warning():
    # Explicit edges across scopes: each hop takes one lookup round.
    hops = [_rec(f"n{i}", "note", {"package": f"p{i}"}, i + 1, supersedes=[f"n{i - 1}"] if i else []) for i in range(3)]
    assert DictStore.of(hops).resolve(SEC, "q", ["n0"]).doc_ids() == ["n2", "n1", "n0"]
    with pytest.warns(UserWarning, match="max_rounds=1"):
        result = DictStore.of(hops).resolve(SEC, "q", ["n0"], max_rounds=1)
    assert result.doc_ids() == ["n1", "n0"]  # what was found is still resolved


def test_no_warning_when_the_closure_completes(recwarn):
    DictStore.of(CHAIN).resolve(SEC, "q", ["disc"])
    assert not [w for w in recwarn if "car-rag" in str(w.message)]


def test_a_superseder_the_caller_may_not_read_is_hidden_not_named():
    # Public, as what it voids: another tenant's record would void nothing (car_rag.trust).
    secret = [*CHAIN[:2], _rec("fix-2", "patch_release", LODASH, 3, version="1.0.2", allowed_principals=["sec"])]
    caller = CallerContext(tenant="other")
    result = DictStore.of(secret).resolve(SEC, "q", ["disc"], caller=caller)
    assert "fix-2" not in result.doc_ids()
    fix1 = retrieved(result, "fix-1")
    assert fix1.status == "superseded" and fix1.hidden_superseder and fix1.superseded_by == []
    assert _shape(result) == _shape(_reference(secret, SEC, "q", ["disc"], caller))


def test_eligibility_keeps_restricted_records_out():
    private = [CHAIN[0], _rec("fix-1", "patch_release", LODASH, 2, version="1.0.1", allowed_principals=["sec"])]
    outsider = DictStore.of(private).resolve(SEC, "q", ["disc"], caller=CallerContext())
    insider = DictStore.of(private).resolve(SEC, "q", ["disc"], caller=CallerContext(principals={"sec"}))
    assert outsider.doc_ids() == ["disc"] and retrieved(outsider, "disc").hidden_superseder
    assert insider.doc_ids() == ["fix-1", "disc"]


def test_another_tenants_many_records_in_a_named_scope_crowd_out_none_of_the_readers_chains():
    """The scope a question names holds 1 acme record and 25 later globex ones: acme's is a root of
    the closure all the same (filtered before the cap), so its superseder from another scope is found."""
    cve = {"package": "lodash", "cve_id": "CVE-2024-0001"}
    records = [
        _rec("acme-d", "vulnerability_disclosure", cve, 1, tenant="acme"),
        *(_rec(f"globex-{n}", "vulnerability_disclosure", cve, 2, tenant="globex") for n in range(25)),
        _rec("acme-memo", "note", {"package": "other"}, 3, tenant="acme", supersedes=["acme-d"]),
    ]
    acme = CallerContext(tenant="acme")
    result = DictStore.of(records).resolve(SEC, "is CVE-2024-0001 fixed?", [], caller=acme)
    assert retrieved(result, "acme-d").superseded_by == ["acme-memo"]
    assert _shape(result) == _shape(_reference(records, SEC, "is CVE-2024-0001 fixed?", [], acme))


def test_queries_collapse_and_naming_queries_stay_apart():
    bucket = ScopeQuery.make({"package": "p", "cve_id": "c"})
    typed = ScopeQuery.make({"package": "p", "cve_id": "c"}, ["patch_release"])
    broad = ScopeQuery.make({"package": "p"}, ["patch_release"])
    naming = ScopeQuery.superseders_naming("x")
    assert minimal_queries([bucket, typed, naming, naming]) == [bucket, naming]
    assert set(minimal_queries([typed, broad])) == {broad}
    assert not naming.covers(bucket) and not bucket.covers(naming)
    with pytest.raises(ValueError, match="every record"):
        ScopeQuery.make({})


FULL = Record.model_validate(
    dict(
        doc_id="r-1",
        text="Release 9.9.9.",
        doc_type="patch_release",
        scope={"package": "pkg", "cve_id": "CVE-2099-1"},
        published_at="2024-01-02T03:04:05+00:00",
        effective_at="2024-01-05",
        version="9.9.9",
        source="notes",
        uri="https://example.invalid/r-1",
        authority=0.5,
        tenant="acme",
        allowed_principals=["a", "b"],
        supersedes=["r-0"],
        metadata={"section": "2.1", "tags": ["x"]},
    )
)


@pytest.mark.parametrize("json_lists", [True, False])
def test_layout_round_trip_is_flat_and_versioned(json_lists):
    layout = RecordLayout(json_lists=json_lists)
    meta = layout.metadata(FULL)
    assert meta["car_layout"] == LAYOUT_VERSION and meta["package"] == "pkg"
    for key, value in meta.items():
        assert isinstance(value, (str, int, float, bool)) or (not json_lists and isinstance(value, list)), key
    assert layout.record(meta, FULL.text, None) == FULL
    assert ScopeQuery.superseders_naming("r-0").matches(meta)


def test_layout_errors_name_the_record_and_the_field():
    layout = RecordLayout()
    with pytest.raises(LayoutError, match="'d' has no 'doc_type'"):
        layout.record({"doc_id": "d"}, "t", SEC)
    with pytest.raises(LayoutError, match="record 'd'.*authority"):
        layout.record({"doc_id": "d", "doc_type": "x", "authority": 3.0}, "t", SEC)
    with pytest.raises(LayoutError, match="'d'.*car_layout"):
        layout.record({"doc_id": "d", "doc_type": "x", "car_layout": LAYOUT_VERSION + 1}, "t", SEC)
    with pytest.raises(LayoutError, match="collide"):
        layout.metadata(Record(doc_id="d", text="t", doc_type="x", scope={"car_x": "y"}))


def test_metadata_written_by_others_reads_with_the_policy_scope_keys():
    meta = {"doc_type": "patch_release", "package": "p", "cve_id": "c", "supersedes": '["a"]', "team": "x", "_node": 1}
    record = RecordLayout().record(meta, "t", SEC, default_id="store-7", foreign_keys=frozenset({"_node"}))
    assert (record.doc_id, record.scope, record.supersedes) == ("store-7", {"package": "p", "cve_id": "c"}, ["a"])
    assert record.metadata == {"team": "x"}


def test_annotations_rebuild_the_result_they_describe():
    records = [*CHAIN, _rec("bulletin", "vendor_bulletin", {"package": "other"}, 9, supersedes=["disc"])]
    result = DictStore.of(records).resolve(SEC, "q", ["disc"])
    annotated = [(r.record, annotations_for(r, result)) for r in result.ranked]
    back = result_from_annotations(annotated, query="q", policy=SEC)
    assert _shape(back) == _shape(result)
    assert [r.stage1.rank if r.stage1 else None for r in back] == [r.stage1.rank if r.stage1 else None for r in result]
    by_id = {record.doc_id: meta for record, meta in annotated}
    assert by_id["fix-2"]["car_voids"][1] == {
        "doc_id": "fix-1",
        "rule": "later_patch",
        "doc_type": "patch_release",
        "version": "1.0.1",
        "scope": LODASH,
        "status": "superseded",
    }
    cut = result_from_annotations(annotated[:1], query="q", policy=SEC, linked=True)
    assert cut.doc_ids()[0] == annotated[0][0].doc_id and len(cut) > 1 and cut.ranked[1].record.text == ""


def test_a_neutral_anchor_is_fused_by_the_core_not_by_the_caller():
    hit = Anchor("d", 3, 0.7, "dense").hit()
    assert (hit.rank, hit.channel_scores, hit.channel_ranks) == (3, {"dense": 0.7}, {"dense": 3})
    assert hit.score == pytest.approx(1 / 63)


def test_a_layout_1_record_still_reads_and_layout_2_carries_edge_confidence():
    layout = RecordLayout()
    old = {"doc_id": "d", "doc_type": "patch_release", "car_layout": 1, "package": "p", "cve_id": "CVE-1", "supersedes": '["x"]'}
    assert list(layout.record(old, "text", SEC).supersedes) == ["x"]
    weak = Record.model_validate(
        dict(
            doc_id="w",
            text="t",
            doc_type="patch_release",
            scope={"package": "p", "cve_id": "CVE-1"},
            supersedes=[{"id": "x", "confidence": 0.4}],
        )
    )
    meta = layout.metadata(weak)
    assert meta["car_layout"] == LAYOUT_VERSION == 2
    assert layout.record(meta, "t", SEC).supersedes_confidence == {"x": 0.4}
