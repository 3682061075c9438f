"""``car-rag serve`` hardened (issue 32, item 4 and the oracles of item 3), each behaviour through a
real server on loopback: the key checked before the body is read, a body read timeout, cross-site
and wrong-Host requests refused, /metrics, /readyz's detail and /docs behind a key or a flag,
unstorable characters a 422 naming the field (on the folder store and on PostgreSQL), a cycle 422
that names only what the key may read, and the keys file's and the command line's bad input
refused at start. Every wait is bounded; no test asserts a time."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from car_rag import CARStore
from car_rag.cli import main
from car_rag.postgres.fixture import throwaway_postgres
from car_rag.serve.keys import hash_key, load_api_keys
from car_rag.serve.service import Service
from car_rag_evals.servers import serving
from servers import wait_for

KEYS: dict[str, dict[str, Any]] = {  # key -> entry of the keys file
    "k-acme-writer": {"name": "acme-writer", "tenant": "acme", "write": True},
    "k-acme-legal": {"name": "acme-legal", "tenant": "acme", "principals": ["legal"], "write": True},
    "k-globex": {"name": "globex", "tenant": "globex"},
    "k-owner": {"name": "owner", "write": True},
}
QUESTION = "Is lodash still vulnerable to CVE-2099-10001?"


def keys_file(folder: Path, entries: list[dict[str, Any]] | None = None, mode: int = 0o600) -> Path:
    path = folder / "keys.json"
    entries = entries if entries is not None else [{**e, "sha256": hash_key(k)} for k, e in KEYS.items()]
    path.write_text(json.dumps({"keys": entries}))
    path.chmod(mode)
    return path


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def store(tmp_path_factory, demo_policy, embedder, demo_corpus_path):
    store = CARStore.open(tmp_path_factory.mktemp("hardening-store"), demo_policy, embedder=embedder)
    assert store.ingest(demo_corpus_path, progress=False).errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def keyed(store, tmp_path_factory):
    """A server with keys, default options but a short body timeout."""
    service = Service(store, api_keys=load_api_keys(keys_file(tmp_path_factory.mktemp("keys"))), anchors="bm25")
    with serving(service, body_timeout_s=2) as base:
        yield base


@pytest.fixture(scope="module")
def keyless(store):
    """A server without keys on loopback, answering the Host names ``car-rag serve`` allows there."""
    service = Service(store, anchors="bm25")
    with serving(service, allowed_hosts=["localhost", "127.0.0.1", "::1"]) as base:
        yield base


def raw_exchange(url: str, head: bytes, body: bytes = b"", read_s: float = 60) -> bytes:
    """Send a request's head and the start of its body, never the rest; what the server answers
    before it closes the connection (or ``read_s`` passes: then the test fails on the status)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=read_s) as conn:
        conn.sendall(head + body)
        answer = b""
        try:
            while chunk := conn.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and b'"}' in answer:  # a JSON detail, whole
                    break
        except TimeoutError:
            pass
    return answer


def post_head(url: str, path: str, length: int, headers: dict[str, str]) -> bytes:
    host = urlsplit(url).netloc
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --------------------------------------------------------------------------- the body
def test_a_request_without_a_key_is_refused_before_its_body_is_read(keyed, store):
    """The client declares 10 MB and sends none of it: the 401 comes without waiting for the body
    (a server reading the body first would answer 408 after its body timeout)."""
    before = len(store)
    for headers in ({}, auth("nope")):
        answer = raw_exchange(keyed, post_head(keyed, "/records", 10 * 2**20, headers))
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert b"API key" in answer and b"connection: close" in answer.lower()
    assert len(store) == before


def test_a_body_that_does_not_arrive_in_time_is_refused_with_408(keyed, store):
    before = len(store)
    answer = raw_exchange(keyed, post_head(keyed, "/records", 1000, auth("k-owner")), b'[{"doc_id": "slow-')
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within 2 s" in answer
    assert len(store) == before
    assert httpx.post(f"{keyed}/retrieve", json={"query": QUESTION}, headers=auth("k-globex"), timeout=60).status_code == 200


# --------------------------------------------------------------------------- browsers
@pytest.mark.parametrize(
    "headers, status",
    [
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
        ({"Content-Type": "application/json", "Origin": "null"}, 403),
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403),
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, 403),
        ({"Content-Type": "application/json", "Host": "evil.example"}, 400),
        ({"Content-Type": "application/json", "Host": "rebound.evil.example:8000"}, 400),
    ],
)
def test_a_keyless_server_refuses_cross_site_and_rebound_requests_and_stores_nothing(keyless, store, headers, status):
    record = {"doc_id": f"csrf-{uuid.uuid4().hex[:8]}", "doc_type": "memo", "text": "planted"}
    before = len(store)
    for path, body in (("/records", [record]), ("/retrieve", {"query": QUESTION})):
        got = httpx.post(f"{keyless}{path}", content=json.dumps(body), headers=headers, timeout=60)
        assert got.status_code == status, got.text
        assert set(got.json()) == {"detail"}
    assert record["doc_id"] not in store.records and len(store) == before


