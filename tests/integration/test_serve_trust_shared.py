"""Issue 32's attacks on integrity through `car-rag serve --workers 2` over a store shared through a
real PostgreSQL (vectors in pgvector), all on loopback: acme's writes land on one worker, globex's
reads on either, and every worker builds its graph from the change feed, so each applies the trust
model itself. The single-process cases, one attack per test, are in ``test_serve_trust.py``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_serve_trust import disclosure, note, patch, scope

import serve_trust_fuzz as trust_fuzz  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag import CARStore
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag.serve.keys import hash_key
from car_rag_evals.servers import car_rag_serve
from servers import wait_for

KEYS = {
    "k-acme": {"name": "acme-writer", "tenant": "acme", "write": True},
    "k-globex": {"name": "globex-writer", "tenant": "globex", "write": True},
    "k-owner": {"name": "owner", "write": True},
    "k-nvd": {"name": "nvd", "write": True, "publisher": True},
}


@pytest.fixture(scope="module")
def pg(postgres: ThrowawayPostgres) -> str:
    """A database of the module's own on the session's PostgreSQL (its URL)."""
    return postgres.new_database()


@contextmanager
def workers(url: str, schema: str, folder: Path) -> Iterator[str]:
    """`car-rag serve --workers 2 --api-keys` over the shared store, both workers ready (20 answers
    to /readyz in a row); stopped at the end."""
    keys = folder / "keys.json"
    keys.write_text(json.dumps({"keys": [{**entry, "sha256": hash_key(k)} for k, entry in KEYS.items()]}))
    options = ["--store", str(folder / "cache"), "--authority-schema", schema, "--workers", "2", "--anchors", "bm25"]
    with car_rag_serve(folder, *options, "--api-keys", str(keys), env={"CAR_RAG_AUTHORITY_URL": url}) as base:
        # Ready once one worker is: the other may still be loading its retriever (a 503 to a read).
        wait_for(lambda: all(ready(base) for _ in range(20)), "both workers answer /readyz", 120, 0.1)
        yield base


def ready(base: str) -> bool:
    return httpx.get(f"{base}/readyz", timeout=30).status_code == 200


def post(base: str, key: str, body: Any) -> httpx.Response:
    got = httpx.post(f"{base}/records", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert got.status_code == 200, got.text
    return got


def read(base: str, n: int, k: int) -> dict[str, dict[str, Any]]:
    got = httpx.post(
        f"{base}/retrieve",
        json={"query": f"is the archive flaw in {scope(n)['package']} fixed?", "k": k},
        headers={"Authorization": "Bearer k-globex"},
        timeout=60,
    )
    assert got.status_code == 200, got.text
    return {r["doc_id"]: r for r in got.json()["reranked"]}


def statuses(shown: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Each record's status as shown (not its rank: globex's and public writes join the ranking)."""
    return {d: (r["status"], r["superseded_by"], r["voided_by"], r["hidden_superseder"]) for d, r in shown.items()}


def caught_up(base: str) -> bool:
    """Every worker answering /readyz has applied the same newest change (20 answers in a row agree;
    the head is part of the detail a key is needed for)."""
    heads = {
        httpx.get(f"{base}/readyz", headers={"Authorization": "Bearer k-globex"}, timeout=30).json()["head"] for _ in range(20)
    }
    return len(heads) == 1


