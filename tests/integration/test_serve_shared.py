"""`car-rag serve` over a store shared through PostgreSQL, as deployed: real `car-rag serve`
processes (one per port, or `--workers 2` behind one port), a real PostgreSQL (`car-rag
postgres`) and a real `chroma run`, all on loopback. The faults of issue 19: a worker killed
under load, PostgreSQL restarted, Chroma gone; and a write seen by every process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from car_rag import CARStore
from car_rag.postgres.fixture import ThrowawayPostgres, throwaway_postgres
from car_rag_evals.servers import HOST, chroma_cli, free_port
from helpers_records import MDRENDER_PATCH, MDRENDER_VOIDED
from servers import assert_dense_left_out, chroma_run, wait_for

PATCH, VOIDED = MDRENDER_PATCH, MDRENDER_VOIDED
QUESTION = "Is mdrender still vulnerable to CVE-2099-10009?"


@pytest.fixture(scope="module")
def pg(postgres: ThrowawayPostgres) -> str:
    """A database of the module's own on the session's PostgreSQL (its URL)."""
    return postgres.new_database()


@pytest.fixture(scope="module")
def chroma(tmp_path_factory):
    with chroma_run(tmp_path_factory.mktemp("chroma")) as (url, _, _):
        yield url


def shared_store(folder: Path, url: str, chroma: str, policy, embedder, corpus: Path) -> str:
    """A new shared store holding the demo corpus; returns its schema."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with CARStore.open(folder, policy, authority_url=url, authority_schema=schema, chroma_url=chroma, embedder=embedder) as store:
        assert store.ingest(corpus, progress=False).errors == []
    return schema


@contextmanager
def serving(url: str, schema: str, folder: Path, *options: str, env: dict[str, str] | None = None):
    """`car-rag serve` over the shared store on a free port, ready; stopped (however the test left
    it) at the end. Yields (base URL, process)."""
    port = free_port()
    log = (folder / f"serve-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "car_rag",
            "serve",
            "--store",
            str(folder / f"cache-{port}"),
            "--authority-schema",
            schema,
            "--port",
            str(port),
            *options,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "CAR_RAG_AUTHORITY_URL": url, **(env or {})},
    )
    base = f"http://{HOST}:{port}"

    def ready() -> bool:
        assert proc.poll() is None, (folder / f"serve-{port}.log").read_text()[-3000:]
        try:
            return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, "car-rag serve answers /readyz", 90, 0.1)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        log.close()


def statuses(base: str, question: str = QUESTION) -> dict[str, str]:
    got = httpx.post(f"{base}/retrieve", json={"query": question, "k": 10}, timeout=30)
    assert got.status_code == 200, got.text
    return {r["doc_id"]: r["status"] for r in got.json()["reranked"]}


def test_a_write_to_one_process_is_seen_by_another(tmp_path, pg, chroma, demo_policy, embedder, demo_corpus_path):
    url = pg
    schema = shared_store(tmp_path / "build", url, chroma, demo_policy, embedder, demo_corpus_path)
    with (
        serving(url, schema, tmp_path, "--anchors", "bm25") as (a, _),
        serving(url, schema, tmp_path, "--anchors", "bm25") as (b, _),
    ):
        assert statuses(b)[VOIDED] == "active"
        posted = httpx.post(f"{a}/records", json=PATCH, timeout=60)
        assert posted.status_code == 200 and posted.json()["newly_superseded"] == [VOIDED], posted.text
        wait_for(lambda: statuses(b).get(VOIDED) == "superseded", "the other process reports the record superseded", 60, 0.01)
        assert httpx.get(f"{b}/readyz", timeout=30).json()["head"] == httpx.get(f"{a}/readyz", timeout=30).json()["head"] == 46


