"""doc_ids namespaced per tenant (issue 32 item 3), on a real store (MiniLM, embedded Chroma, the
SQLite log) and through a real `car-rag serve`: two tenants may hold one doc_id, neither sees or
blocks the other's, a tenant's explicit edges name its own record of an id first, then a public
one, and no reader is shown the key the store holds a tenant's record under. A store written before
the namespacing opens and answers the same (``key_records`` made the identity: what earlier
versions stored). Over PostgreSQL: ``test_serve_trust_shared.py``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from test_serve_trust import KEYS, disclosure, note, patch, post, read, scope

from car_rag import CallerContext, CARStore
from car_rag.evidence.audit import render_xml
from car_rag.evidence.plain import render_plain
from car_rag.evidence.reader import render_reader
from car_rag.records import TENANT_SEPARATOR
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.serve.service import Service
from car_rag.store import ingest as ingest_module
from car_rag_evals.servers import serving

ACME, GLOBEX = CallerContext("acme"), CallerContext("globex")


def chain(tenant: str | None, n: int = 3) -> list[dict[str, Any]]:
    """A disclosure ``d3`` and its patch ``p3`` of ``tenant`` (both doc_ids the same for every tenant)."""
    owner = {} if tenant is None else {"tenant": tenant}
    return [{**disclosure(n, **owner), "doc_id": "d3"}, patch(n, "p3", **owner)]


def answers(store: CARStore, caller: CallerContext) -> list[tuple[Any, ...]]:
    result = ControllingAuthorityRetriever(store, anchors="bm25").retrieve(
        f"is the archive flaw in {scope(3)['package']} fixed?", caller
    )
    return [(r.doc_id, r.record.tenant, r.status, r.superseded_by, r.hidden_superseder) for r in result]


def test_two_tenants_hold_one_doc_id_and_each_reads_its_own(tmp_path, security_policy, embedder):
    with CARStore.open(tmp_path / "store", security_policy, embedder=embedder) as store:
        report = store.ingest(chain("acme") + chain("globex"), progress=False)
        assert report.errors == [] and len(store) == 4
        assert store.get("d3", "acme").tenant == "acme" and store.get("d3", "globex").tenant == "globex"
        with pytest.raises(KeyError, match="no record 'd3' in store"):
            store.get("d3")  # no public one
        for caller in (ACME, GLOBEX):
            assert answers(store, caller) == [
                ("p3", caller.tenant, "active", [], False),
                ("d3", caller.tenant, "superseded", ["p3"], False),
            ]
        result = ControllingAuthorityRetriever(store, anchors="bm25").retrieve("archive flaw fixed", ACME)
        for shown in (render_plain(result), render_reader(result), render_xml(result), json.dumps(result.to_dict())):
            assert TENANT_SEPARATOR not in shown and "\\u001f" not in shown


def test_a_tenants_explicit_edge_names_its_own_record_then_a_public_one_never_another_tenants(
    tmp_path, security_policy, embedder
):
    with CARStore.open(tmp_path / "store", security_policy, embedder=embedder) as store:
        assert store.ingest([*chain("globex"), *chain(None)], progress=False).errors == []
        # acme has no d3: its edge names the public one, a claim that voids nothing (tenant_over_public)
        assert store.ingest([note("acme-memo", ["d3"], tenant="acme")], progress=False).new_edges == []
        claims = {(e.superseder, e.rule, e.untrusted) for e in store.graph.disputes("d3")}
        assert (store.key("acme-memo", "acme"), "explicit", "tenant_over_public") in claims
        claimed = [e.superseder for e in store.graph.disputes(store.key("d3", "globex"))]
        assert claimed == ["p3"]  # the public patch's rule claim (public_not_publisher); acme's memo never
        # an id nobody holds waits for acme's own record of it, and voids it when it arrives
        assert store.ingest([note("acme-memo-2", ["p9"], tenant="acme")], progress=False).errors == []
        assert store.ingest([patch(9, "p9", tenant="globex")], progress=False).new_edges == []
        arrived = store.ingest([patch(9, "p9", tenant="acme")], progress=False)
        assert [(e.superseder, e.target) for e in arrived.new_edges] == [
            (store.key("acme-memo-2", "acme"), store.key("p9", "acme"))
        ]
        # with a d3 of its own, acme's edge names that one
        store.ingest(chain("acme")[:1], progress=False)
        assert store.ingest([note("acme-memo-3", ["d3"], tenant="acme")], progress=False).new_edges[0].target == store.key(
            "d3", "acme"
        )


def test_an_id_holding_the_separator_is_refused_naming_the_field(tmp_path, security_policy, embedder):
    with CARStore.open(tmp_path / "store", security_policy, embedder=embedder) as store:
        forged = {**patch(3, "p3"), "doc_id": f"globex{TENANT_SEPARATOR}p3", "tenant": "acme"}
        reaching = {**patch(3, "p4", tenant="acme"), "supersedes": [f"globex{TENANT_SEPARATOR}d3"]}
        report = store.ingest([forged, reaching], progress=False)
        assert [(e.line, e.field) for e in report.errors] == [(1, "doc_id"), (2, "supersedes")]
        assert all("U+001F" in e.message for e in report.errors) and len(store) == 0


def test_a_store_written_before_the_namespacing_opens_and_answers_the_same(tmp_path, security_policy, embedder, monkeypatch):
    """Written with each tenant's records under their bare doc_ids (unique then), as earlier versions
    stored them: it opens unchanged and answers the same; a tenant rewriting its record replaces it
    under its old key, and another tenant may now write a record of that doc_id."""
    path = tmp_path / "store"
    records = [*chain("acme"), {**disclosure(4, tenant="globex"), "doc_id": "d4"}]
    with monkeypatch.context() as old:
        old.setattr(ingest_module, "key_records", lambda records, held: list(records))
        with CARStore.open(path, security_policy, embedder=embedder) as store:
            assert store.ingest(records, progress=False).errors == []
            assert sorted(store.records) == ["d3", "d4", "p3"]
            before = answers(store, ACME), answers(store, GLOBEX)
    with CARStore.open(path, embedder=embedder) as store:
        assert sorted(store.records) == ["d3", "d4", "p3"] and (answers(store, ACME), answers(store, GLOBEX)) == before
        rewritten = store.ingest([{**chain("acme")[1], "text": "archive paths are normalised (rewritten)"}], progress=False)
        assert rewritten.updated == ["p3"] and rewritten.added == [] and len(store) == 3
        assert store.get("p3", "acme").text.endswith("(rewritten)")
        taken = store.ingest(chain("globex"), progress=False)  # globex's own d3 and p3 beside acme's
        assert taken.errors == [] and len(store) == 5
        for caller in (ACME, GLOBEX):
            shown = [(d, t, s) for d, t, s, *_ in answers(store, caller) if d in ("p3", "d3")]
            assert shown == [("p3", caller.tenant, "active"), ("d3", caller.tenant, "superseded")]


def test_through_the_server_a_taken_id_neither_leaks_nor_blocks_another_tenants_write(tmp_path, security_policy, embedder):
    with CARStore.open(tmp_path / "store", security_policy, embedder=embedder) as store:
        with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
            first = post(url, "k-acme", [disclosure(5, tenant="acme"), patch(5, "shared-id", tenant="acme")])
            second = post(url, "k-globex", [disclosure(5, tenant="globex"), patch(5, "shared-id", tenant="globex")])
            again = post(url, "k-globex", patch(5, "shared-id", "2025-03-01", tenant="globex"))
            acme, globex = read(url, "k-acme", 5), read(url, "k-globex", 5)
            bodies = [first.text, second.text, again.text]
            forged = post(url, "k-acme", {**patch(5, "x", tenant="acme"), "doc_id": f"globex{TENANT_SEPARATOR}shared-id"})
    assert [r.status_code for r in (first, second, again)] == [200, 200, 200]
    assert second.json()["added"] == ["d5-globex", "shared-id"] and second.json()["newly_superseded"] == ["d5-globex"]
    assert again.json()["updated"] == ["shared-id"]
    assert acme["d5-acme"]["superseded_by"] == ["shared-id"] and "d5-globex" not in acme
    assert globex["d5-globex"]["superseded_by"] == ["shared-id"] and "d5-acme" not in globex
    assert all(TENANT_SEPARATOR not in b and "\\u001f" not in b for b in bodies)
    assert forged.status_code == 422 and "U+001F" in forged.text
    assert store.get("shared-id", "acme").published_at != store.get("shared-id", "globex").published_at


def test_a_cycle_refused_is_told_by_the_writers_own_ids(tmp_path, security_policy, embedder):
    with CARStore.open(tmp_path / "store", security_policy, embedder=embedder) as store:
        with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
            assert post(url, "k-acme", note("a", ["b"], tenant="acme")).status_code == 200
            refused = httpx.post(
                f"{url}/records",
                json=note("b", ["a"], tenant="acme"),
                headers={"Authorization": "Bearer k-acme"},
                timeout=60,
            )
    assert refused.status_code == 422, refused.text
    problem = refused.json()["errors"][0]
    assert problem["doc_id"] == "b" and problem["message"].startswith("record 'b' would close a supersession cycle b ⊳ a")
    assert TENANT_SEPARATOR not in refused.text and "\\u001f" not in refused.text and "acme" not in refused.text
