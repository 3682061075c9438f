"""Permission tests: restricted anchors and superseders never leak, stale authority stays stale.

The randomized part runs the generator and checker of ``evals/permissions_fuzz.py`` (the
command line runs 1,000+ cases; here 2 corpora × 150 cases): no unreadable id, secret marker
or text in any channel's candidates, the result or the XML, and every record voided by a
record the caller may not read is still reported superseded. The hand-written cases pin the
shapes that matter: a superseder in another tenant (it voids nothing: :mod:`car_rag.trust`), a
restricted anchor with a public patch,
a hidden middle link of a three-record chain, and a caller who may read everything.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

import permissions_fuzz as pf  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag import CallerContext, CARStore, ControllingAuthorityRetriever
from car_rag.evidence import render_audit
from car_rag.records import shown_id
from car_rag.retriever import AnchorMode

MODES: tuple[AnchorMode, ...] = ("bm25", "dense", "hybrid")
ACME_SEC = CallerContext(tenant="acme", principals={"sec"})
GLOBEX_ALL = CallerContext(tenant="globex", principals={"legal", "admin"})


# ---------------------------------------------------------------------- randomized
def test_randomized_corpora_never_leak_and_keep_hidden_superseded_stale(embedder, tmp_path) -> None:
    report = pf.run_fuzz(cases=300, corpora=2, seed=20240611, embedder=embedder, workdir=tmp_path)
    assert report.violations == [], pf.format_report(report, max_violations=10)
    s = report.stats
    assert s["cases"] == 300 and all(150 <= n <= 250 for n in report.records)
    # The gate was exercised: unrestricted retrieval would have shown restricted records, the
    # channels would have ranked them, and hidden superseders occurred (alone and beside
    # visible ones).
    assert s["cases_with_hidden_records"] >= 0.5 * report.cases
    assert s["bm25_unmasked_had_unreadable"] >= 0.5 * report.cases
    assert s["dense_unfiltered_had_unreadable"] >= 0.5 * report.cases
    assert s["marker_probe_unmasked_top1"] > 0
    assert s["cases_with_hidden_superseder"] >= 0.2 * report.cases
    assert s["stage1_anchors_with_unreadable_superseder"] > 0
    assert s["records_with_unreadable_ancestor_but_readable_controller"] > 0
    assert all(s[f"mode_{m}"] > 0 for m in MODES)


def test_checker_catches_a_gate_that_is_not_applied(embedder, tmp_path, monkeypatch) -> None:
    """The checker is not vacuous: Stage 2 run without the caller is caught at once."""
    resolve = ControllingAuthorityRetriever.resolve
    monkeypatch.setattr(
        ControllingAuthorityRetriever,
        "resolve",
        lambda self, q, anchors, caller=None, **named: resolve(self, q, anchors, None, **named),
    )
    report = pf.run_fuzz(cases=30, corpora=1, seed=5, embedder=embedder, workdir=tmp_path, corpus_size=(60, 80))
    assert {"result", "xml"} <= {v.kind for v in report.violations}


# ---------------------------------------------------------------------- hand-written
def _rec(doc_id: str, doc_type: str, package: str, cve: str, day: int, text: str, **extra) -> dict:
    return {
        "doc_id": doc_id,
        "doc_type": doc_type,
        "text": f"{text} Tracking token {pf.marker_for(doc_id)}.",
        "scope": {"package": package, "cve_id": cve},
        "published_at": f"2024-{1 + day // 28:02d}-{1 + day % 28:02d}",
        **extra,
    }


CHAINS = [
    # A: the patch belongs to another tenant: it may not void a public record.
    _rec("perm-a-disclosure", "vulnerability_disclosure", "lodash", "CVE-2024-1001", 1,
         "Prototype pollution in the lodash merge function lets attackers modify object prototypes."),
    _rec("perm-a-patch", "patch_release", "lodash", "CVE-2024-1001", 30,
         "Release lodash 4.17.22 fixes the prototype pollution in the merge function.",
         version="4.17.22", tenant="globex"),
    # B: the disclosure is restricted to legal, the patch is public.
    _rec("perm-b-disclosure", "vulnerability_disclosure", "axios", "CVE-2024-2002", 2,
         "Server-side request forgery in the axios HTTP client reaches internal services.",
         allowed_principals=["legal"]),
    _rec("perm-b-patch", "patch_release", "axios", "CVE-2024-2002", 40,
         "Release axios 1.7.4 fixes the server-side request forgery in the HTTP client.", version="1.7.4"),
    # C: disclosure ⊳ first patch (hidden: admins only) ⊳ final patch (public).
    _rec("perm-c-disclosure", "vulnerability_disclosure", "node-tar", "CVE-2024-3003", 3,
         "Path traversal in the node-tar archive extractor writes files outside the target directory."),
    _rec("perm-c-patch1", "patch_release", "node-tar", "CVE-2024-3003", 50,
         "Release node-tar 6.2.1 partly fixes the path traversal in the archive extractor.",
         version="6.2.1", allowed_principals=["admin"]),
    _rec("perm-c-patch2", "patch_release", "node-tar", "CVE-2024-3003", 90,
         "Release node-tar 6.2.2 completes the path traversal fix in the archive extractor.", version="6.2.2"),
]  # fmt: skip
QUERIES = {
    "a": "lodash prototype pollution merge function",
    "b": "axios server-side request forgery HTTP client CVE-2024-2002",
    "c": "node-tar path traversal archive extractor",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    store = CARStore.open(tmp_path_factory.mktemp("perm-store"), "security-advisory", embedder=embedder)
    report = store.ingest(CHAINS, progress=False)
    assert report.errors == [] and len(report.added) == len(CHAINS)
    yield store
    store.close()


@pytest.fixture(scope="module")
def retrievers(store):
    return {mode: ControllingAuthorityRetriever(store, anchors=mode, k1=5) for mode in MODES}


def _unreadable(store: CARStore, caller: CallerContext) -> set[str]:
    """The doc_ids (as their writers gave them: what results show) of the records ``caller`` may not read."""
    return {shown_id(d) for d, r in store.records.items() if not caller.can_read(r)}


def _assert_no_leak(store: CARStore, caller: CallerContext, xml: str, result) -> None:
    unreadable = _unreadable(store, caller)
    texts = {shown_id(d): r.text for d, r in store.records.items()}
    assert pf.unreadable_leaks(xml, unreadable, texts) == []
    assert not set(result.doc_ids()) & unreadable
    for d in unreadable:  # the fixed ids are not in ID_RE's pattern: look for them directly
        assert d not in xml and pf.marker_for(d) not in xml and texts[d] not in xml


def _packet(xml: str, doc_id: str) -> ET.Element:
    (el,) = [p for p in ET.fromstring(xml).iter("evidence-packet") if p.get("doc-id") == doc_id]
    return el


@pytest.mark.parametrize("mode", MODES)
def test_superseder_in_another_tenant_voids_nothing_and_is_never_named(store, retrievers, mode) -> None:
    result = retrievers[mode].retrieve(QUERIES["a"], caller=ACME_SEC)
    disclosure = result.get("perm-a-disclosure")
    assert disclosure is not None and disclosure.stage1 is not None
    assert disclosure.status == "active" and not disclosure.hidden_superseder
    assert disclosure.superseded_by == disclosure.voided_by == disclosure.disputed_by == []
    assert result.get("perm-a-patch") is None
    xml = render_audit(result, policy=store.policy)
    _assert_no_leak(store, ACME_SEC, xml, result)
    el = _packet(xml, "perm-a-disclosure")
    assert el.get("status") == "active" and el.findall("superseded-by") == []
    assert "4.17.22" not in xml  # not even the other tenant's version label


@pytest.mark.parametrize("mode", MODES)
def test_restricted_anchor_is_absent_and_its_public_patch_active(store, retrievers, mode) -> None:
    result = retrievers[mode].retrieve(QUERIES["b"], caller=ACME_SEC)
    assert result.get("perm-b-disclosure") is None
    patch = result.get("perm-b-patch")
    assert patch is not None and patch.status == "active" and not patch.hidden_superseder
    assert patch.voids == []  # the disclosure it fixes is not named either
    xml = render_audit(result, policy=store.policy)
    _assert_no_leak(store, ACME_SEC, xml, result)
    assert _packet(xml, "perm-b-patch").get("status") == "active"
    # A reader in legal sees the disclosure, superseded by the patch.
    legal = CallerContext(tenant="acme", principals={"legal"})
    seen = retrievers[mode].retrieve(QUERIES["b"], caller=legal)
    assert seen.get("perm-b-disclosure").status == "superseded"
    assert seen.get("perm-b-disclosure").superseded_by == ["perm-b-patch"]


@pytest.mark.parametrize("mode", MODES)
def test_hidden_middle_of_three_chain_disclosure_superseded_by_final_patch(store, retrievers, mode) -> None:
    result = retrievers[mode].retrieve(QUERIES["c"], caller=ACME_SEC)
    assert result.get("perm-c-patch1") is None
    disclosure, final = result.get("perm-c-disclosure"), result.get("perm-c-patch2")
    assert disclosure is not None and final is not None
    assert final.status == "active" and not final.hidden_superseder
    assert disclosure.status == "superseded"
    assert disclosure.superseded_by == ["perm-c-patch2"]
    assert [e.superseder for e in disclosure.voided_by] == ["perm-c-patch2"]
    assert not disclosure.hidden_superseder  # a visible record controls it
    xml = render_audit(result, policy=store.policy)
    _assert_no_leak(store, ACME_SEC, xml, result)
    assert "6.2.1" not in xml
    pointers = [c.attrib for c in _packet(xml, "perm-c-disclosure").findall("superseded-by")]
    assert [(p.get("doc-id"), p.get("controlling"), p.get("hidden")) for p in pointers] == [("perm-c-patch2", "true", None)]


@pytest.mark.parametrize("mode", MODES)
def test_caller_with_matching_principal_sees_everything(store, retrievers, mode) -> None:
    assert _unreadable(store, GLOBEX_ALL) == set()
    for query in QUERIES.values():
        seen = retrievers[mode].retrieve(query, caller=GLOBEX_ALL)
        everything = retrievers[mode].retrieve(query)
        assert [(r.doc_id, r.status, r.superseded_by) for r in seen] == [
            (r.doc_id, r.status, r.superseded_by) for r in everything
        ]
        assert not any(r.hidden_superseder for r in seen)
    result = retrievers[mode].retrieve(QUERIES["c"], caller=GLOBEX_ALL)
    assert result.get("perm-c-patch1").status == "superseded"
    assert result.get("perm-c-disclosure").superseded_by == ["perm-c-patch2"]
    assert "perm-c-patch1" in render_audit(result, policy=store.policy)


def test_governance_change_on_reingest_reaches_every_channel(tmp_path, embedder) -> None:
    """A record made restricted by a re-ingest vanishes for a retriever (and its mask cache)
    built before the change, in every channel. (Its principals change: a record of another tenant
    of that doc_id would be a record of its own, beside it.)"""
    store = CARStore.open(tmp_path / "s", "security-advisory", embedder=embedder)
    try:
        store.ingest(CHAINS[:2], progress=False)
        retrievers = {mode: ControllingAuthorityRetriever(store, anchors=mode, k1=5) for mode in MODES}
        for retriever in retrievers.values():
            assert retriever.retrieve(QUERIES["a"], caller=ACME_SEC).get("perm-a-disclosure") is not None
        store.ingest([{**CHAINS[0], "allowed_principals": ["legal"]}], progress=False)
        for retriever in retrievers.values():
            result = retriever.retrieve(QUERIES["a"], caller=ACME_SEC)
            assert result.doc_ids() == []
            assert retriever.retrieve(QUERIES["a"], caller=GLOBEX_ALL).get("perm-a-disclosure") is not None
        vector = store.embedder.encode([QUERIES["a"]])[0]
        assert store.dense.search(vector, 10, where=ACME_SEC.chroma_where()) == []
    finally:
        store.close()


def test_restricted_records_do_not_crowd_readable_ones_out_of_a_scope_lookup(tmp_path, embedder) -> None:
    cve = "CVE-2024-9999"
    visible = [
        _rec(f"crowd-public-{i}", "vulnerability_disclosure", f"pkg-public-{i}", cve, i,
             f"Heap buffer overflow in the image decoder of pkg-public-{i}.")
        for i in range(3)
    ]  # fmt: skip
    restricted = [
        _rec(f"crowd-globex-{i}", "vulnerability_disclosure", f"pkg-globex-{i}", cve, 30 + i,
             f"Heap buffer overflow in the image decoder of pkg-globex-{i}.", tenant="globex")
        for i in range(22)
    ]  # fmt: skip
    store = CARStore.open(tmp_path / "s", "security-advisory", embedder=embedder)
    try:
        store.ingest(visible + restricted, progress=False)
        retriever = ControllingAuthorityRetriever(store, anchors="bm25", k1=1, scope_lookup_limit=20)
        result = retriever.retrieve(f"status of {cve}", caller=ACME_SEC)
        assert not set(result.doc_ids()) & {r["doc_id"] for r in restricted}
        # Every readable record of the named CVE is admitted (3 fit easily under the limit of 20).
        assert set(result.doc_ids()) == {r["doc_id"] for r in visible}
    finally:
        store.close()
