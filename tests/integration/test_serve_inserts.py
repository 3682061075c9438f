"""`POST /records` grouped: concurrent inserts are stored by one store ingest, and each request
is still answered on its own, all or nothing (a real uvicorn server over a real store: MiniLM,
embedded Chroma). The store counts its ingests (:class:`IngestCountingStore`, a real store).

Where the tests need a group of a known make-up they hold the service's write turn while the
requests arrive: the open group then takes every one of them, whatever the machine's speed."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from car_rag import CARStore, IngestReport
from car_rag.serve.errors import Forbidden
from car_rag.serve.keys import ApiKey, ApiKeys, hash_key
from car_rag.serve.schema import RecordsResponse
from car_rag.serve.service import Service
from car_rag_evals.servers import serving


class IngestCountingStore(CARStore):
    """A real store that counts calls to :meth:`ingest`."""

    ingests = 0

    def ingest(self, *args: Any, **kwargs: Any) -> IngestReport:
        self.ingests += 1
        return super().ingest(*args, **kwargs)


KEYS = ApiKeys(
    {
        hash_key(key): ApiKey(name=name, sha256=hash_key(key), tenant=tenant, write=True)
        for key, name, tenant in (
            ("k-acme", "acme-writer", "acme"),
            ("k-globex", "globex-writer", "globex"),
            ("k-owner", "owner", None),
        )
    }
)
PACKAGES = 40


def scope(n: int) -> dict[str, str]:
    return {"package": f"pkg{n}", "cve_id": f"CVE-2099-3{n:04d}"}


def disclosure(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "doc_id": f"sec-pkg{n}-disclosure",
        "doc_type": "vulnerability_disclosure",
        "scope": scope(n),
        "text": f"pkg{n}: CVE-2099-3{n:04d} lets a crafted archive write outside the target folder.",
        "published_at": "2025-01-01",
        **extra,
    }


def patch(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "doc_id": f"sec-pkg{n}-1.0.1-release",
        "doc_type": "patch_release",
        "scope": scope(n),
        "text": f"pkg{n} 1.0.1: archive paths are normalised before extraction.",
        "published_at": "2025-02-01",
        **extra,
    }


def edge(n: int) -> dict[str, str]:
    return {"superseder": patch(n)["doc_id"], "target": disclosure(n)["doc_id"], "rule": "patch_fixes_disclosure"}


def open_store(path, policy, embedder) -> IngestCountingStore:
    """Disclosures of packages 0-19 stored (18 and 19 acme's), and 30 ⊳ 31 by an explicit supersedes."""
    store = IngestCountingStore.open(path, policy, embedder=embedder)
    seeded = [disclosure(n) for n in range(18)] + [disclosure(n, tenant="acme") for n in (18, 19)]
    seeded += [disclosure(31), {**disclosure(30), "supersedes": [disclosure(31)["doc_id"]]}]
    assert store.ingest(seeded, progress=False).errors == []
    store.ingests = 0
    return store


@pytest.fixture
def store(tmp_path, security_policy, embedder):
    with open_store(tmp_path / "store", security_policy, embedder) as opened:
        yield opened


def post(url: str, key: str, body: Any) -> httpx.Response:
    return httpx.post(f"{url}/records", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        time.sleep(0.01)


def grouped(service: Service, send: list[Callable[[], Any]]) -> list[Any]:
    """Run ``send`` (each one insert) in that order into one group: the service's write turn is held
    until each has joined the open group, so none is stored before the last arrives."""
    inserts = service.inserts
    assert inserts is not None
    waiting = lambda: len(inserts._group or [])  # noqa: E731
    with ThreadPoolExecutor(len(send)) as pool:
        futures: list[Future[Any]] = []
        with inserts._storing:
            for n, call in enumerate(send, start=1):
                joined = waiting()
                futures.append(pool.submit(call))

                # a request refused before it is stored (403, invalid records) is answered without joining
                def has_joined(joined: int = joined) -> bool:
                    return waiting() > joined or futures[-1].done()

                wait_for(has_joined, f"insert {n} to join the group")
        return [f.result() for f in futures]


# --------------------------------------------------------------------------- grouping
def test_concurrent_single_inserts_share_one_store_ingest_and_each_gets_its_own_answer(store):
    service = Service(store, api_keys=KEYS, anchors="bm25")
    requests = [("k-owner", patch(n)) for n in range(6)]
    requests += [
        ("k-acme", patch(18, tenant="acme")),  # voids acme's own disclosure: shown
        ("k-globex", patch(19, tenant="globex")),  # claims acme's disclosure: voids nothing (car_rag.trust)
        ("k-owner", disclosure(7)),
    ]  # unchanged, while another request's patch voids it
    requests.append(("k-owner", patch(7)))
    with serving(service) as url:
        answers = grouped(service, [functools.partial(post, url, key, body) for key, body in requests])
    assert store.ingests == 1 < len(requests)
    assert [a.status_code for a in answers] == [200] * len(requests), [a.text for a in answers]
    bodies = [a.json() for a in answers]
    for n, body in enumerate(bodies[:6]):
        assert body == {
            "added": [patch(n)["doc_id"]],
            "updated": [],
            "unchanged": 0,
            "warnings": [],
            "newly_superseded": [disclosure(n)["doc_id"]],
            "new_edges": [edge(n)],
        }
    assert bodies[6]["newly_superseded"] == [disclosure(18)["doc_id"]] and bodies[6]["new_edges"] == [edge(18)]
    assert bodies[7]["added"] == [patch(19)["doc_id"]] and bodies[7]["newly_superseded"] == bodies[7]["new_edges"] == []
    assert bodies[8] == {"added": [], "updated": [], "unchanged": 1, "warnings": [], "newly_superseded": [], "new_edges": []}
    assert bodies[9]["new_edges"] == [edge(7)]
    assert all(store.graph.is_superseded(store.key(disclosure(n)["doc_id"])) for n in (*range(6), 7))
    assert store.graph.is_superseded(store.key(disclosure(18)["doc_id"], "acme"))
    assert not store.graph.is_superseded(store.key(disclosure(19)["doc_id"], "acme"))


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0]], ids=["stored-first", "patches-first"])
def test_a_group_answers_each_request_as_one_by_one_inserts_would(tmp_path, security_policy, embedder, order):
    """Edges go to the request whose record made them: here a patch for a stored disclosure that another
    request of the group sends again unchanged, and a new disclosure whose patch another request sends."""
    requests = [
        [disclosure(3)],  # stored: unchanged
        [patch(3), patch(4)],  # 4's disclosure is stored; 3's is voided whatever the order
        [disclosure(25)],  # new
        [patch(25), patch(26)],  # voids the new disclosure 25; 26 has none
    ]
    requests = [requests[n] for n in order]
    owner = KEYS.lookup("k-owner")
    answers = {}
    for window in (0, 1000):
        with open_store(tmp_path / f"store-{window}", security_policy, embedder) as store:
            service = Service(store, api_keys=KEYS, anchors="bm25", insert_window_ms=window)
            if window:
                got = grouped(service, [functools.partial(service.insert, items, owner) for items in requests])
                assert store.ingests == 1
            else:
                got = [service.insert(items, owner) for items in requests]
                assert store.ingests == len(requests)
            answers[window] = [a.model_dump() for a in got]
    assert answers[1000] == answers[0]
    made = [e for a in answers[0] for e in a["new_edges"]]
    assert sorted(made, key=lambda e: e["superseder"]) == [edge(25), edge(3), edge(4)]


