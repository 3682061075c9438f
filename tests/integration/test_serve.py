"""`car-rag serve` end to end: a real uvicorn server on loopback over a real store (MiniLM,
embedded Chroma or a `chroma run` server), reached with httpx. Retrieval in every format,
inserts, API-key tenancy (randomized: test_serve_tenancy.py), bad input, metrics, OpenAPI, and a
degraded answer when the vector store stalls or dies."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from car_rag import CARStore
from car_rag.cli import main
from car_rag.serve.keys import hash_key, load_api_keys
from car_rag.serve.service import DENSE_SHARE, Service
from car_rag_evals.servers import HOST, free_port, serving
from helpers_records import chroma_collection
from servers import assert_dense_left_out, chroma_run, wait_for

SECRET = "ACME-INTERNAL-7731"
ACME_PATCH: dict[str, Any] = {
    "doc_id": "sec-serialbox-9.9.9-acme-release",
    "doc_type": "patch_release",
    "tenant": "acme",
    "text": f"Release 9.9.9 ({SECRET}): type tags in serialized payloads are checked before objects are rebuilt.",
    "scope": {"package": "serialbox", "cve_id": "CVE-2099-10010"},
    "published_at": "2025-04-01",
}
SERIALBOX = "sec-serialbox-cve-2099-10010-disclosure"
KEYS: dict[str, dict[str, Any]] = {  # key -> entry of the keys file
    "k-acme": {"name": "acme-analysts", "tenant": "acme", "principals": ["analyst"]},
    "k-acme-writer": {"name": "acme-writer", "tenant": "acme", "write": True},
    "k-globex": {"name": "globex", "tenant": "globex"},
    "k-owner": {"name": "owner", "write": True},
}


def keys_file(folder):
    path = folder / "keys.json"
    path.write_text(json.dumps({"keys": [{**entry, "sha256": hash_key(key)} for key, entry in KEYS.items()]}))
    return path


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def store(tmp_path_factory, demo_policy, embedder, demo_corpus_path):
    store = CARStore.open(tmp_path_factory.mktemp("serve-store"), demo_policy, embedder=embedder)
    assert store.ingest(demo_corpus_path, progress=False).errors == []
    # A tenant may not void a public record (car_rag.trust): acme's patch is kept as a claim.
    assert store.ingest([ACME_PATCH], progress=False).newly_superseded == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def url(store, tmp_path_factory):
    service = Service(store, api_keys=load_api_keys(keys_file(tmp_path_factory.mktemp("keys"))), timeout_ms=20_000)
    with serving(service, max_body_bytes=2**20) as base:
        yield base


def retrieve(url: str, key: str | None, **body) -> httpx.Response:
    return httpx.post(f"{url}/retrieve", json=body, headers=auth(key) if key else {}, timeout=60)


# --------------------------------------------------------------------------- retrieval
@pytest.mark.parametrize("fmt", ["json", "audit", "reader", "plain", "xml"])
def test_retrieve_answers_the_contract_in_every_format(url, fmt, demo_queries):
    question = demo_queries[0]
    got = retrieve(url, "k-globex", query=question["query"], k=10, format=fmt, with_text=True)
    assert got.status_code == 200, got.text
    assert got.headers["x-content-type-options"] == "nosniff"
    body = got.json()
    gold = question["gold_doc_ids"][0]
    ranked = {r["doc_id"]: r for r in body["reranked"]}
    assert ranked[gold]["status"] == "active" and ranked[gold]["text"]
    voided = ranked[question["anchor_doc_ids"][0]]
    assert voided["status"] == "superseded" and voided["superseded_by"] == [gold]
    assert voided["voided_by"] == [{"doc_id": gold, "rule": "patch_fixes_disclosure"}]
    assert all(r["scope_probability"] is not None for r in body["reranked"])
    candidates = body["candidates"]
    assert candidates and any(c["anchor"] for c in candidates)
    assert {"bm25", "dense"} <= set().union(*(c["channels"] for c in candidates))
    first = candidates[0]["channels"]
    assert sum(ch["contribution"] for ch in first.values()) == pytest.approx(candidates[0]["score"])
    diag = body["diagnostics"]
    assert diag["degraded"] == [] and diag["channel_hits"]["bm25"] > 0 and diag["channel_hits"]["dense"] > 0
    assert {"bm25", "dense", "stage1", "latent_scope", "stage23", "total", "evidence"} <= set(diag["timings_ms"])
    assert diag["scope_ids"] == {"cve_id": ["CVE-2099-10001"]} and diag["scope_posterior"][0]["probability"] > 0
    pack = body["evidence_pack"]
    assert pack["format"] == ("audit" if fmt == "xml" else fmt)  # xml: audit's former name, still accepted
    if fmt == "json":
        assert pack["text"] is None and [p["corpus_object_id"] for p in pack["packets"]][:1] == [body["reranked"][0]["doc_id"]]
    else:
        assert pack["packets"] is None and "4.17.12" in pack["text"]
        if fmt in ("audit", "xml", "reader"):
            ET.fromstring(pack["text"])


def test_openapi_describes_the_api_and_docs_are_served(url):
    spec = httpx.get(f"{url}/openapi.json", headers=auth("k-globex"), timeout=30).json()
    assert {"/retrieve", "/records", "/healthz", "/readyz", "/metrics"} <= set(spec["paths"])
    assert {"RetrieveRequest", "RetrieveResponse", "RecordsResponse", "RecordsRejected"} <= set(spec["components"]["schemas"])
    body = spec["paths"]["/records"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "doc_id" in body["anyOf"][0]["properties"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    docs = httpx.get(f"{url}/docs", headers=auth("k-globex"), timeout=30)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert httpx.get(f"{url}/healthz", timeout=30).json() == {"status": "ok"}
    ready = httpx.get(f"{url}/readyz", headers=auth("k-globex"), timeout=30).json()
    assert ready["ready"] and ready["auth"] == "api-keys" and ready["records"] >= 46


# --------------------------------------------------------------------------- tenancy
@pytest.mark.parametrize("headers", [{}, auth("nope"), {"Authorization": "Basic azphY21l"}, auth(hash_key("k-acme"))])
def test_no_key_or_an_unknown_one_gets_401_and_no_data(url, headers):
    for got in (
        httpx.post(f"{url}/retrieve", json={"query": "serialbox"}, headers=headers, timeout=30),
        httpx.post(f"{url}/records", json=[ACME_PATCH], headers=headers, timeout=60),
    ):
        assert got.status_code == 401 and got.headers["www-authenticate"] == "Bearer"
        assert set(got.json()) == {"detail"} and "serialbox" not in got.text


def test_a_body_cannot_choose_its_caller(url):
    got = retrieve(url, "k-globex", query="serialbox", caller={"tenant": "acme"})
    assert got.status_code == 400 and "API key" in got.json()["detail"]


def test_a_key_reads_as_its_tenant(url):
    question = "Is serialbox still exposed to CVE-2099-10010?"
    acme = retrieve(url, "k-acme", query=question, k=10, format="plain").json()
    claimed = next(r for r in acme["reranked"] if r["doc_id"] == SERIALBOX)
    assert claimed["status"] == "active" and claimed["disputed_by"] == [
        {"doc_id": ACME_PATCH["doc_id"], "rule": "patch_fixes_disclosure", "untrusted": "tenant_over_public"}
    ]
    assert SECRET in acme["evidence_pack"]["text"]
    globex = retrieve(url, "k-globex", query=question, format="json", with_text=True)
    disclosure = next(r for r in globex.json()["reranked"] if r["doc_id"] == SERIALBOX)
    assert disclosure["status"] == "active" and not disclosure["hidden_superseder"] and disclosure["disputed_by"] == []
    assert SECRET not in globex.text and ACME_PATCH["doc_id"] not in globex.text


# --------------------------------------------------------------------------- inserts
def test_an_insert_is_seen_by_the_next_retrieve_and_says_what_it_voided(url):
    patch = {
        "doc_id": "sec-mdrender-2.0.1-release",  # public, as the disclosure it voids (car_rag.trust)
        "doc_type": "patch_release",
        "text": "mdrender 2.0.1: raw HTML in link titles is escaped before rendering.",
        "scope": {"package": "mdrender", "cve_id": "CVE-2099-10009"},
        "published_at": "2025-03-01",
    }
    got = httpx.post(f"{url}/records", json=patch, headers=auth("k-owner"), timeout=60)
    assert got.status_code == 200, got.text
    assert got.json()["added"] == [patch["doc_id"]]
    assert got.json()["newly_superseded"] == ["sec-mdrender-cve-2099-10009-disclosure"]
    assert got.json()["new_edges"] == [
        {"superseder": patch["doc_id"], "target": "sec-mdrender-cve-2099-10009-disclosure", "rule": "patch_fixes_disclosure"}
    ]
    again = httpx.post(f"{url}/records", json=[patch], headers=auth("k-owner"), timeout=60).json()
    assert again["unchanged"] == 1 and again["added"] == [] and again["newly_superseded"] == []  # idempotent by doc_id
    answer = retrieve(url, "k-acme", query="Is mdrender still vulnerable to CVE-2099-10009?", k=10).json()
    statuses = {r["doc_id"]: (r["status"], r["superseded_by"]) for r in answer["reranked"]}
    assert statuses["sec-mdrender-cve-2099-10009-disclosure"] == ("superseded", [patch["doc_id"]])


def test_a_batch_with_a_bad_record_is_refused_whole_with_the_record_and_field_named(url, store):
    good = {
        "doc_id": "sec-tarstream-5.0.0-release",
        "doc_type": "patch_release",
        "text": "tarstream 5.0.0",
        "scope": {"package": "tarstream", "cve_id": "CVE-2099-10103"},
    }
    bad = {**good, "doc_id": "sec-bad", "published_at": 2024}
    got = httpx.post(f"{url}/records", json=[good, bad], headers=auth("k-owner"), timeout=60)
    assert got.status_code == 422
    assert got.json()["errors"] == [
        {"item": 2, "doc_id": "sec-bad", "field": "published_at", "message": got.json()["errors"][0]["message"]}
    ]
    assert "nothing was stored" in got.json()["detail"]
    assert good["doc_id"] not in store.records and "sec-bad" not in store.records


def test_writes_need_a_writer_key_for_their_own_tenant(url, store):
    record = {**ACME_PATCH, "doc_id": "sec-serialbox-9.9.10-release", "tenant": "globex"}
    reader = httpx.post(f"{url}/records", json=record, headers=auth("k-globex"), timeout=60)
    assert reader.status_code == 403 and "may not write" in reader.json()["detail"]
    other = httpx.post(f"{url}/records", json=record, headers=auth("k-acme-writer"), timeout=60)
    assert other.status_code == 403 and "tenant 'acme' only: record 1" in other.json()["detail"]
    assert record["doc_id"] not in store.records


def contents(store: CARStore) -> tuple:
    """What the store holds: ids and fingerprints (records.sqlite and in memory), the edges (both),
    BM25's documents and Chroma's vector count."""
    with closing(sqlite3.connect(store.path / "records.sqlite")) as db:
        stored = sorted(db.execute("SELECT doc_id, fingerprint FROM records"))
        stored_edges = sorted(db.execute("SELECT superseder, target, rule, confidence FROM edges"))
    with store.lock.read():
        held = sorted((d, r.fingerprint()) for d, r in store.records.items())
        edges = sorted((e.superseder, e.target, e.rule, e.confidence) for e in store.graph.edges())
        bm25 = list(store.lexical.doc_ids)
    return stored, stored_edges, held, edges, bm25, chroma_collection(store).count()


HUGE = 50 * 2**20


def streamed(sent: list[int]) -> Iterator[bytes]:
    """50 MB of JSON white space, 64 KiB at a time; ``sent`` counts what the server took of it."""
    for _ in range(HUGE // 2**16):
        sent[0] += 2**16
        yield b" " * 2**16


CYCLE = {
    "doc_id": "sec-axios-cve-2099-10003-disclosure",
    "doc_type": "vulnerability_disclosure",
    "text": "axios SSRF, restated",
    "scope": {"package": "axios", "cve_id": "CVE-2099-10003"},
    "supersedes": ["sec-axios-1.7.4-release"],
}  # which already voids it
TARSTREAM = {
    "doc_id": "sec-tarstream-5.0.0-release",
    "doc_type": "patch_release",
    "text": "tarstream 5.0.0",
    "scope": {"package": "tarstream", "cve_id": "CVE-2099-10103"},
}
Send = Callable[[httpx.Client, list[int]], httpx.Response]
JSON = {"Content-Type": "application/json"}
BAD_REQUESTS: dict[str, tuple[Send, int, str]] = {  # what is sent, the status, what the answer says
    "records-malformed-json": (
        lambda c, _: c.post("/records", content=b'{"doc_id": ', headers={**auth("k-owner"), **JSON}),
        422,
        "not JSON",
    ),
    "records-nested-too-deep": (
        lambda c, _: c.post("/records", content=b"[" * 100_000 + b"]" * 100_000, headers={**auth("k-owner"), **JSON}),
        422,
        "not JSON",
    ),
    "records-none": (lambda c, _: c.post("/records", json=[], headers=auth("k-owner")), 422, "no records"),
    "records-bad-field-in-batch": (
        lambda c, _: c.post(
            "/records", json=[TARSTREAM, {**TARSTREAM, "doc_id": "sec-bad", "published_at": 2024}], headers=auth("k-owner")
        ),
        422,
        '"field":"published_at"',
    ),
    "records-closing-a-cycle": (
        lambda c, _: c.post("/records", json=[TARSTREAM, CYCLE], headers=auth("k-owner")),
        422,
        "supersession cycle",
    ),
    "records-other-tenant": (
        lambda c, _: c.post("/records", json={**TARSTREAM, "tenant": "globex"}, headers=auth("k-acme-writer")),
        403,
        "tenant 'acme' only",
    ),
    "records-reader-key": (lambda c, _: c.post("/records", json=TARSTREAM, headers=auth("k-globex")), 403, "may not write"),
    "records-no-key": (lambda c, _: c.post("/records", json=TARSTREAM), 401, "missing API key"),
    "records-50mb-declared": (
        lambda c, sent: c.post(
            "/records", content=streamed(sent), headers={**auth("k-owner"), **JSON, "Content-Length": str(HUGE)}
        ),
        413,
        "larger than",
    ),
    "records-50mb-chunked": (
        lambda c, sent: c.post("/records", content=streamed(sent), headers={**auth("k-owner"), **JSON}),
        413,
        "larger than",
    ),
    "retrieve-50mb-chunked": (
        lambda c, sent: c.post("/retrieve", content=streamed(sent), headers={**auth("k-globex"), **JSON}),
        413,
        "larger than",
    ),
    "retrieve-100k-query": (
        lambda c, _: c.post("/retrieve", json={"query": "x" * 100_000}, headers=auth("k-globex")),
        422,
        "at most 4096 characters",
    ),
    "retrieve-unknown-format": (
        lambda c, _: c.post("/retrieve", json={"query": "q", "format": "html"}, headers=auth("k-globex")),
        422,
        "'json', 'plain', 'reader', 'audit' or 'xml'",
    ),
    "retrieve-blank-query": (
        lambda c, _: c.post("/retrieve", json={"query": "   "}, headers=auth("k-globex")),
        422,
        "must not be blank",
    ),
    "retrieve-k-0": (
        lambda c, _: c.post("/retrieve", json={"query": "q", "k": 0}, headers=auth("k-globex")),
        422,
        "greater than or equal to 1",
    ),
    "retrieve-filter-unknown-field": (
        lambda c, _: c.post("/retrieve", json={"query": "q", "filters": {"judges": ["x"]}}, headers=auth("k-globex")),
        400,
        "filters.judges: unknown filter field",
    ),
    "retrieve-filter-unknown-subject": (
        lambda c, _: c.post(
            "/retrieve", json={"query": "q", "filters": {"subjects": {"court": ["x"]}}}, headers=auth("k-globex")
        ),
        400,
        "filters.subjects.court: not a scope key",
    ),
    "retrieve-filter-range-backwards": (
        lambda c, _: c.post(
            "/retrieve",
            json={"query": "q", "filters": {"date_range": {"from": "2025-01-01", "to": "2024-01-01"}}},
            headers=auth("k-globex"),
        ),
        400,
        "filters.date_range: from 2025-01-01 is after to 2024-01-01",
    ),
    "retrieve-as-of-unreadable": (
        lambda c, _: c.post("/retrieve", json={"query": "q", "as_of": "2024-02-30"}, headers=auth("k-globex")),
        400,
        "as_of: cannot read '2024-02-30' as a date",
    ),
    "retrieve-malformed-json": (
        lambda c, _: c.post("/retrieve", content=b"{", headers={**auth("k-globex"), **JSON}),
        422,
        "json_invalid",
    ),
    "retrieve-caller-in-body": (
        lambda c, _: c.post("/retrieve", json={"query": "q", "caller": {"tenant": "acme"}}, headers=auth("k-globex")),
        400,
        "takes the caller from the API key",
    ),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_a_bad_request_gets_a_clear_4xx_echoes_nothing_and_changes_nothing_stored(url, store, case):
    send, status, says = BAD_REQUESTS[case]
    before, sent = contents(store), [0]
    with httpx.Client(base_url=url, timeout=60) as client:
        got = send(client, sent)
    assert got.status_code == status and says in got.text, got.text
    assert len(got.text) < 1000  # neither the 100k query nor the body comes back
    assert sent[0] < HUGE // 4  # a body over the limit is refused, not read to its end
    assert contents(store) == before


def test_metrics_are_prometheus_text_with_stages_and_store_size(url, store):
    retrieve(url, "k-globex", query="Is lodash still vulnerable?")
    metrics = httpx.get(f"{url}/metrics", headers=auth("k-globex"), timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    stages = {s.labels["stage"] for s in families["car_rag_retrieve_stage_seconds"].samples}
    assert {"bm25", "dense", "stage1", "latent_scope", "stage23", "total", "evidence"} <= stages
    [size] = families["car_rag_store_records"].samples
    assert size.value == len(store)
    paths = {(s.labels["path"], s.labels["status"]) for s in families["car_rag_http_request_seconds"].samples}
    assert ("/retrieve", "200") in paths
    assert any(s.labels["outcome"] == "added" for s in families["car_rag_records_ingested"].samples)


# --------------------------------------------------------------------------- degraded
def test_a_stalled_then_dead_vector_store_gives_labelled_bm25_answers_within_the_deadline(
    tmp_path, demo_policy, embedder, demo_corpus_path
):
    timeout_ms = 1500
    with chroma_run(tmp_path) as (chroma_url, _, chroma):
        store = CARStore.open(tmp_path / "store", demo_policy, chroma_url=chroma_url, embedder=embedder, chroma_timeout_s=3)
        try:
            store.dense.exact_limit = 10  # past it, every dense search asks Chroma (its HNSW index)
            assert store.ingest(demo_corpus_path, progress=False).errors == [] and not store.dense.exact
            service = Service(store, api_keys=load_api_keys(keys_file(tmp_path)), timeout_ms=timeout_ms)
            with serving(service) as url:
                question = "Is lodash still vulnerable to CVE-2099-10001?"
                # the first dense search connects to Chroma and loads its index: on a busy machine it may miss its share
                wait_for(
                    lambda: not retrieve(url, "k-acme", query=question).json()["diagnostics"]["degraded"],
                    "dense answers while Chroma is up",
                    60,
                    0.2,
                )
                before = degraded_answers(url)
                os.kill(chroma.pid, signal.SIGSTOP)  # accepts connections, never answers
                try:
                    got = retrieve(url, "k-globex", query=question)
                    assert got.status_code == 200, got.text
                    body = got.json()
                    # answered while Chroma still holds the search: the deadline left dense out (a stopped server
                    # cannot refuse, and the Chroma client's own timeout, 3 s, is past the dense share)
                    assert body["diagnostics"]["degraded"] == [f"dense: timeout after {timeout_ms * DENSE_SHARE:.0f} ms"]
                    assert set(body["diagnostics"]["channel_hits"]) == {"bm25"}
                    assert body["reranked"][0]["doc_id"] == "sec-lodash-4.17.12-release"
                    # an insert cannot reach the vectors either: refused within the Chroma timeout, nothing stored
                    record = {
                        "doc_id": "sec-x-1.0.1-release",
                        "doc_type": "patch_release",
                        "text": "x 1.0.1",
                        "scope": {"package": "x", "cve_id": "CVE-2099-19999"},
                    }
                    insert = httpx.post(f"{url}/records", json=record, headers=auth("k-owner"), timeout=60)
                    assert insert.status_code == 503 and "no record of it was stored" in insert.json()["detail"]
                    assert record["doc_id"] not in store.records
                finally:
                    os.kill(chroma.pid, signal.SIGCONT)
                chroma.kill()
                chroma.wait(timeout=15)
                dead = retrieve(url, "k-owner", query=question).json()
                assert_dense_left_out(dead["diagnostics"]["degraded"])
                assert dead["reranked"][0]["doc_id"] == "sec-lodash-4.17.12-release"
                assert degraded_answers(url) == before + 2
        finally:
            store.close()


def degraded_answers(url: str) -> float:
    """The service's count of answers that left a channel out (its /metrics)."""
    text = httpx.get(f"{url}/metrics", headers=auth("k-owner"), timeout=30).text
    metrics = {f.name: f for f in text_string_to_metric_families(text)}
    return sum(s.value for s in metrics["car_rag_degraded_answers"].samples if s.name.endswith("_total"))


