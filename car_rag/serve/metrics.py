"""The Prometheus metrics of ``car-rag serve``: requests by path and status, /retrieve stages,
degraded answers, records ingested, the store's size and the shared store's change feed."""

from __future__ import annotations

import logging
import os
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from car_rag.record_log import Change
from car_rag.store import CARStore
from car_rag.store.lean import LeanStore

__all__ = ["Metrics"]

log = logging.getLogger(__name__)

_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""The latency histograms' buckets, in seconds."""


class Metrics:
    """Prometheus metrics of one server, in a registry of its own. No label carries a tenant,
    a key or anything from a request but its path and status.

    Under ``--workers N`` (``PROMETHEUS_MULTIPROC_DIR`` set), prometheus_client keeps every
    worker's values in that folder and ``/metrics`` sums requests, stages and feed delays over
    the workers; gauges are per worker (a ``pid`` label)."""

    def __init__(self, store: CARStore | LeanStore):
        self.store = store
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.requests = Histogram(
            "car_rag_http_request_seconds",
            "HTTP requests by path and status",
            ["path", "status"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.stages = Histogram(
            "car_rag_retrieve_stage_seconds", "Time per /retrieve stage", ["stage"], buckets=_SECONDS, registry=self.registry
        )
        self.degraded = Counter(
            "car_rag_degraded_answers", "Answers that left a channel out", ["channel"], registry=self.registry
        )
        self.ingested = Counter("car_rag_records_ingested", "Records posted, by outcome", ["outcome"], registry=self.registry)
        self.feed_delay = Histogram(
            "car_rag_change_feed_delay_seconds",
            "From a change's write (another process's, in its transaction) to this process applying it",
            buckets=_SECONDS,
            registry=self.registry,
        )

        def gauge(name: str, text: str) -> Gauge:
            return Gauge(name, text, registry=self.registry, multiprocess_mode="liveall")

        self.records = gauge("car_rag_store_records", "Records in the store, as this process holds them")
        self.head = gauge("car_rag_change_feed_head", "The newest change of the shared store this process applied")
        self.connected = gauge("car_rag_change_feed_connected", "1 while this process follows the shared store")
        self.pending = gauge("car_rag_outbox_pending", "Vectors committed that the vector store has not taken")
        if store.feed is not None:
            store.feed.listeners.append(self.applied)

    def applied(self, changes: list[Change]) -> None:
        """A feed step applied ``changes`` (another process's commits)."""
        now = time.time()
        for change in changes:
            self.feed_delay.observe(max(0.0, now - change.committed_at))
        self.refresh(with_outbox=False)

    def refresh(self, *, with_outbox: bool = True) -> None:
        """Set the gauges from the store as it is now."""
        store = self.store
        self.records.set(len(store))
        self.head.set(store.head)
        feed = store.feed
        self.connected.set(1 if feed is None or feed.connected else 0)
        if with_outbox and isinstance(store, CARStore) and store.replica is not None:
            try:
                self.pending.set(store.replica.log.count_pending())
            except Exception as exc:  # the database is down: /readyz says so; the gauge keeps its last value
                log.debug("outbox size unknown: %s", exc)

    def text(self) -> bytes:
        self.refresh()
        if self.multiprocess:
            from prometheus_client import multiprocess

            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
            return generate_latest(merged)
        return generate_latest(self.registry)