def test_a_worker_killed_under_load_costs_only_its_own_requests(tmp_path, pg, chroma, demo_policy, embedder, demo_corpus_path):
    url = pg
    schema = shared_store(tmp_path / "build", url, chroma, demo_policy, embedder, demo_corpus_path)
    with serving(url, schema, tmp_path, "--anchors", "bm25", "--workers", "2") as (base, parent):

        def workers() -> list[psutil.Process]:
            """The live workers: not multiprocessing's resource tracker, nor a killed worker not yet reaped."""
            alive = []
            for p in psutil.Process(parent.pid).children():
                try:
                    if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                        alive.append(p)
                except psutil.Error:  # it went (or became a zombie) between the listing and the look
                    pass
            return alive

        wait_for(lambda: len(workers()) == 2, "two workers run")
        clients = 8
        outcomes: list[list[str]] = [[] for _ in range(clients)]  # per client, in the order it sent them
        killed = threading.Event()
        after_kill: list[int] = [0] * clients  # each client's requests sent after the kill
        stop = threading.Event()

        def load(mine: int) -> None:
            with httpx.Client(base_url=base, timeout=30) as client:
                while not stop.is_set():
                    sent_after_kill = killed.is_set()
                    try:
                        got = client.post("/retrieve", json={"query": QUESTION, "k": 5})
                        outcomes[mine].append(str(got.status_code))
                    except httpx.TransportError as exc:
                        outcomes[mine].append(type(exc).__name__)
                    after_kill[mine] += sent_after_kill

        threads = [threading.Thread(target=load, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: all("200" in mine for mine in outcomes), "every client is answered before the kill", 60, 0.05)
            victim = workers()[0]
            victim.send_signal(signal.SIGKILL)
            killed.set()
            wait_for(lambda: all(n >= 12 for n in after_kill), "every client sends a dozen requests after the kill", 120, 0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        kinds = Counter(kind for mine in outcomes for kind in mine)
        assert not [k for k in kinds if k.startswith("5")], kinds  # no 5xx at all
        for mine in outcomes:
            failed = [i for i, kind in enumerate(mine) if kind != "200"]
            first = failed[0] if failed else 0
            # only the killed worker's requests fail: at most the one in flight and the next on its dead connection,
            # one after the other; every request after them is answered
            assert failed in ([], [first], [first, first + 1]) and mine[-10:] == ["200"] * 10, mine
        # uvicorn starts another worker in the killed one's place
        wait_for(lambda: len(workers()) == 2 and victim.pid not in [p.pid for p in workers()], "a worker replaces it", 60, 0.2)


def test_postgres_restart_makes_workers_unready_then_reconnect(tmp_path, chroma, demo_policy, embedder, demo_corpus_path):
    with throwaway_postgres() as own:  # a server of its own: this test stops it
        url = own.url
        schema = shared_store(tmp_path / "build", url, chroma, demo_policy, embedder, demo_corpus_path)
        with serving(url, schema, tmp_path, "--anchors", "bm25") as (base, _):
            own.stop()
            unready = wait_for(
                lambda: (r := httpx.get(f"{base}/readyz", timeout=30)).status_code == 503 and r, "/readyz says not ready", 60, 0.1
            )
            assert "shared store is unreachable" in unready.json()["reason"]
            # answers go on from what this process holds, labelled
            answer = httpx.post(f"{base}/retrieve", json={"query": QUESTION, "k": 5}, timeout=30)
            assert answer.status_code == 200
            degraded = answer.json()["diagnostics"]["degraded"]
            assert any(d.startswith("authority: the shared store is unreachable") for d in degraded), degraded
            refused = httpx.post(f"{base}/records", json=PATCH, timeout=60)
            assert refused.status_code == 503 and "no record of it was stored" in refused.json()["detail"]
            own.start()
            wait_for(lambda: httpx.get(f"{base}/readyz", timeout=30).status_code == 200, "ready again", 60, 0.1)
            posted = httpx.post(f"{base}/records", json=PATCH, timeout=60)
            assert posted.status_code == 200 and posted.json()["newly_superseded"] == [VOIDED], posted.text
            assert statuses(base)[VOIDED] == "superseded"


def test_chroma_down_leaves_authority_answers_from_bm25_and_writes_in_the_outbox(
    tmp_path, pg, demo_policy, embedder, demo_corpus_path
):
    url = pg
    folder = tmp_path / "chroma"
    folder.mkdir()
    with chroma_run(folder) as (chroma, chroma_port, chroma_proc):
        schema = shared_store(tmp_path / "build", url, chroma, demo_policy, embedder, demo_corpus_path)
        # past the exact-search limit every dense search asks Chroma
        with serving(
            url, schema, tmp_path, "--timeout-ms", "1500", "--chroma-timeout-s", "2", env={"CAR_RAG_EXACT_SEARCH_LIMIT": "10"}
        ) as (base, _):
            # the first dense search connects to Chroma and loads its index: on a busy machine it may miss its share
            wait_for(
                lambda: (
                    not httpx.post(f"{base}/retrieve", json={"query": QUESTION}, timeout=30).json()["diagnostics"]["degraded"]
                ),
                "dense answers while Chroma is up",
                60,
                0.2,
            )
            chroma_proc.kill()
            chroma_proc.wait(timeout=15)
            answer = httpx.post(f"{base}/retrieve", json={"query": QUESTION, "k": 10}, timeout=30)
            assert answer.status_code == 200
            body = answer.json()
            assert_dense_left_out(body["diagnostics"]["degraded"])
            assert set(body["diagnostics"]["channel_hits"]) == {"bm25"}
            assert {r["doc_id"]: r["status"] for r in body["reranked"]}[VOIDED] == "active"
            posted = httpx.post(f"{base}/records", json=PATCH, timeout=60)  # authority does not wait for the vectors
            assert posted.status_code == 200 and posted.json()["newly_superseded"] == [VOIDED], posted.text
            assert any("vectors wait in the outbox" in w for w in posted.json()["warnings"])
            assert statuses(base)[VOIDED] == "superseded"
            # a worker (re)started while Chroma is down opens the store from PostgreSQL and answers
            with serving(
                url, schema, tmp_path, "--timeout-ms", "1500", "--chroma-timeout-s", "2", env={"CAR_RAG_EXACT_SEARCH_LIMIT": "10"}
            ) as (late, _):
                body = httpx.post(f"{late}/retrieve", json={"query": QUESTION, "k": 10}, timeout=30).json()
                # its Chroma client cannot be made (the heartbeat before it is refused): labelled, not an error
                assert_dense_left_out(body["diagnostics"]["degraded"])
                assert {r["doc_id"]: r["status"] for r in body["reranked"]}[PATCH["doc_id"]] == "active"
            log = (folder / "again.log").open("wb")
            again = subprocess.Popen(
                [chroma_cli(), "run", "--host", HOST, "--port", str(chroma_port), "--path", str(folder / "data")],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:

                def drained() -> bool:
                    text = httpx.get(f"{base}/metrics", timeout=30).text
                    return any(line.startswith("car_rag_outbox_pending") and line.endswith(" 0.0") for line in text.splitlines())

                wait_for(drained, "the outbox drains once Chroma answers again", 60, 0.2)
                wait_for(
                    lambda: (
                        not httpx.post(f"{base}/retrieve", json={"query": QUESTION}, timeout=30).json()["diagnostics"]["degraded"]
                    ),
                    "dense answers again",
                    60,
                    0.2,
                )
            finally:
                again.terminate()
                again.wait(timeout=30)
                log.close()
