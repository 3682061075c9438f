"""``car-rag serve --workers N``: several server processes over one shared store.

uvicorn starts the worker processes (and starts another when one dies); each calls
:func:`worker_app`, which opens the shared store (records in PostgreSQL, vectors in a Chroma
server) from the settings the parent left in the environment, follows its change feed and
serves it. Any worker may write: the store's writers take turns under PostgreSQL's advisory
lock, and every other worker applies the commit from the feed. A store in a folder
(``records.sqlite``) has one owning process and is served by one worker.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from car_rag.retriever import AnchorMode

__all__ = ["WorkerSettings", "worker_app", "run_workers", "SETTINGS_ENV"]

SETTINGS_ENV = "CAR_RAG_SERVE_WORKER"
"""The environment variable that carries :class:`WorkerSettings` (as JSON) to the workers."""


class WorkerSettings(BaseModel):
    """What each worker needs to open the store and serve it as the command line asked."""

    model_config = ConfigDict(extra="forbid")

    store: str
    authority_url: str
    authority_schema: str | None = None
    api_keys: str | None = None
    timeout_ms: float = 2000
    insert_window_ms: float = 2.0
    anchors: AnchorMode = "hybrid"
    retriever_options: dict[str, Any] = {}
    chroma_timeout_s: float | None = None
    stage2: dict[str, Any] = {}
    """:func:`~car_rag.store.lean.open_for_queries`'s ``stage2``, ``sql_above`` and ``bm25_folder``."""
    app_options: dict[str, Any] = {}
    """:func:`~car_rag.serve.app.create_app`'s options (body limits, allowed hosts, public paths)."""
    embedder_options: dict[str, Any] = {}
    """:class:`~car_rag.embedding.Embedder`'s device, precision and batch size (empty: the store's own embedder)."""


def _thread_lock_for_progress_bars() -> None:
    """tqdm's default lock (taken by every bar, even a disabled one: the BM25 tokenizer's, an
    ingest's) holds a multiprocessing lock, a named semaphore registered with the resource
    tracker the worker shares with its parent. uvicorn ends a worker by re-raising SIGTERM after
    its graceful shutdown, so the semaphore's finalizer never runs, and the tracker reported one
    "leaked semaphore" per worker when the server stopped. A worker starts no processes of its
    own: a thread lock is all its bars need."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def worker_app() -> Any:
    """The ASGI app of one worker (uvicorn's factory): the shared store opened and followed."""
    from car_rag.embedding import Embedder
    from car_rag.serve.app import create_app
    from car_rag.serve.keys import load_api_keys
    from car_rag.serve.service import Service
    from car_rag.store.lean import open_for_queries

    _thread_lock_for_progress_bars()
    settings = WorkerSettings.model_validate_json(os.environ[SETTINGS_ENV])
    keys = load_api_keys(settings.api_keys) if settings.api_keys else None
    store = open_for_queries(
        settings.store,
        embedder=Embedder(**settings.embedder_options) if settings.embedder_options else None,
        authority_url=settings.authority_url,
        authority_schema=settings.authority_schema,
        chroma_timeout_s=settings.chroma_timeout_s,
        publisher_scopes=None if keys is None else keys.publisher_scopes,
        **settings.stage2,
    )
    service = Service(
        store,
        api_keys=keys,
        timeout_ms=settings.timeout_ms,
        insert_window_ms=settings.insert_window_ms,
        anchors=settings.anchors,
        owns_store=True,
        **settings.retriever_options,
    )
    return create_app(service, **settings.app_options)


def run_workers(settings: WorkerSettings, *, host: str, port: int, workers: int, log_level: str) -> None:
    """Serve with ``workers`` processes until interrupted; their metrics are merged through a
    temporary folder (prometheus_client's multiprocess mode), removed at the end."""
    import uvicorn

    metrics = Path(tempfile.mkdtemp(prefix="car-rag-metrics-"))
    os.environ[SETTINGS_ENV] = json.dumps(settings.model_dump())
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
    try:
        uvicorn.run("car_rag.serve.workers:worker_app", factory=True, host=host, port=port, workers=workers, log_level=log_level)
    finally:
        shutil.rmtree(metrics, ignore_errors=True)