def test_a_keyless_server_answers_its_own_origin_and_loopback_names(keyless):
    port = urlsplit(keyless).port
    for headers in (
        {"Origin": keyless, "Sec-Fetch-Site": "same-origin"},
        {"Host": f"localhost:{port}"},
        {"Sec-Fetch-Site": "none"},
    ):
        got = httpx.post(f"{keyless}/retrieve", json={"query": QUESTION}, headers=headers, timeout=60)
        assert got.status_code == 200, got.text
    assert httpx.get(f"{keyless}/metrics", timeout=30).status_code == 200  # no keys: nothing to hide it behind


# --------------------------------------------------------------------------- what needs a key
def test_metrics_readiness_detail_and_docs_need_a_key(keyed):
    for path in ("/metrics", "/docs", "/openapi.json"):
        got = httpx.get(f"{keyed}{path}", timeout=30)
        assert got.status_code == 401 and got.headers["www-authenticate"] == "Bearer", path
        assert httpx.get(f"{keyed}{path}", headers=auth("k-globex"), timeout=30).status_code == 200, path
    bare = httpx.get(f"{keyed}/readyz", timeout=30)
    assert bare.status_code == 200 and bare.json() == {"ready": True}
    detail = httpx.get(f"{keyed}/readyz", headers=auth("k-globex"), timeout=30).json()
    assert detail["ready"] and detail["records"] >= 45 and detail["auth"] == "api-keys"
    assert httpx.get(f"{keyed}/healthz", timeout=30).json() == {"status": "ok"}


def test_the_flags_make_metrics_and_docs_public(store, tmp_path):
    service = Service(store, api_keys=load_api_keys(keys_file(tmp_path)), anchors="bm25")
    with serving(service, public_metrics=True, public_docs=True) as base:
        for path in ("/metrics", "/docs", "/openapi.json"):
            assert httpx.get(f"{base}{path}", timeout=30).status_code == 200, path
        assert "records" in httpx.get(f"{base}/readyz", timeout=30).json()
        assert httpx.post(f"{base}/retrieve", json={"query": QUESTION}, timeout=30).status_code == 401


# --------------------------------------------------------------------------- unstorable characters
UNSTORABLE: list[tuple[dict[str, Any], str, str | None]] = [  # a record, the field named, the doc_id named
    ({"doc_id": "nul\x00id", "doc_type": "memo", "text": "t"}, "doc_id", None),
    ({"doc_id": "nul-text", "doc_type": "memo", "text": "a\x00b"}, "text", "nul-text"),
    ({"doc_id": "surrogate-scope", "doc_type": "memo", "text": "t", "scope": {"package": "x\ud800"}}, "scope", "surrogate-scope"),
]


def post_records(base: str, records: list[dict[str, Any]], key: str | None = "k-owner") -> httpx.Response:
    # json.dumps writes NUL and lone surrogates as \u escapes, as any client's JSON would
    return httpx.post(
        f"{base}/records",
        content=json.dumps(records),
        headers={"Content-Type": "application/json", **(auth(key) if key else {})},
        timeout=60,
    )


def assert_refused_naming_the_field(got: httpx.Response, field: str, doc_id: str | None) -> None:
    assert got.status_code == 422, got.text
    [problem] = got.json()["errors"]
    assert problem["item"] == 2 and problem["field"] == field and problem["doc_id"] == doc_id
    assert "NUL" in problem["message"] and "nothing was stored" in got.json()["detail"]


@pytest.mark.parametrize("record, field, doc_id", UNSTORABLE)
def test_an_unstorable_character_is_a_422_naming_the_record_and_field(keyed, store, record, field, doc_id):
    good = {"doc_id": f"fine-{uuid.uuid4().hex[:8]}", "doc_type": "memo", "text": "fine"}
    before = len(store)
    assert_refused_naming_the_field(post_records(keyed, [good, record]), field, doc_id)
    assert len(store) == before and good["doc_id"] not in store.records
    query = httpx.post(
        f"{keyed}/retrieve",
        content=json.dumps({"query": "a\x00b"}),
        headers={"Content-Type": "application/json", **auth("k-globex")},
        timeout=30,
    )
    assert query.status_code == 422 and "NUL" in query.text


