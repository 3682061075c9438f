"""Issue 32's attacks on integrity, each through a real `car-rag serve` (uvicorn on loopback, a
real store: MiniLM, embedded Chroma, BM25 anchors): one tenant's writer key must not change what
another tenant reads. Each attack is run against globex's reads before and after acme's writes;
a publisher key's public patch is the control that voiding across tenants still works where it
is trusted (:mod:`car_rag.trust`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import serve_trust_fuzz as trust_fuzz  # evals/ is on pytest's pythonpath (pyproject.toml)
from car_rag import CARStore
from car_rag.serve.keys import ApiKey, ApiKeys, hash_key
from car_rag.serve.service import Service
from car_rag.trust import Trust
from car_rag_evals.servers import car_rag_serve, serving

KEYS = ApiKeys(
    {
        hash_key(key): ApiKey(name=name, sha256=hash_key(key), tenant=tenant, write=True, publisher=publisher)
        for key, name, tenant, publisher in (
            ("k-acme", "acme-writer", "acme", False),
            ("k-globex", "globex-writer", "globex", False),
            ("k-owner", "owner", None, False),
            ("k-nvd", "nvd", None, True),
        )
    }
)
WORDS = ["zephyr", "quorra", "malbec", "tivoli", "loranth", "brisket", "marzipan", "dixieland", "ponderosa", "sukiyaki"]
"""One package name per question, shared by no other text."""


def scope(n: int) -> dict[str, str]:
    return {"package": WORDS[n % 10] + str(n // 10 or ""), "cve_id": f"CVE-2099-4{n:04d}"}


def disclosure(n: int, **extra: Any) -> dict[str, Any]:
    package = scope(n)["package"]
    return {
        "doc_id": f"d{n}-{extra.get('tenant', 'public')}",
        "doc_type": "vulnerability_disclosure",
        "scope": scope(n),
        "text": f"{package}: CVE-2099-4{n:04d} lets a crafted archive write outside the target folder.",
        "published_at": "2025-01-01",
        **extra,
    }


def patch(n: int, doc_id: str, published_at: str = "2025-02-01", **extra: Any) -> dict[str, Any]:
    package = scope(n)["package"]
    return {
        "doc_id": doc_id,
        "doc_type": "patch_release",
        "scope": scope(n),
        "text": f"{package} 1.0.{n}: archive paths are normalised before extraction.",
        "published_at": published_at,
        **extra,
    }


def note(doc_id: str, supersedes: list[str], **extra: Any) -> dict[str, Any]:
    """An acme record that only claims: words no question asks, explicit edges to ``supersedes``."""
    return {"doc_id": doc_id, "doc_type": "note", "text": "quarterly memo", "supersedes": supersedes, **extra}


def open_store(path, policy, embedder) -> CARStore:
    """10 public disclosures (the questions' subjects), globex's disclosures 10-13 with a patch of 10."""
    store = CARStore.open(path, policy, embedder=embedder)
    seeded = [disclosure(n) for n in range(10)] + [disclosure(n, tenant="globex") for n in range(10, 14)]
    seeded.append(patch(10, "p10-globex", tenant="globex"))
    assert store.ingest(seeded, progress=False).errors == []
    return store


@pytest.fixture
def store(tmp_path, security_policy, embedder):
    with open_store(tmp_path / "store", security_policy, embedder) as opened:
        yield opened


def post(url: str, key: str, body: Any) -> httpx.Response:
    return httpx.post(f"{url}/records", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def read(url: str, key: str, n: int, k: int = 20) -> dict[str, dict[str, Any]]:
    """What ``key`` is shown for the question about package ``n`` (the top ``k``): each record's place and status."""
    got = httpx.post(
        f"{url}/retrieve",
        json={"query": f"is the archive flaw in {scope(n)['package']} fixed?", "k": k},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert got.status_code == 200, got.text
    return {r["doc_id"]: r for r in got.json()["reranked"]}


def integrity(shown: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["rank"], d, r["status"], r["superseded_by"], r["hidden_superseder"]) for d, r in shown.items()]


def test_an_explicit_edge_to_another_tenants_patch_voids_nothing(store):
    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        before = read(url, "k-globex", 10)
        answer = post(url, "k-acme", note("acme-1", ["p10-globex"], tenant="acme"))
        after = read(url, "k-globex", 10)
    assert answer.status_code == 200 and answer.json()["newly_superseded"] == [] and "p10-globex" not in answer.text
    assert after["p10-globex"]["status"] == "active" and not after["p10-globex"]["hidden_superseder"]
    assert integrity(after) == integrity(before)


def test_a_waiting_edge_to_an_id_not_yet_written_voids_nothing_when_it_arrives(store):
    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        assert post(url, "k-acme", note("acme-1", ["p11-globex"], tenant="acme")).status_code == 200
        arrived = post(url, "k-globex", patch(11, "p11-globex", tenant="globex"))
        shown = read(url, "k-globex", 11)
    assert arrived.status_code == 200 and arrived.json()["newly_superseded"] == ["d11-globex"]
    assert shown["p11-globex"]["status"] == "active" and not shown["p11-globex"]["hidden_superseder"]
    assert shown["d11-globex"]["superseded_by"] == ["p11-globex"]


@pytest.mark.parametrize("writer", ["k-acme", "k-owner"])
def test_a_far_future_patch_in_another_tenants_scope_voids_nothing(store, writer):
    """From another tenant, or a public record from no publisher: dated 9999-12-31, it would void
    globex's disclosure and every later patch."""
    far = patch(12, "far-future", "9999-12-31", **({"tenant": "acme"} if writer == "k-acme" else {}))
    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        assert post(url, writer, far).status_code == 200
        assert post(url, "k-globex", patch(12, "p12-globex", "2025-06-01", tenant="globex")).status_code == 200
        shown = read(url, "k-globex", 12)
    assert shown["p12-globex"]["status"] == "active" and not shown["p12-globex"]["hidden_superseder"]
    assert shown["d12-globex"]["superseded_by"] == ["p12-globex"]
    # globex reads a public claimant (and is told why it voids nothing), never acme's
    claims = [] if writer == "k-acme" else [{"doc_id": "far-future", "rule": "later_patch", "untrusted": "public_not_publisher"}]
    assert shown["p12-globex"]["disputed_by"] == claims


def test_a_publishers_patch_does_void_a_tenants_record(store):
    """The control: voiding across tenants still works where the trust model trusts the superseder."""
    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        stamped = post(url, "k-nvd", patch(13, "p13-nvd"))
        shown = read(url, "k-globex", 13)
        named = post(url, "k-owner", patch(13, "p13-owner", publisher="nvd"))
    assert stamped.status_code == 200 and store.get("p13-nvd").publisher == "nvd"
    assert shown["d13-globex"]["superseded_by"] == ["p13-nvd"]
    assert named.status_code == 403 and "only a publisher key" in named.json()["detail"]
    assert "p13-owner" not in store.records


def test_one_request_claiming_every_public_id_changes_no_other_tenants_top_5(store):
    public = [disclosure(n)["doc_id"] for n in range(10)]
    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        before = [read(url, "k-globex", n, k=5) for n in range(10)]
        answer = post(url, "k-acme", note("acme-all", public, tenant="acme"))
        after = [read(url, "k-globex", n, k=5) for n in range(10)]
        claimed = read(url, "k-acme", 0)
    assert answer.status_code == 200 and answer.json()["newly_superseded"] == []
    assert [integrity(a) for a in after] == [integrity(b) for b in before]
    active = [sum(r["status"] == "active" for r in shown.values()) for shown in after]
    assert sum(active) >= 40 and active == [sum(r["status"] == "active" for r in shown.values()) for shown in before]
    # acme reads both: it is shown its own record's claim, with the rule it breaks, voiding nothing
    assert claimed[public[0]]["status"] == "active"
    assert claimed[public[0]]["disputed_by"] == [{"doc_id": "acme-all", "rule": "explicit", "untrusted": "tenant_over_public"}]


def test_a_writers_date_probes_learn_nothing_of_another_tenants_private_record(store):
    """One probe patch, rewritten with each month's date and read back: acme is shown the same
    whether globex's private patch exists or not, so no number of probes bisects its date
    (later_patch voids an earlier patch only: were globex's trusted, the probes dated before it
    would be superseded by a hidden record and those after it active)."""

    def probe(url: str) -> list[tuple[str, bool]]:
        seen = []
        for month in range(1, 13):
            assert post(url, "k-acme", patch(10, "probe", f"2025-{month:02d}-15", tenant="acme")).status_code == 200
            shown = read(url, "k-acme", 10)["probe"]
            seen.append((shown["status"], shown["hidden_superseder"]))
        return seen

    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        alone = probe(url)
        assert post(url, "k-globex", patch(10, "p10-globex-late", "2025-06-30", tenant="globex")).status_code == 200
        beside = probe(url)
    assert alone == beside == [("active", False)] * 12


def test_a_writers_id_probes_learn_nothing_of_another_tenants_waiting_edges(store):
    """globex's record names an id acme has not written: acme, writing ids one by one and reading
    each back, is shown every probe alike, so it learns no id another tenant's records name."""
    with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
        assert post(url, "k-globex", note("globex-x", ["probe-7"], tenant="globex")).status_code == 200
        seen = []
        for n in range(10):
            assert post(url, "k-acme", patch(10, f"probe-{n}", f"2025-03-{n + 1:02d}", tenant="acme")).status_code == 200
            shown = read(url, "k-acme", 10)[f"probe-{n}"]
            seen.append((shown["hidden_superseder"], shown["superseded_by"] == [], shown["disputed_by"]))
    assert seen == [(False, True, [])] * 10
    # globex's edge names globex's own probe-7 (doc_ids are namespaced per tenant): acme's is not even claimed
    assert store.graph.disputes(store.key("probe-7", "acme")) == []
    assert (
        store.graph.is_superseded(store.key("probe-7", "globex")) is False and store.key("probe-7", "globex") not in store.records
    )


def test_a_deployment_may_refuse_an_untrusted_write_naming_the_rule(tmp_path, security_policy, embedder):
    policy = security_policy.model_copy(update={"trust": Trust(untrusted="refuse")})
    with open_store(tmp_path / "store", policy, embedder) as store:
        with serving(Service(store, api_keys=KEYS, anchors="bm25")) as url:
            refused = post(url, "k-acme", [note("acme-ok", [], tenant="acme"), patch(12, "p12-acme", tenant="acme")])
            own = post(url, "k-globex", patch(12, "p12-globex", tenant="globex"))
        assert refused.status_code == 403, refused.text
        detail = refused.json()["detail"]
        assert "record 2 ('p12-acme')" in detail and "trust rule other_tenant" in detail and "d12-globex" not in detail
        assert store.key("acme-ok", "acme") not in store.records and store.key("p12-acme", "acme") not in store.records
        assert own.status_code == 200 and own.json()["newly_superseded"] == ["d12-globex"]


def test_the_adversarial_fuzz_finds_no_integrity_change_and_finds_them_all_when_every_edge_is_trusted(tmp_path, embedder):
    """``evals/serve_trust_fuzz.py`` at a small size (the command runs 5,000 writes), and its check
    against the fault it exists for: every edge trusted and one doc_id space for all tenants, as
    before issue 32."""
    report = trust_fuzz.run_fuzz(150, workdir=tmp_path / "trusted", embedder=embedder)
    assert report.changes == [] and report.leaks == [] and report.blocked_by_squat == 0
    assert report.claims >= 100 and min(report.kinds.values()) >= 5
    leaky = trust_fuzz.run_fuzz(150, workdir=tmp_path / "leaky", embedder=embedder, trust_everything=True)
    assert len(leaky.changes) >= 50


def _keys_file(folder, scopes: str) -> str:
    """The keys of ``KEYS`` as ``car-rag serve --api-keys`` reads them, nvd's with ``scopes``."""
    entries = []
    for hashed, key in KEYS.by_hash.items():
        entry = f'[[keys]]\nname = "{key.name}"\nsha256 = "{hashed}"\nwrite = true\n'
        entry += f'tenant = "{key.tenant}"\n' if key.tenant else ""
        entry += f"publisher = true\npublisher_scopes = {scopes}\n" if key.publisher else ""
        entries.append(entry)
    path = folder / "keys.toml"
    path.write_text("\n".join(entries))
    path.chmod(0o600)
    return str(path)


def test_a_publisher_for_some_scopes_voids_tenants_records_in_those_only(tmp_path, security_policy, embedder):
    """nvd publishes for the package of question 13 only (keys file): its patch there voids globex's
    disclosure; its patch of question 12 is a claim that globex is shown with the rule it breaks."""
    open_store(tmp_path / "store", security_policy, embedder).close()
    keys = _keys_file(tmp_path, f'{{ package = ["{scope(13)["package"]}"] }}')
    with car_rag_serve(tmp_path, "--store", str(tmp_path / "store"), "--api-keys", keys, "--anchors", "bm25") as url:
        assert post(url, "k-nvd", [patch(13, "p13-nvd"), patch(12, "p12-nvd")]).status_code == 200
        voided, claimed = read(url, "k-globex", 13), read(url, "k-globex", 12)
    assert voided["d13-globex"]["superseded_by"] == ["p13-nvd"]
    assert claimed["d12-globex"]["status"] == "active" and claimed["d12-globex"]["superseded_by"] == []
    assert [c["untrusted"] for c in claimed["d12-globex"]["disputed_by"]] == ["publisher_out_of_scope"]


def test_a_server_refuses_to_start_with_a_publisher_scope_key_its_policy_lacks(tmp_path, security_policy, embedder):
    open_store(tmp_path / "store", security_policy, embedder).close()
    keys = _keys_file(tmp_path, '{ ecosystem = ["npm"] }')
    with pytest.raises(RuntimeError, match=r"publisher 'nvd' publishes for scope keys \['ecosystem'\]"):
        with car_rag_serve(tmp_path, "--store", str(tmp_path / "store"), "--api-keys", keys):
            pass
