"""``ingest --engine ray`` on a real Ray cluster on loopback (``ray start --head`` and one worker node
joining it, one CPU each): a distributed ingest into a shared store (PostgreSQL + pgvector) ends equal
to a local ingest (records, edges, vectors, BM25), and one that loses an encoder process midway loses
nothing and commits nothing twice once run again. Real MiniLM; the scale benchmark's seeded corpus."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

import car_rag
from car_rag import CARStore, Embedder, Policy
from car_rag.postgres import PostgresRecordLog
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag.store.distributed import ingest_on_ray
from car_rag_evals.perf.corpus import generate
from helpers_records import chroma_collection, edge_set

pytestmark = pytest.mark.timeout(600)

RECORDS = generate(300, seed=36, queries=1).records
QUERIES = ["remote code execution in the object loader", "which release fixes the SQL injection in the query builder"]
RAY = Path(sys.executable).parent / "ray"
ROOT = Path(car_rag.__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A head and a worker node on 127.0.0.1, this process connected as the driver; each ``ray start``
    runs blocked in a process group of its own, stopped (the group, by id) at the end."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's Unix socket paths live under it
    paths = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # the nodes' workers import this car_rag
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": paths}
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    head = subprocess.Popen(
        [str(RAY), "start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *common],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    nodes = [head]
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        address = f"127.0.0.1:{port}"
        ray.init(address=address, log_to_driver=False, configure_logging=False)  # waits for the head
        nodes.append(
            subprocess.Popen(
                [str(RAY), "start", f"--address={address}", *common], env=env, start_new_session=True, stdout=subprocess.DEVNULL
            )
        )
        deadline = time.monotonic() + 120
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert time.monotonic() < deadline, "the worker node did not join"
            time.sleep(0.5)
        yield nodes
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            _stop(node)
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


def _stop(node: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(node.pid, sig)
        except ProcessLookupError:
            return
        try:
            node.wait(timeout=20)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def new_database(postgres: ThrowawayPostgres) -> Callable[[], str]:
    """Fresh databases (their ``postgresql://`` URLs) on the session's server."""
    return postgres.new_database


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ray-corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


@pytest.fixture(scope="module")
def local(
    tmp_path_factory: pytest.TempPathFactory, security_policy: Policy, embedder: Embedder, corpus: Path
) -> Iterator[CARStore]:
    """The same records ingested by today's local path, into a store in a folder."""
    with CARStore.open(tmp_path_factory.mktemp("local"), security_policy, embedder=embedder) as store:
        report = store.ingest(corpus, progress=False)
        assert report.errors == [] and len(report.added) == len(RECORDS)
        yield store


def _shared(folder: Path, url: str, policy: Policy | None, embedder: Embedder) -> CARStore:
    return CARStore.open(folder, policy, embedder=embedder, authority_url=url, vector_store="pgvector", follow=False)


def _equal_to_local(url: str, folder: Path, local: CARStore, embedder: Embedder) -> None:
    """A store opened afresh on ``url`` (graph and BM25 built from the committed log) holds what ``local`` holds."""
    with _shared(folder, url, None, embedder) as store:
        assert {d: r.model_dump() for d, r in store.records.items()} == {d: r.model_dump() for d, r in local.records.items()}
        assert edge_set(store.graph) == edge_set(local.graph)
        log = PostgresRecordLog(url)
        try:
            mine = {c.record.doc_id: c.vector for c in log.changes(0)}
        finally:
            log.close()
        theirs = chroma_collection(local).get(include=["embeddings"])
        for doc_id, vector in zip(theirs["ids"], theirs["embeddings"]):
            stored = mine[doc_id]
            assert stored is not None
            cosine = float(np.dot(stored, vector) / (np.linalg.norm(stored) * np.linalg.norm(vector)))
            assert cosine >= 0.9999, (doc_id, cosine)
        for query in QUERIES:
            ours = dict(zip(store.lexical.doc_ids, store.lexical.scores(query)))
            want = dict(zip(local.lexical.doc_ids, local.lexical.scores(query)))
            assert ours.keys() == want.keys()
            np.testing.assert_allclose([ours[d] for d in want], list(want.values()), rtol=1e-5, atol=1e-6)


def test_a_ray_ingest_into_a_shared_store_equals_a_local_one(
    cluster, new_database, tmp_path, corpus, local, security_policy, embedder
):
    url = new_database()
    with _shared(tmp_path / "writer", url, security_policy, embedder) as store:
        report = ingest_on_ray(store, corpus, workers=2, chunk_size=64)
        assert report.errors == [] and len(report.added) == len(RECORDS) and report.unchanged == 0
        # The same records from Parquet (read by Ray Data) are the same records: nothing to re-embed.
        parquet = tmp_path / "corpus.parquet"
        pq.write_table(pa.Table.from_struct_array(pa.array(RECORDS)), parquet)
        again = ingest_on_ray(store, parquet, workers=2, chunk_size=64)
        assert again.errors == [] and again.added == [] and again.updated == [] and again.unchanged == len(RECORDS)
    _equal_to_local(url, tmp_path / "reader", local, embedder)


def _encoders(cluster: list[subprocess.Popen[bytes]]) -> list[psutil.Process]:
    """This cluster's encoder actor processes (descendants of its nodes' ``ray start``)."""
    found = []
    for node in cluster:
        for process in psutil.Process(node.pid).children(recursive=True):
            try:
                if "_Encode" in " ".join(process.cmdline()):
                    found.append(process)
            except psutil.NoSuchProcess:
                continue
    return found


def test_killing_an_encoder_midway_loses_nothing_after_the_rerun(
    request, cluster, new_database, tmp_path, corpus, local, security_policy, embedder
):
    url = new_database()
    log = PostgresRecordLog(url)
    request.addfinalizer(log.close)
    outcome: dict[str, Any] = {}

    writer = _shared(tmp_path / "writer", url, security_policy, embedder)  # the log's tables exist from here

    def first_run() -> None:
        try:
            outcome["report"] = ingest_on_ray(writer, corpus, workers=2, chunk_size=16)
        except Exception as exc:  # Ray may give up on the batch: the re-run below is the recovery
            outcome["error"] = exc
        finally:
            writer.close()

    thread = threading.Thread(target=first_run)
    thread.start()
    deadline = time.monotonic() + 300
    killed = None
    while killed is None:
        assert time.monotonic() < deadline and thread.is_alive(), "no chunk committed while the ingest ran"
        if log.head() > 0 and (encoders := _encoders(cluster)):
            killed = encoders[0]
            committed_when_killed = log.head()
            killed.send_signal(signal.SIGKILL)
        time.sleep(0.05)
    thread.join(timeout=300)
    assert not thread.is_alive()
    assert committed_when_killed < len(RECORDS), "the ingest ended before an encoder could be killed"
    with _shared(tmp_path / "writer", url, None, embedder) as store:
        rerun = ingest_on_ray(store, corpus, workers=2, chunk_size=16)
    first = outcome.get("report")
    assert rerun.errors == [] and rerun.updated == []
    assert len(rerun.added) + rerun.unchanged == len(RECORDS)
    if first is not None:
        assert set(first.added).isdisjoint(rerun.added)
    _equal_to_local(url, tmp_path / "reader", local, embedder)
    # Each record write takes the next change number: a record committed twice would leave a gap.
    assert log.head() == len(RECORDS)
