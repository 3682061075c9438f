"""ControllingAuthorityRetriever on the demo store (real BM25, real MiniLM, real Chroma):
anchors → authority closure → active frontier, with the supersession reported."""

from __future__ import annotations

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag.adapters import DictStore, Edge
from car_rag.retriever import AnchorMode
from helpers_records import retrieved

MODES: tuple[AnchorMode, ...] = ("bm25", "dense", "hybrid")

# query_id -> (rule by which the gold voids the anchor, intermediate record of a 3-hop chain,
#              rule by which the gold voids that intermediate)
EXPECTED = {
    "demo-q01": ("patch_fixes_disclosure", None, None),
    "demo-q02": ("patch_fixes_disclosure", None, None),
    "demo-q03": ("patch_fixes_disclosure", "sec-zipcraft-2.3.1-release", "explicit"),
    "demo-q04": ("explicit", None, None),
    "demo-q05": (None, None, None),
    "demo-q06": ("overruling_voids_ruling", None, None),
    "demo-q07": ("overruling_voids_ruling", None, None),
    "demo-q08": ("overruling_voids_ruling", None, None),
    "demo-q09": ("overruling_voids_ruling", "law-ca5-en-banc-2017-partial-abrogation", "explicit"),
    "demo-q10": (None, None, None),
}


@pytest.fixture(scope="module")
def retrievers(demo_store):
    return {mode: ControllingAuthorityRetriever(demo_store, anchors=mode) for mode in MODES}


@pytest.fixture(scope="module")
def results(retrievers, demo_queries):
    """(mode, query_id) -> (query, result), every demo query under every anchor mode."""
    return {
        (mode, q["query_id"]): (q, retriever.retrieve(q["query"])) for mode, retriever in retrievers.items() for q in demo_queries
    }


def test_demo_queries_cover_every_hop_type(demo_queries):
    assert {q["query_id"] for q in demo_queries} == set(EXPECTED)
    assert {q["hop_type"] for q in demo_queries} == {"T0", "T1", "T2"}


@pytest.mark.parametrize("mode", MODES)
def test_gold_is_in_top5_for_every_demo_query(results, demo_queries, mode):
    misses = []
    for q in demo_queries:
        _, result = results[(mode, q["query_id"])]
        if not set(q["gold_doc_ids"]) & set(result.doc_ids(5)):
            misses.append((q["query_id"], result.doc_ids(5)))
    assert misses == []


@pytest.mark.parametrize("mode", MODES)
def test_controlling_record_first_when_anchor_leads_stage1(results, demo_queries, mode):
    """Frontier documents come first in their anchor's Stage-1 order: when the anchor is the
    top Stage-1 hit (and the query names no scope id), its controlling record is rank 1."""
    checked = 0
    for q in demo_queries:
        _, result = results[(mode, q["query_id"])]
        if result.anchors[0].doc_id == q["anchor_doc_ids"][0] and not result.scope_ids:
            assert result.ranked[0].doc_id == q["gold_doc_ids"][0], q["query_id"]
            checked += 1
    assert checked >= 6


@pytest.mark.parametrize("mode", MODES)
def test_anchor_superseded_by_its_controlling_record(results, demo_queries, mode):
    for q in demo_queries:
        _, result = results[(mode, q["query_id"])]
        qid = q["query_id"]
        anchor_id, gold_id = q["anchor_doc_ids"][0], q["gold_doc_ids"][0]
        rule, _, _ = EXPECTED[qid]
        anchor, gold = result.get(anchor_id), result.get(gold_id)
        assert anchor is not None and gold is not None, qid

        assert gold.status == "active", qid
        assert gold.superseded_by == [] and gold.voided_by == [], qid
        stage1_ids = {h.doc_id for h in result.anchors}
        if result.scope_ids:
            expected_role = "scope_match"
        elif gold_id in stage1_ids:
            expected_role = "anchor"
        else:
            expected_role = "superseder"
        assert gold.role == expected_role, (qid, gold.role)

        if q["hop_type"] == "T0":
            assert anchor is gold and rule is None
            continue
        assert rule is not None, qid
        if expected_role == "superseder":
            assert gold.anchor_id == anchor_id, qid  # brought in by following the anchor's chain
            assert gold.stage1 is None, qid
        assert anchor.status == "superseded", qid
        assert anchor.superseded_by == [gold_id], qid
        assert Edge(gold_id, anchor_id, rule) in anchor.voided_by, (qid, anchor.voided_by)
        assert {e.superseder for e in anchor.voided_by} == set(q["chain_doc_ids"]) - {anchor_id}, qid
        assert Edge(gold_id, anchor_id, rule) in gold.voids, qid
        assert not anchor.hidden_superseder


