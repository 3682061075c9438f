"""A store's Chroma: the connection (the embedded database, or a server whose every call is
bounded) and the metadata each record is written with.

Scope keys are written as Chroma metadata on every record, so the collection itself can answer
Stage-2 lookups (``get(where={"cve_id": ...})``) and rebuild the record; the framework
integrations rely on that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from car_rag.channels import DenseChannel
from car_rag.extras import require
from car_rag.layout import CAR_PREFIX, LAYOUT_KEYS, RecordLayout
from car_rag.records import Record
from car_rag.store.config import DEFAULT_HNSW, StoreError

__all__ = [
    "RESERVED_METADATA",
    "SHARED_CHROMA_TIMEOUT_S",
    "Deferred",
    "chroma_metadata",
    "collection",
    "connect",
    "reserved_by",
    "write",
]

log = logging.getLogger(__package__)  # car_rag.store: one logger for all the store says, whichever module

SHARED_CHROMA_TIMEOUT_S = 30.0
"""A shared store's bound on each Chroma call when none is given: a writer waits for its own
vectors to be handed over, and must not wait for ever on a server that stopped answering."""
RESERVED_METADATA = LAYOUT_KEYS
"""Metadata keys a scope key may not take (see :mod:`car_rag.layout`)."""

_CHROMA_LAYOUT = RecordLayout(json_lists=False)


def chroma_metadata(record: Record) -> dict[str, Any]:
    """Chroma metadata for a record: car-rag's flat layout with native lists, so the
    collection alone can rebuild the record and answer Stage-2 lookups (the integrations do)."""
    return _CHROMA_LAYOUT.metadata(record)


def reserved_by(key: str) -> str | None:
    """Whose metadata key a scope key would take: car-rag's own, or one Chroma refuses
    ("chroma:document", keys starting with "#" or "$"), which would fail the whole batch."""
    if key in RESERVED_METADATA or key.startswith(CAR_PREFIX):
        return "car-rag"
    if key == "chroma:document" or key.startswith(("#", "$")):
        return "Chroma"
    return None


def connect(folder: Path, url: str | None, timeout_s: float | None) -> Any:
    """A Chroma client: of the server at ``url`` (each call bounded by ``timeout_s`` when given), or
    of the embedded database in ``folder``."""
    chromadb = require("chromadb", "store", "the store's vector index")
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if not url:
        return chromadb.PersistentClient(path=str(folder / "chroma"), settings=settings)
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise StoreError(f"chroma_url must look like http://host:port, got {url!r}")
    if timeout_s is not None:
        # chromadb's client asks the server who we are as it is made, with no timeout: a
        # server that accepts and never answers would hold this thread for ever
        import httpx

        httpx.get(f"{url.rstrip('/')}/api/v2/heartbeat", timeout=timeout_s).raise_for_status()
    client = chromadb.HttpClient(host=parsed.hostname, port=parsed.port or 8000, ssl=parsed.scheme == "https", settings=settings)
    if timeout_s is not None:
        _bound_http_calls(client, timeout_s)
    return client


def collection(client: Any, config: Mapping[str, Any]) -> Any:
    """The store's Chroma collection (made on first use)."""
    return client.get_or_create_collection(
        config["collection"],
        embedding_function=None,
        configuration={"hnsw": config.get("hnsw", DEFAULT_HNSW)},
    )


def write(dense: DenseChannel, client: Any, records: Sequence[Record], vectors: np.ndarray, **options: Any) -> None:
    """Upsert ``records`` with their ``vectors``, texts and metadata, in batches the client takes
    (``options``: :meth:`~car_rag.channels.DenseChannel.upsert`'s)."""
    dense.upsert(
        [r.doc_id for r in records],
        vectors,
        [r.text for r in records],
        [chroma_metadata(r) for r in records],
        client.get_max_batch_size(),
        **options,
    )


class Deferred:
    """An object made on first use, and made again at the next use for as long as making it
    fails (a Chroma client and collection: connecting to a server that is down raises)."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._made is None:
            self._made = self._make()
        return getattr(self._made, name)


def _bound_http_calls(client: Any, seconds: float) -> None:
    """Give a Chroma HTTP client's calls a timeout. chromadb (1.5) builds its httpx session with
    ``timeout=None`` and offers no setting, so a server that accepts and never answers would hang
    a query or an insert for ever, holding the store's lock; the session is reached through the
    client's private ``_server``, and a chromadb without it is named in a warning."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):
        log.warning("cannot bound Chroma's HTTP calls to %s s: this chromadb keeps its HTTP session elsewhere", seconds)
        return
    session.timeout = httpx.Timeout(seconds)
