"""car_rag.client against a real `car-rag serve` on loopback (demo store, MiniLM, API keys): the
records and annotations equal the in-process retriever's; a wrong key is an auth error; a server
that is down, slow, or busy is a clear error naming the URL, retried only where that is safe; a
record's `supersedes` never names a record the key may not read. Busy and slow servers are tiny
loopback HTTP servers with scripted answers (`Scripted`), bounded in time."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from car_rag import CallerContext, CARStore
from car_rag.annotations import annotations_for
from car_rag.client import CARAuthError, CARRequestError, CARServiceClient, CARServiceUnavailable
from car_rag.records import tenant_key
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.serve.keys import hash_key, load_api_keys
from car_rag.serve.service import Service
from car_rag_evals.servers import HOST, free_port, serving

KEYS = {"k-owner": {"name": "owner"}, "k-acme": {"name": "acme", "tenant": "acme"}}
GLOBEX_SECRET = "sec-globex-internal-advisory-77"
ACME_NOTE = {
    "doc_id": "sec-acme-quillpad-note",
    "doc_type": "patch_release",
    "tenant": "acme",
    "text": "Quillpad internal rollout note: version 3.1 of quillpad shipped to every acme workstation.",
    "scope": {"package": "quillpad"},
    "published_at": "2025-05-01",
    # One id the acme key may read (a public record) and one it may not (globex's).
    "supersedes": ["sec-lodash-cve-2099-10001-disclosure", GLOBEX_SECRET],
}
GLOBEX = {
    "doc_id": GLOBEX_SECRET,
    "doc_type": "vulnerability_disclosure",
    "tenant": "globex",
    "text": "Globex internal advisory on quillpad.",
    "scope": {"package": "quillpad"},
    "published_at": "2025-01-01",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory, demo_policy, embedder, demo_corpus_path):
    store = CARStore.open(tmp_path_factory.mktemp("client-store"), demo_policy, embedder=embedder)
    assert store.ingest(demo_corpus_path, progress=False).errors == []
    assert store.ingest([GLOBEX, ACME_NOTE], progress=False).errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def url(store, tmp_path_factory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    path.write_text(json.dumps({"keys": [{**entry, "sha256": hash_key(key)} for key, entry in KEYS.items()]}))
    path.chmod(0o600)
    with serving(Service(store, api_keys=load_api_keys(path), timeout_ms=30_000)) as base:
        yield base


def _in_process(store: CARStore, query: str, k: int, caller: CallerContext | None = None) -> list[tuple[Any, dict]]:
    result = ControllingAuthorityRetriever(store).retrieve(query, caller)
    # Annotations travel as JSON: compare with their JSON form.
    return [(item.record, json.loads(json.dumps(annotations_for(item, result)))) for item in result.top(k)]


def test_records_and_annotations_equal_the_in_process_retrievers(store, url, demo_queries):
    with CARServiceClient(url, api_key="k-owner") as client:
        for question in demo_queries[:4]:
            served = client.retrieve(question["query"], k=10)
            assert [(s.record, s.annotations) for s in served] == _in_process(store, question["query"], 10, CallerContext())
            status = {s.record.doc_id: s.annotations["car_status"] for s in served}
            assert status[question["gold_doc_ids"][0]] == "active"
            assert status[question["anchor_doc_ids"][0]] == "superseded"


def test_async_answers_the_same(store, url, demo_queries):
    client = CARServiceClient(url, api_key="k-owner")
    query = demo_queries[0]["query"]
    served = asyncio.run(client.aretrieve(query, k=5))
    assert [(s.record, s.annotations) for s in served] == _in_process(store, query, 5, CallerContext())
    with pytest.raises(CARAuthError):
        asyncio.run(CARServiceClient(url, api_key="wrong").aretrieve(query))


def test_a_records_supersedes_names_only_records_the_key_may_read(store, url):
    query = "quillpad internal rollout note acme workstation"
    [note] = [s for s in CARServiceClient(url, api_key="k-acme").retrieve(query, k=10) if s.record.doc_id == ACME_NOTE["doc_id"]]
    assert note.record.supersedes == ["sec-lodash-cve-2099-10001-disclosure"]
    # Stored whole (a waiting edge to acme's own record of that id: ids are namespaced per tenant);
    # only the answer leaves out what names no record the key may read.
    assert tenant_key("acme", GLOBEX_SECRET) in store.get(ACME_NOTE["doc_id"], "acme").supersedes


@pytest.mark.parametrize("key", ["wrong", None])
def test_a_wrong_or_missing_key_is_an_auth_error_and_not_retried(url, demo_queries, key):
    with pytest.raises(CARAuthError) as raised:
        CARServiceClient(url, api_key=key, retries=3).retrieve(demo_queries[0]["query"])
    assert raised.value.status == 401 and url in str(raised.value)


def test_a_server_that_is_down_is_unavailable_after_the_retries(demo_queries):
    url = f"http://{HOST}:{free_port()}"
    client = CARServiceClient(url, retries=2, backoff_s=0.01)
    with pytest.raises(CARServiceUnavailable, match=r"cannot reach car-rag serve at .* \(3 attempts\): ConnectError") as raised:
        client.retrieve(demo_queries[0]["query"])
    assert url in str(raised.value)
    with pytest.raises(CARServiceUnavailable, match="cannot reach car-rag serve"):
        asyncio.run(client.aretrieve(demo_queries[0]["query"]))


class Scripted:
    """A loopback HTTP server answering POSTs from a script of (status, headers, body, delay_s),
    the last entry repeated; it counts the requests it was sent."""

    def __init__(self, *script: tuple[int, dict[str, str], Any, float]):
        self.script, self.requests = list(script), 0
        self.bodies: list[Any] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
                status, headers, body, delay = outer.script[min(outer.requests, len(outer.script) - 1)]
                outer.requests += 1
                time.sleep(delay)
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self.server.server_address[1]}"

    def __enter__(self) -> Scripted:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_slow_server_times_out_with_a_clear_error_and_is_not_asked_again():
    with Scripted((200, {}, {}, 5.0)) as slow:
        client = CARServiceClient(slow.url, timeout_s=0.3, retries=2)
        with pytest.raises(
            CARServiceUnavailable, match=r"did not answer within the timeout \(0.3 s, waiting for the answer\)"
        ) as raised:
            client.retrieve("anything")
        assert slow.url in str(raised.value) and slow.requests == 1


def test_a_503_with_retry_after_is_retried_and_one_without_is_not(store, url, demo_queries):
    query = demo_queries[0]["query"]
    answer = CARServiceClient(url, api_key="k-owner").answer(query, 5, with_records=True)
    busy = (503, {"Retry-After": "0"}, {"detail": "not ready: loading"}, 0.0)
    with Scripted(busy, (200, {}, answer, 0.0)) as server:
        served = CARServiceClient(server.url, retries=2).retrieve(query)
        assert server.requests == 2
    assert [(s.record, s.annotations) for s in served] == _in_process(store, query, 5, CallerContext())
    with Scripted(busy) as server:
        with pytest.raises(CARServiceUnavailable, match=r"503, still not available \(3 attempts\): not ready: loading"):
            CARServiceClient(server.url, retries=2).retrieve(query)
        assert server.requests == 3
    with Scripted((503, {}, {"detail": "no answer within 2000 ms"}, 0.0)) as server:
        with pytest.raises(CARServiceUnavailable, match="503, not available: no answer within 2000 ms"):
            CARServiceClient(server.url, retries=2).retrieve(query)
        assert server.requests == 1


def test_as_of_and_filters_are_sent_only_where_given(store, url, demo_queries):
    query = demo_queries[0]["query"]
    answer = CARServiceClient(url, api_key="k-owner").answer(query, 5, with_records=True)
    with Scripted((200, {}, answer, 0.0)) as server:
        client = CARServiceClient(server.url)
        client.retrieve(query, 5)
        client.retrieve(query, 5, as_of="2024-06-01", filters={"subjects": ["lodash"]})
    plain, dated = server.bodies
    assert plain == {"query": query, "k": 5, "with_records": True}
    assert dated == plain | {"as_of": "2024-06-01", "filters": {"subjects": ["lodash"]}}


def test_a_refused_request_names_the_field_and_is_not_retried(url):
    with pytest.raises(CARRequestError, match=r"4\d\d: the request was refused: .*'colour'") as raised:
        CARServiceClient(url, api_key="k-owner", retries=2).retrieve("lodash", colour="blue")
    assert raised.value.status in (400, 422)  # 422 from pydantic; a server that reads the body itself says 400
    with pytest.raises(CARRequestError, match="422"):
        CARServiceClient(url, api_key="k-owner").retrieve("lodash", k=101)


def test_an_answer_without_records_says_the_server_is_too_old(url, demo_queries):
    answer = CARServiceClient(url, api_key="k-owner").answer(demo_queries[0]["query"], 3)  # no with_records
    with Scripted((200, {}, answer, 0.0)) as old:
        with pytest.raises(Exception, match="came without its record: the server predates with_records"):
            CARServiceClient(old.url).retrieve("anything")


def test_explain_is_the_chain_the_key_may_read(store, url):
    with CARServiceClient(url, api_key="k-acme") as client:
        chain = client.explain("sec-lodash-cve-2099-10001-disclosure")
        assert chain["status"] == "superseded" and "sec-lodash-4.17.12-release" in [c["doc_id"] for c in chain["controlling"]]
        assert client.explain(str(ACME_NOTE["doc_id"]))["doc_id"] == ACME_NOTE["doc_id"]  # acme's own, by the id it wrote
        for missing in (GLOBEX_SECRET, "no-such-record"):  # another tenant's record reads as one that does not exist
            with pytest.raises(CARRequestError, match=rf"404: .*no record '{missing}'") as refused:
                client.explain(missing)
            assert refused.value.status == 404


class LoadsOnSignal(Service):
    """A service whose retriever loads only once the test says so, and that counts the /retrieve calls it is asked."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.go = threading.Event()
        self.answered = 0

    def load(self) -> None:
        self.go.wait(60)
        super().load()

    def answer(self, request: Any, caller: Any) -> Any:
        self.answered += 1
        return super().answer(request, caller)