def test_some_controlling_records_are_reached_only_through_the_chain(results):
    """The point of Stage 2: the voiding record is not a Stage-1 hit, yet it is found."""
    _, result = results[("bm25", "demo-q04")]
    patch = result.get("sec-axios-1.7.4-release")
    assert patch.role == "superseder" and patch.stage1 is None and patch.rank == 1
    assert "sec-axios-1.7.4-release" not in {h.doc_id for h in result.anchors}


@pytest.mark.parametrize("mode", MODES)
def test_three_hop_chains_report_the_intermediate_superseded(results, demo_queries, mode):
    t2 = [q for q in demo_queries if q["hop_type"] == "T2"]
    assert len(t2) == 2
    for q in t2:
        _, result = results[(mode, q["query_id"])]
        _, mid_id, mid_rule = EXPECTED[q["query_id"]]
        assert mid_id is not None and mid_rule is not None
        anchor_id, gold_id = q["anchor_doc_ids"][0], q["gold_doc_ids"][0]
        assert q["chain_doc_ids"] == [anchor_id, mid_id, gold_id]
        mid = result.get(mid_id)
        assert mid is not None, q["query_id"]
        assert mid.status == "superseded"
        assert mid.superseded_by == [gold_id]
        assert mid.voided_by == [Edge(gold_id, mid_id, mid_rule)]
        assert [e.target for e in mid.voids] == [anchor_id]  # it voided the anchor before being voided
        assert {e.target for e in result.get(gold_id).voids} == {anchor_id, mid_id}
        assert result.get(anchor_id).superseded_by == [gold_id]  # not the intermediate


@pytest.mark.parametrize("mode", MODES)
def test_superseded_records_come_after_all_active_ones(results, demo_queries, mode):
    for q in demo_queries:
        _, result = results[(mode, q["query_id"])]
        statuses = [r.status for r in result.ranked]
        n_active = statuses.count("active")
        assert statuses == ["active"] * n_active + ["superseded"] * (len(statuses) - n_active)
        assert [r.rank for r in result.ranked] == list(range(1, len(result.ranked) + 1))
        assert result.active == result.ranked[:n_active]
        for r in result.superseded:
            assert r.voided_by, r.doc_id
            assert set(r.superseded_by) <= {a.doc_id for a in result.active}
        if q["hop_type"] != "T0":
            assert len(result.superseded) >= q["chain_doc_ids"].__len__() - 1


@pytest.mark.parametrize("mode", MODES)
def test_stage1_scores_are_reported_on_anchors(results, demo_queries, demo_store, mode):
    channels = {"bm25": {"bm25"}, "dense": {"dense"}, "hybrid": {"bm25", "dense"}}[mode]
    for q in demo_queries:
        _, result = results[(mode, q["query_id"])]
        assert 1 <= len(result.anchors) <= 10
        assert [h.rank for h in result.anchors] == list(range(1, len(result.anchors) + 1))
        stage1_ids = {h.doc_id for h in result.anchors}
        for r in result.ranked:
            assert (r.stage1 is not None) == (r.doc_id in stage1_ids), r.doc_id
            if r.role == "anchor":
                # Itself, or a better-ranked anchor whose authority chain it belongs to.
                assert r.stage1 is not None
                assert r.anchor_id == r.doc_id or r.doc_id in demo_store.graph.ancestors(r.anchor_id)
            if r.stage1 is not None:
                assert r.stage1.channel_scores and set(r.stage1.channel_scores) <= channels
                assert set(r.stage1.channel_ranks) == set(r.stage1.channel_scores)
                assert r.stage1.score > 0
        anchor = result.get(q["anchor_doc_ids"][0])
        assert anchor.stage1 is not None, q["query_id"]
        assert set(anchor.stage1.channel_scores) == channels, q["query_id"]  # every channel found it
        if "bm25" in channels:
            assert anchor.stage1.channel_scores["bm25"] > 0
        if "dense" in channels:
            assert 0 < anchor.stage1.channel_scores["dense"] <= 1.0 + 1e-6
        assert "stage1" in result.timings_ms and "stage23" in result.timings_ms and "total" in result.timings_ms


