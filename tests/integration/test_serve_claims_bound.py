"""The bound on untrusted claims through a real `car-rag serve` (uvicorn on loopback, a real
store: MiniLM, embedded Chroma): a write claiming more records than ``trust.claims_per_write``
keeps that many, and its answer warns with the count of the claims over records its key may
read, never over ones it may not (their number would tell it they exist)."""

from __future__ import annotations

from typing import Any

import httpx

from car_rag import CARStore
from car_rag.serve.keys import ApiKey, ApiKeys, hash_key
from car_rag.serve.service import Service
from car_rag.trust import Trust
from car_rag_evals.servers import serving

KEYS = ApiKeys(
    {hash_key("k-acme"): ApiKey(name="acme-writer", sha256=hash_key("k-acme"), tenant="acme", write=True, publisher=False)}
)


def _record(doc_id: str, doc_type: str, **extra: Any) -> dict[str, Any]:
    return {"doc_id": doc_id, "doc_type": doc_type, "text": f"{doc_id} memo", "published_at": "2025-01-01", **extra}


def _claims(store: CARStore, superseder: str) -> int:
    return sum(1 for e in store.graph.disputed_edges() if e.untrusted and e.superseder == superseder)


def test_a_write_claiming_more_than_the_cap_keeps_the_cap_and_warns_with_a_count_of_readable_ones(
    tmp_path, security_policy, embedder
):
    policy = security_policy.model_copy(update={"trust": Trust(claims_per_write=3)})
    public = [_record(f"pub-{n}", "note") for n in range(5)]
    scope = {"package": "zephyr", "cve_id": "CVE-2099-40000"}
    hidden = [_record(f"globex-{n}", "vulnerability_disclosure", tenant="globex", scope=scope) for n in range(5)]
    with CARStore.open(tmp_path / "store", policy, embedder=embedder) as store:
        assert store.ingest(public + hidden, progress=False).errors == []
        with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
            headers = {"Authorization": "Bearer k-acme"}
            over_public = _record("acme-1", "note", tenant="acme", supersedes=[r["doc_id"] for r in public])
            # doc_ids are namespaced: acme can name no globex record, but its patch's rule matches them.
            over_globex = _record("acme-2", "patch_release", tenant="acme", scope=scope, published_at="2025-02-01")
            answers = [httpx.post(f"{url}/records", json=r, headers=headers, timeout=60) for r in (over_public, over_globex)]
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        warned = [w for w in answers[0].json()["warnings"] if "claims to void" in w]
        said = "record 1 ('acme-1') claims to void 5 records it is not trusted to; only 3 are kept as claims"
        assert warned == [said + " (they void nothing either way)"]
        assert not any("claims to void" in w for w in answers[1].json()["warnings"]) and "globex" not in answers[1].text
        assert _claims(store, store.key("acme-1", "acme")) == 3 and _claims(store, store.key("acme-2", "acme")) == 3
        assert store.graph.edges() == []