def test_an_unstorable_character_is_a_422_on_postgresql_too_and_no_answer_names_the_database(tmp_path, demo_policy, embedder):
    """On PostgreSQL a NUL in a doc_id was a 503 'retry' (its text type refuses NUL mid-write).
    Then PostgreSQL stops: /readyz and the degraded answers say the store is unreachable without
    the database's user, port or URL (the connection error's message names them)."""
    with throwaway_postgres() as pg:
        shared = CARStore.open(
            tmp_path / "cache",
            demo_policy,
            authority_url=pg.url,
            authority_schema="hardening",
            vector_store="pgvector",
            embedder=embedder,
        )
        try:
            with serving(Service(shared, anchors="bm25")) as base:
                good = {"doc_id": "fine", "doc_type": "memo", "text": "fine"}
                for record, field, doc_id in UNSTORABLE:
                    assert_refused_naming_the_field(post_records(base, [good, record], key=None), field, doc_id)
                assert len(shared) == 0
                assert post_records(base, [good], key=None).status_code == 200
                assert len(shared) == 1
                database = conninfo_to_dict(pg.url)
                pg.stop()
                unready = wait_for(
                    lambda: (r := httpx.get(f"{base}/readyz", timeout=30)).status_code == 503 and r, "/readyz says not ready"
                )
                answer = httpx.post(f"{base}/retrieve", json={"query": "fine"}, timeout=60)
                for text in (unready.text, answer.text):
                    assert "shared store is unreachable" in text
                    assert database["user"] not in text and f":{database['port']}" not in text and "postgresql://" not in text
                pg.start()
        finally:
            shared.close()


# --------------------------------------------------------------------------- the cycle 422
def test_a_cycle_422_names_no_record_the_key_may_not_read(keyed, store):
    """A record of acme that only acme's legal principal reads waits to void 'acme-memo-2';
    acme's writer (no principal) posts 'acme-memo-2' voiding it back: refused as a cycle, without
    the hidden record's id or rule. The legal writer is told the whole cycle."""
    hidden = f"acme-legal-hold-{uuid.uuid4().hex[:8]}"
    target = f"acme-memo-{uuid.uuid4().hex[:8]}"
    held = {"doc_id": hidden, "doc_type": "memo", "text": "legal hold", "tenant": "acme", "allowed_principals": ["legal"]}
    assert post_records(keyed, [{**held, "supersedes": [target]}], "k-acme-legal").status_code == 200
    closing = {"doc_id": target, "doc_type": "memo", "text": "memo", "tenant": "acme", "supersedes": [hidden]}
    refused = post_records(keyed, [closing], "k-acme-writer")
    assert refused.status_code == 422, refused.text
    assert "supersession cycle" in refused.text and hidden not in refused.text and "explicit" not in refused.text
    told = post_records(keyed, [closing], "k-acme-legal")
    assert told.status_code == 422 and hidden in told.text
    assert target not in store.records


# --------------------------------------------------------------------------- bad input at start
@pytest.mark.parametrize(
    "entries, mode, says",
    [
        ([{"name": "w", "sha256": hash_key("k"), "write": "false"}], 0o600, "keys[0]: write: Input should be a valid boolean"),
        ([{"name": "w", "sha256": hash_key("k"), "write": 1}], 0o600, "keys[0]: write: Input should be a valid boolean"),
        ([{"name": "empty", "sha256": hash_key("")}], 0o600, "keys[0]: sha256: Value error, is the SHA-256 of the empty key"),
        ([{"name": "r", "sha256": hash_key("k")}], 0o666, "writable by other users"),
        ([{"name": "r", "sha256": hash_key("k")}], 0o620, "writable by other users"),
    ],
)
def test_a_bad_keys_file_stops_the_server_at_start(tmp_path, capsys, entries, mode, says):
    path = keys_file(tmp_path, entries, mode)
    assert main(["serve", "--store", str(tmp_path / "no-store"), "--api-keys", str(path)]) != 0
    err = capsys.readouterr().err
    assert says in err and str(path) in err


def test_a_keyless_server_refuses_to_listen_off_loopback_unless_insecure(tmp_path, capsys):
    store = str(tmp_path / "no-store")
    for host in ("0.0.0.0", "192.0.2.7", "::", "example.org"):
        assert main(["serve", "--store", store, "--host", host]) == 2
        assert "--insecure" in capsys.readouterr().err
    # past that check, it stops at the next: there is no store
    assert main(["serve", "--store", store, "--host", "0.0.0.0", "--insecure"]) != 0
    assert "no car-rag store" in capsys.readouterr().err
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert main(["serve", "--store", store, "--host", host]) != 0
        assert "no car-rag store" in capsys.readouterr().err


def test_a_keys_file_every_user_may_read_is_warned_about_and_still_read(tmp_path, caplog):
    path = keys_file(tmp_path, mode=0o644)
    with caplog.at_level("WARNING", logger="car_rag.serve.keys"):
        keys = load_api_keys(path)
    assert keys.lookup("k-globex") is not None
    assert any("readable by every user" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    caplog.clear()
    load_api_keys(keys_file(tmp_path, mode=0o600))
    assert not caplog.records