def test_one_request_closing_a_cycle_fails_alone_and_the_rest_of_its_group_is_stored(store):
    service = Service(store, api_keys=KEYS, anchors="bm25")
    before = store.get(disclosure(31)["doc_id"]).fingerprint()
    cycle = {**disclosure(31), "supersedes": [disclosure(30)["doc_id"]]}  # 30 already voids 31
    invalid = {**patch(12), "published_at": 2024}
    requests = [("k-owner", patch(10)), ("k-owner", [patch(11), cycle]), ("k-owner", invalid), ("k-acme", patch(13))]
    with serving(service) as url:
        answers = grouped(service, [functools.partial(post, url, key, body) for key, body in requests])
    assert [a.status_code for a in answers] == [200, 422, 422, 403]
    assert answers[0].json()["new_edges"] == [edge(10)]
    [problem] = answers[1].json()["errors"]
    assert problem["item"] == 2 and problem["doc_id"] == cycle["doc_id"] and problem["field"] == "supersedes"
    assert "cycle" in problem["message"] and "nothing was stored" in answers[1].json()["detail"]
    [problem] = answers[2].json()["errors"]
    assert (problem["item"], problem["doc_id"], problem["field"]) == (1, patch(12)["doc_id"], "published_at")
    assert "tenant 'acme' only" in answers[3].json()["detail"]  # refused before it could join a group
    # the two valid requests in one ingest, which the cycle failed; then each alone
    assert store.ingests == 1 + 2
    assert patch(10)["doc_id"] in store.records and patch(11)["doc_id"] not in store.records
    assert patch(12)["doc_id"] not in store.records
    assert store.get(disclosure(31)["doc_id"]).fingerprint() == before


def test_requests_sending_one_doc_id_are_stored_one_after_the_other(store):
    service = Service(store, api_keys=KEYS, anchors="bm25")
    first, second = patch(14), {**patch(14), "text": "pkg14 1.0.1: archive paths are checked, then normalised."}
    with serving(service) as url:
        answers = grouped(service, [lambda: post(url, "k-owner", first), lambda: post(url, "k-owner", second)])
    assert [(a.json()["added"], a.json()["updated"]) for a in answers] == [([first["doc_id"]], []), ([], [first["doc_id"]])]
    assert store.get(first["doc_id"]).text == second["text"] and store.ingests == 1 + 2