def test_exact_search_answers_every_caller_while_the_vector_store_is_down(tmp_path, demo_policy, embedder, demo_corpus_path):
    """Up to the exact-search limit the vectors are in memory and each caller's eligibility is
    decided from the records: no dense search asks Chroma, so none degrades when it is gone."""
    with chroma_run(tmp_path) as (chroma_url, _, chroma):
        store = CARStore.open(tmp_path / "store", demo_policy, chroma_url=chroma_url, embedder=embedder, chroma_timeout_s=3)
        try:
            assert store.ingest(demo_corpus_path, progress=False).errors == [] and store.dense.exact
            chroma.kill()
            chroma.wait(timeout=15)
            with serving(Service(store, api_keys=load_api_keys(keys_file(tmp_path)))) as url:
                for key in ("k-acme", "k-globex", "k-owner"):  # no filter of theirs was asked of Chroma before
                    body = retrieve(url, key, query="Is lodash still vulnerable to CVE-2099-10001?").json()
                    assert body["diagnostics"]["degraded"] == [] and body["diagnostics"]["channel_hits"]["dense"] > 0
                    assert body["reranked"][0]["doc_id"] == "sec-lodash-4.17.12-release"
        finally:
            store.close()


# --------------------------------------------------------------------------- the command
def test_car_rag_serve_runs_unrestricted_with_a_warning_and_refuses_workers(
    tmp_path, demo_policy, embedder, demo_corpus_path, capsys
):
    assert main(["serve", "--store", str(tmp_path), "--workers", "2"]) == 2
    assert "a store in a folder has one owning process" in capsys.readouterr().err
    path = tmp_path / "store"
    with CARStore.open(path, demo_policy, embedder=embedder) as built:
        assert built.ingest(demo_corpus_path, progress=False).errors == []
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "car_rag", "serve", "--store", str(path), "--anchors", "bm25", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None  # a pipe
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else ""
            try:
                if httpx.get(f"http://{HOST}:{port}/readyz", timeout=30).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        got = httpx.post(
            f"http://{HOST}:{port}/retrieve",
            json={"query": "Is lodash still vulnerable to CVE-2099-10001?", "caller": {"tenant": "acme"}},
            timeout=60,
        )
        assert got.status_code == 200 and got.json()["reranked"][0]["doc_id"] == "sec-lodash-4.17.12-release"
        assert set(got.json()["diagnostics"]["channel_hits"]) == {"bm25"}
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert "WARNING: no --api-keys" in err
    assert proc.returncode == 0, err


