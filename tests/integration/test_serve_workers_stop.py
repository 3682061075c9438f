"""Stopping `car-rag serve --workers 2` leaves nothing behind: a real server over a store shared
through a real PostgreSQL (`car-rag postgres`) and a real `chroma run`, on loopback, stopped as an
operator or a process manager stops it (SIGINT, SIGTERM). Each worker used to leave tqdm's
multiprocessing lock to the resource tracker, which warned of leaked semaphores at shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import httpx
import pytest

from car_rag import CARStore
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag_evals.servers import HOST, free_port
from helpers_records import MDRENDER_PATCH
from servers import chroma_run, wait_for

STOP_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def pg(postgres: ThrowawayPostgres) -> str:
    """A database of the module's own on the session's PostgreSQL (its URL)."""
    return postgres.new_database()


@pytest.fixture(scope="module")
def chroma(tmp_path_factory):
    with chroma_run(tmp_path_factory.mktemp("chroma")) as (url, _, _):
        yield url


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_two_workers_leaks_no_semaphore(stop, tmp_path, pg, chroma, demo_policy, embedder, demo_corpus_path):
    url = pg
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with CARStore.open(
        tmp_path / "build", demo_policy, authority_url=url, authority_schema=schema, chroma_url=chroma, embedder=embedder
    ) as store:
        assert store.ingest(demo_corpus_path, progress=False).errors == []
    port, log = free_port(), tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "car_rag",
                "serve",
                "-v",
                "--store",
                str(tmp_path / "cache"),
                "--authority-schema",
                schema,
                "--port",
                str(port),
                "--anchors",
                "bm25",
                "--workers",
                "2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "CAR_RAG_AUTHORITY_URL": url},
        )
    try:
        # Both workers have opened the store (the BM25 index's tokenizer takes tqdm's lock) once
        # each has said so: uvicorn logs a worker's startup after the app factory returned.
        wait_for(
            lambda: proc.poll() is not None or log.read_text().count("Application startup complete") == 2,
            "both workers start",
            120,
            0.1,
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        base = f"http://{HOST}:{port}"
        asked = httpx.post(f"{base}/retrieve", json={"query": "Is mdrender still vulnerable?", "k": 3}, timeout=30)
        assert asked.status_code == 200, asked.text
        assert httpx.post(f"{base}/records", json=MDRENDER_PATCH, timeout=60).status_code == 200  # an ingest: its bar too
        proc.send_signal(stop)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
    err = log.read_text()
    assert "Application shutdown complete" in err  # the workers stopped gracefully, and said so here
    assert "leaked semaphore" not in err and "resource_tracker" not in err, err[-3000:]