def test_window_zero_keeps_one_ingest_per_request(store):
    service = Service(store, api_keys=KEYS, anchors="bm25", insert_window_ms=0)
    numbers = range(8, 12)
    with serving(service) as url, ThreadPoolExecutor(len(numbers)) as pool:
        answers = list(pool.map(lambda n: post(url, "k-owner", patch(n)), numbers))
    assert [a.json()["new_edges"] for a in answers] == [[edge(n)] for n in numbers]
    assert store.ingests == len(numbers)
    with pytest.raises(ValueError, match="insert_window_ms"):
        Service(store, insert_window_ms=-1)


def test_a_tenant_key_cannot_replace_a_record_it_does_not_own(store):
    """A doc_id is no way into another tenant's record (or a public one): doc_ids are each tenant's
    own, so the same doc_id from another tenant's key is a record of that tenant beside it, and the
    record it names is untouched (neither destroyed for its owner nor taken from everyone else)."""
    service = Service(store, api_keys=KEYS, anchors="bm25")
    acme = store.get(disclosure(18)["doc_id"], "acme").fingerprint()
    public = store.get(disclosure(5)["doc_id"]).fingerprint()
    with serving(service) as url:
        theirs = post(url, "k-globex", {**disclosure(18), "tenant": "globex", "text": "pkg18: nothing to see."})
        shared = post(url, "k-acme", [patch(17, tenant="acme"), {**disclosure(5), "tenant": "acme"}])
        own = post(url, "k-acme", {**disclosure(18), "tenant": "acme", "text": "pkg18: CVE-2099-30018, reworded."})
        owner = post(url, "k-owner", {**disclosure(5), "text": "pkg5: CVE-2099-30005, reworded."})
    assert theirs.status_code == 200 and theirs.json()["added"] == [disclosure(18)["doc_id"]]
    assert shared.status_code == 200 and shared.json()["added"] == [patch(17)["doc_id"], disclosure(5)["doc_id"]]
    assert store.get(disclosure(18)["doc_id"], "globex").text == "pkg18: nothing to see."
    assert store.get(disclosure(5)["doc_id"], "acme").tenant == "acme"
    assert own.status_code == 200 and own.json()["updated"] == [disclosure(18)["doc_id"]]
    assert store.get(disclosure(18)["doc_id"], "acme").fingerprint() != acme  # its own tenant's: replaced
    assert owner.status_code == 200 and store.get(disclosure(5)["doc_id"]).fingerprint() != public  # no tenant: any record
    assert store.get(disclosure(5)["doc_id"]).tenant is None


def test_a_tenant_key_cannot_replace_its_own_tenants_record_that_it_may_not_read(store):
    """Owning the tenant is not enough: a record of the key's tenant kept to principals the key lacks
    is no more its to overwrite than another tenant's (it could not even read what it destroyed)."""
    restricted = {**disclosure(20), "tenant": "acme", "allowed_principals": ["legal"]}
    assert store.ingest([restricted], progress=False).errors == []
    before = store.get(restricted["doc_id"], "acme").fingerprint()
    service = Service(store, api_keys=KEYS, anchors="bm25", insert_window_ms=0)
    rewrite = {**restricted, "allowed_principals": [], "text": "pkg20: nothing to see."}
    with pytest.raises(Forbidden, match=r"may not replace record 1 \('sec-pkg20-disclosure'\)"):
        service.insert([rewrite], KEYS.lookup("k-acme"))
    assert store.get(restricted["doc_id"], "acme").fingerprint() == before
    legal = ApiKey(name="acme-legal", sha256=hash_key("k-acme-legal"), tenant="acme", principals=("legal",), write=True)
    replaced = service.insert([rewrite], legal)  # a key that may read it may replace it
    assert isinstance(replaced, RecordsResponse)
    assert (replaced.added, replaced.updated, replaced.unchanged) == ([], [restricted["doc_id"]], 0)


def test_a_server_without_keys_answers_every_edge_an_insert_made(store):
    service = Service(store, anchors="bm25", insert_window_ms=0)  # no keys file: every caller reads everything
    with serving(service) as url:
        got = httpx.post(f"{url}/records", json=[patch(18, tenant="acme"), patch(3)], timeout=60)
    assert got.status_code == 200, got.text
    answer = got.json()
    assert (answer["added"], answer["unchanged"]) == ([patch(18)["doc_id"], patch(3)["doc_id"]], 0)
    assert answer["new_edges"] == [edge(18), edge(3)]
    assert answer["newly_superseded"] == sorted([disclosure(18)["doc_id"], disclosure(3)["doc_id"]])