def test_attacks_across_two_workers_change_nothing_another_tenant_reads(tmp_path, pg, security_policy, embedder):
    schema = f"t_{uuid.uuid4().hex[:12]}"
    seeded = [disclosure(n) for n in range(10)] + [disclosure(n, tenant="globex") for n in range(10, 14)]
    seeded.append(patch(10, "p10-globex", tenant="globex"))
    with CARStore.open(
        tmp_path / "build", security_policy, embedder=embedder, authority_url=pg, authority_schema=schema, vector_store="pgvector"
    ) as store:
        assert store.ingest(seeded, progress=False).errors == []
    with workers(pg, schema, tmp_path) as base:
        before = [statuses(read(base, n, 20)) for n in range(13)]
        public = [disclosure(n)["doc_id"] for n in range(10)]
        post(base, "k-acme", note("acme-1", ["p10-globex"], tenant="acme"))  # an explicit edge
        post(base, "k-acme", note("acme-2", ["p11-globex"], tenant="acme"))  # a waiting edge
        post(base, "k-acme", patch(12, "far-acme", "9999-12-31", tenant="acme"))  # a far-future date
        post(base, "k-owner", patch(12, "far-public", "9999-12-31"))  # the same, public and no publisher
        post(base, "k-acme", note("acme-all", public, tenant="acme"))  # every public id at once
        arrived = post(base, "k-globex", patch(11, "p11-globex", tenant="globex"))
        post(base, "k-nvd", patch(13, "p13-nvd"))  # the control: a publisher's patch voids globex's
        wait_for(lambda: caught_up(base), "both workers applied every write", 60, 0.1)
        for _ in range(3):  # each read thrice: both workers answer some
            after = [statuses(read(base, n, 20)) for n in range(13)]
            for was, now in zip(before, after):  # but what globex's own and the publisher's patches void
                kept = (set(was) & set(now)) - {"d11-globex", "d13-globex"}
                assert {d: now[d] for d in kept} == {d: was[d] for d in kept}
                assert set(was) & set(now)
            assert after[10]["p10-globex"] == ("active", [], [], False)  # the explicit edge's target
            p12 = read(base, 12, 20)
            assert p12["d12-globex"]["superseded_by"] == [] and p12["d12-globex"]["status"] == "active"
            assert "far-acme" not in p12 and p12["d12-globex"]["disputed_by"] == [
                {"doc_id": "far-public", "rule": "patch_fixes_disclosure", "untrusted": "public_not_publisher"}
            ]
            waited = read(base, 11, 20)
            assert waited["p11-globex"]["status"] == "active" and not waited["p11-globex"]["hidden_superseder"]
            assert waited["d11-globex"]["superseded_by"] == ["p11-globex"]
            assert read(base, 13, 20)["d13-globex"]["superseded_by"] == ["p13-nvd"]
    assert arrived.json()["newly_superseded"] == ["d11-globex"]


def test_the_adversarial_fuzz_across_two_servers_finds_no_integrity_change_and_finds_them_when_every_edge_is_trusted(
    tmp_path, embedder
):
    """``evals/serve_trust_fuzz.py --shared`` at a small size (the command runs 5,000 writes): the
    writes alternate between two `car-rag serve` processes over one PostgreSQL store, and every
    reader's answers from both are checked; with every edge trusted in the servers too, as before
    issue 32, the same check must find changes in their answers."""
    report = trust_fuzz.run_fuzz(100, workdir=tmp_path / "trusted", embedder=embedder, shared=True)
    assert report.changes == [] and report.leaks == [] and report.servers == 2
    assert report.claims >= 50 and min(report.answers.values()) == 160 and report.answers_unordered == 0
    leaky = trust_fuzz.run_fuzz(100, workdir=tmp_path / "leaky", embedder=embedder, shared=True, trust_everything=True)
    assert leaky.answer_changes >= 50


def test_two_tenants_write_one_doc_id_through_two_workers_and_each_reads_its_own(tmp_path, pg, security_policy, embedder):
    """doc_ids namespaced per tenant over the shared store: globex's write of an id acme took is
    stored beside acme's (no 403), each worker applies both from the change feed, and each tenant
    is shown its own record under that id, never the other's nor the key the store holds it under."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with CARStore.open(
        tmp_path / "build", security_policy, embedder=embedder, authority_url=pg, authority_schema=schema, vector_store="pgvector"
    ) as store:
        assert store.ingest([disclosure(n) for n in range(10)], progress=False).errors == []
    with workers(pg, schema, tmp_path) as base:
        for tenant in ("acme", "globex"):
            got = post(base, f"k-{tenant}", [disclosure(5, tenant=tenant), patch(5, "shared-id", tenant=tenant)])
            assert got.json()["added"] == [f"d5-{tenant}", "shared-id"] and "\\u001f" not in got.text
        wait_for(lambda: caught_up(base), "both workers applied every write", 60, 0.1)
        for tenant in ("acme", "globex", "acme", "globex"):  # each twice: both workers answer some
            got = httpx.post(
                f"{base}/retrieve",
                json={"query": f"is the archive flaw in {scope(5)['package']} fixed?", "k": 20, "with_text": True},
                headers={"Authorization": f"Bearer k-{tenant}"},
                timeout=60,
            )
            shown = {r["doc_id"]: r for r in got.json()["reranked"]}
            assert shown[f"d5-{tenant}"]["superseded_by"] == ["shared-id"] and "\\u001f" not in got.text
            assert not {"d5-acme", "d5-globex"} - {f"d5-{tenant}"} & set(shown)