@pytest.mark.parametrize("mode", MODES)
def test_named_cve_pulls_its_records_in_and_ranks_its_frontier_first(retrievers, mode):
    # Stage 1 is about jsonwebtoken; the CVE id (lower-cased) names the zipcraft chain.
    query = "Is the jsonwebtoken algorithm confusion signature bypass fixed, and what about cve-2099-10005?"
    result = retrievers[mode].retrieve(query)
    assert result.scope_ids == {"cve_id": ["CVE-2099-10005"]}
    # The named scope leads the anchors; the one Stage 1 found by the question's words follows.
    assert "sec-jsonwebtoken-cve-2099-10004-disclosure" in [a.doc_id for a in result.anchors]
    zip_ids = ["sec-zipcraft-cve-2099-10005-disclosure", "sec-zipcraft-2.3.1-release", "sec-zipcraft-2.3.4-release"]
    for doc_id in zip_ids:
        assert result.get(doc_id).role == "scope_match", doc_id
    assert result.ranked[0].doc_id == "sec-zipcraft-2.3.4-release"
    assert result.ranked[0].status == "active"
    assert result.get("sec-zipcraft-2.3.1-release").superseded_by == ["sec-zipcraft-2.3.4-release"]
    assert result.get("sec-zipcraft-cve-2099-10005-disclosure").superseded_by == ["sec-zipcraft-2.3.4-release"]
    # The Stage-1 subject's own controlling patch follows right after.
    assert result.ranked[1].doc_id == "sec-jsonwebtoken-9.0.0-release"
    assert result.get("sec-jsonwebtoken-cve-2099-10004-disclosure").status == "superseded"


# --------------------------------------------------------------------------- rules vs timestamp
LEGAL_RECORDS = [
    {
        "doc_id": "c1-ruling-2001",
        "text": "Acme Holdings v. Birchwood Tenants (2001). A landlord must return a tenant's security "
        "deposit within thirty days of move-out or forfeit any claim to deductions for damage.",
        "doc_type": "ruling",
        "scope": {"case": "acme_v_birchwood", "question_id": "Q1"},
        "published_at": "2001-04-02",
    },
    {
        "doc_id": "c1-overruling-2010",
        "text": "The forfeiture penalty announced earlier is abandoned: an owner who misses the statutory "
        "window keeps the right to offset proven harm to the premises.",
        "doc_type": "overruling",
        "scope": {"case": "acme_v_birchwood", "question_id": "Q1"},
        "published_at": "2010-09-14",
    },
    {
        # A later ruling on the same case and question that merely restates history: under the
        # policy a ruling voids nothing, but a 'latest in scope wins' baseline believes it.
        "doc_id": "c1-restatement-2015",
        "text": "In a later fee dispute between the same parties the panel recounted the procedural "
        "history of the litigation without revisiting the merits.",
        "doc_type": "ruling",
        "scope": {"case": "acme_v_birchwood", "question_id": "Q1"},
        "published_at": "2015-01-20",
    },
    {
        "doc_id": "c2-ruling-2005",
        "text": "Crane v. Delmar Shipping (2005). A maritime lien attaches to the vessel when supplies are "
        "delivered on the order of the charterer.",
        "doc_type": "ruling",
        "scope": {"case": "crane_v_delmar", "question_id": "Q-lien"},
        "published_at": "2005-06-01",
    },
    {
        "doc_id": "c3-ruling-2012",
        "text": "Ellis v. Fairmont School District (2012). Students retain free-speech rights for off-campus "
        "posts unless they substantially disrupt school activities.",
        "doc_type": "ruling",
        "scope": {"case": "ellis_v_fairmont", "question_id": "Q-speech"},
        "published_at": "2012-03-12",
    },
]
DEPOSIT_QUERY = "Must a landlord return the security deposit within thirty days or forfeit deductions?"


@pytest.fixture(scope="module")
def legal_store(tmp_path_factory, legal_policy, embedder):
    store = CARStore.open(tmp_path_factory.mktemp("legal-store"), legal_policy, embedder=embedder)
    report = store.ingest(LEGAL_RECORDS, progress=False)
    assert report.errors == [] and len(report.added) == 5
    yield store
    store.close()


def test_graph_has_no_edge_from_a_restating_ruling(legal_store):
    graph = legal_store.graph
    assert graph.superseders("c1-overruling-2010") == []
    assert graph.superseders("c1-ruling-2001") == [Edge("c1-overruling-2010", "c1-ruling-2001", "overruling_voids_ruling")]


def test_rules_resolution_keeps_the_overruling_in_control(legal_store):
    retriever = ControllingAuthorityRetriever(legal_store, anchors="bm25", k1=1, resolution="rules")
    result = retriever.retrieve(DEPOSIT_QUERY)
    assert [h.doc_id for h in result.anchors] == ["c1-ruling-2001"]
    assert result.ranked[0].doc_id == "c1-overruling-2010"
    assert result.ranked[0].status == "active" and result.ranked[0].role == "superseder"
    ruling = retrieved(result, "c1-ruling-2001")
    assert ruling.status == "superseded" and ruling.superseded_by == ["c1-overruling-2010"]
    assert ruling.voided_by == [Edge("c1-overruling-2010", "c1-ruling-2001", "overruling_voids_ruling")]
    assert result.get("c1-restatement-2015") is None  # not in the anchor's authority chain
    assert result.doc_ids() == ["c1-overruling-2010", "c1-ruling-2001"]