def test_retrieve_reports_an_ambiguous_question_and_a_named_plain_word_scope(tmp_path, embedder):
    from car_rag import Record, load_policy

    attack = "Prototype pollution in the merge helper lets a remote attacker alter object prototypes."
    records = [
        Record(doc_id=f"{pkg}-d", text=attack, doc_type="vulnerability_disclosure", scope={"package": pkg, "cve_id": cve})
        for pkg, cve in (("alpha-utils", "CVE-2034-0001"), ("beta-utils", "CVE-2034-0002"))
    ]
    records.append(
        Record(
            doc_id="alpha-utils-p",
            text="Release 3.1.0: maintenance.",
            doc_type="patch_release",
            scope={"package": "alpha-utils", "cve_id": "CVE-2034-0001"},
        )
    )
    with CARStore.open(tmp_path / "amb", load_policy("security-advisory"), embedder=embedder) as small:
        assert small.ingest(records, progress=False).errors == []
        with serving(Service(small, timeout_ms=20_000)) as base:
            got = retrieve(base, None, query="Has the prototype pollution in merge been fixed?", k=5, format="plain")
            assert got.status_code == 200, got.text
            body = got.json()
            ambiguity = body["diagnostics"]["ambiguity"]
            assert ambiguity["scopes"] == 2 and ambiguity["states"] == {"patched": 1, "vulnerable": 1}
            assert body["evidence_pack"]["text"].startswith("Note: The question matches 2 subjects it does not tell apart")
            named = retrieve(base, None, query="Has the prototype pollution in alpha-utils been fixed?", k=5).json()
            assert named["diagnostics"]["ambiguity"] is None
            assert [(link["key"], link["value"]) for link in named["diagnostics"]["scope_links"]] == [("package", "alpha-utils")]
            assert named["reranked"][0]["doc_id"] == "alpha-utils-p" and named["reranked"][0]["scope_probability"] == 1.0