def test_a_loading_server_says_when_to_come_back_and_the_client_waits_it_out(store, demo_queries):
    import httpx
    import uvicorn

    from car_rag.serve.app import create_app
    from car_rag.serve.errors import NOT_READY_RETRY_S

    service = LoadsOnSignal(store, timeout_ms=30_000)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host=HOST, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    base = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        query = demo_queries[0]["query"]
        refused = httpx.post(f"{base}/retrieve", json={"query": query}, timeout=30)
        assert refused.status_code == 503 and refused.headers["retry-after"] == str(NOT_READY_RETRY_S)
        assert httpx.get(f"{base}/readyz", timeout=30).headers["retry-after"] == str(NOT_READY_RETRY_S)
        with pytest.raises(CARServiceUnavailable, match="503, not available|503, still not available"):
            CARServiceClient(base, retries=0).retrieve(query)
        asked_before = service.answered
        got: list[Any] = []
        waiting = threading.Thread(target=lambda: got.append(CARServiceClient(base, retries=3).retrieve(query, k=5)))
        waiting.start()
        while service.answered == asked_before and waiting.is_alive():  # its first attempt was refused (not ready) ...
            time.sleep(0.02)
        service.go.set()  # ... then the retriever loads while the client waits out Retry-After
        waiting.join(120)
        assert got and len(got[0]) == 5 and service.answered >= asked_before + 2
    finally:
        service.go.set()
        server.should_exit = True


class AnswersOnSignal(Service):
    """A service whose answers wait until the test says so: a store busy past the deadline."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.go = threading.Event()

    def answer(self, request: Any, caller: Any) -> Any:
        self.go.wait(60)
        return super().answer(request, caller)


def test_a_busy_server_says_to_come_back_after_its_deadline(store, demo_queries):
    import httpx

    service = AnswersOnSignal(store, timeout_ms=1500)
    try:
        with serving(service) as base:
            busy = httpx.post(f"{base}/retrieve", json={"query": demo_queries[0]["query"]}, timeout=30)
            assert busy.status_code == 503 and "no answer within 1500 ms" in busy.json()["detail"]
            assert busy.headers["retry-after"] == "2"  # the deadline, rounded up to whole seconds
            service.go.set()
    finally:
        service.go.set()