def test_timestamp_resolution_lets_a_later_unrelated_record_win(legal_store):
    """The paper's anchor-only baseline: 'latest in the scope bucket wins' hands control to
    the 2015 restatement and wrongly marks the 2010 overruling superseded."""
    retriever = ControllingAuthorityRetriever(legal_store, anchors="bm25", k1=1, resolution="timestamp")
    result = retriever.retrieve(DEPOSIT_QUERY)
    assert [h.doc_id for h in result.anchors] == ["c1-ruling-2001"]
    assert result.ranked[0].doc_id == "c1-restatement-2015"
    assert result.ranked[0].status == "active"
    overruling = retrieved(result, "c1-overruling-2010")
    assert overruling.status == "superseded"
    assert overruling.superseded_by == ["c1-restatement-2015"]
    assert overruling.voided_by == [Edge("c1-restatement-2015", "c1-overruling-2010", "later_in_scope")]
    ruling = retrieved(result, "c1-ruling-2001")
    assert ruling.superseded_by == ["c1-restatement-2015"]
    assert {e.superseder for e in ruling.voided_by} == {"c1-overruling-2010", "c1-restatement-2015"}
    assert [r.status for r in result.ranked] == ["active", "superseded", "superseded"]


# --------------------------------------------------------------------------- batches
@pytest.mark.parametrize("mode", MODES)
def test_retrieve_many_returns_what_retrieve_returns(retrievers, results, demo_queries, mode):
    """One batched embedding for all queries, then the per-query path: the same records, statuses,
    edges and Stage-1 ranks as one retrieve() per query (scores within float noise of batching)."""
    batch = retrievers[mode].retrieve_many([q["query"] for q in demo_queries])
    assert len(batch) == len(demo_queries)
    for q, got in zip(demo_queries, batch):
        single = results[(mode, q["query_id"])][1].to_dict()
        many = got.to_dict()
        assert set(many["timings_ms"]) == set(single["timings_ms"])
        for a, b in zip(many["records"], single["records"], strict=True):
            if a["stage1"] is not None or b["stage1"] is not None:
                assert a["stage1"]["rank"] == b["stage1"]["rank"] and a["stage1"]["score"] == pytest.approx(b["stage1"]["score"])
                assert a["stage1"]["channels"] == pytest.approx(b["stage1"]["channels"], rel=1e-5, abs=1e-6)
            assert {**a, "stage1": None} == {**b, "stage1": None}
        assert {**many, "records": None, "timings_ms": None} == {**single, "records": None, "timings_ms": None}


def test_retrieve_many_checks_every_query_first(retrievers):
    assert retrievers["hybrid"].retrieve_many([]) == []
    with pytest.raises(ValueError, match="non-empty"):
        retrievers["hybrid"].retrieve_many(["Is lodash still vulnerable?", " "])


# --------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize("query", ["", "   \n\t", None, 42])
def test_empty_or_non_string_query_raises(retrievers, query):
    with pytest.raises(ValueError, match="non-empty"):
        retrievers["bm25"].retrieve(query)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"anchors": "sparse"}, "anchors must be"),
        ({"anchors": "BM25"}, "anchors must be"),
        ({"resolution": "latest"}, "resolution must be"),
        ({"k1": 0}, "k1"),
        ({"k1": 20, "depth": 10}, "k1"),
    ],
)
def test_bad_arguments_raise(demo_store, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ControllingAuthorityRetriever(demo_store, **kwargs)


@pytest.mark.parametrize("mode", MODES)
def test_the_result_keeps_the_fused_candidates_its_anchors_came_from(retrievers, demo_queries, demo_store, mode):
    """What the service used to fuse a second time: the result carries it, once."""
    retriever = retrievers[mode]
    for q in demo_queries:
        runs = retriever.channel_runs(q["query"])
        result = retriever.resolve_runs(q["query"], runs)
        assert result.candidates == retriever.fuse(runs), q["query_id"]
        assert 0 < len(result.candidates) <= retriever.depth
        assert [h.rank for h in result.candidates] == list(range(1, len(result.candidates) + 1))
        assert {h.doc_id for h in result.anchors} <= {h.doc_id for h in result.candidates}, q["query_id"]
        assert set(mode.replace("hybrid", "bm25 dense").split()) == {c for h in result.candidates for c in h.channel_ranks}
        assert "candidates" not in result.to_dict()  # the JSON form is unchanged
    # A result no fusion produced (a framework's anchors, resolved over any store) has none.
    q = demo_queries[0]
    framework = DictStore.of(demo_store.records.values()).resolve(demo_store.policy, q["query"], q["anchor_doc_ids"])
    assert framework.candidates == [] and framework.anchors
