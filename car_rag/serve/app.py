"""``car-rag serve``: the retriever over HTTP (FastAPI), with API-key tenancy, a per-request
deadline that answers from BM25 when the dense channel is slow, and Prometheus metrics.

One process owns the store and serves queries and inserts from many threads (the store's
readers-writer lock keeps each query on one state of it). The dense channel (the query
embedding, then Chroma) runs beside BM25 in a small pool of its own: when it has not answered
within three quarters of the deadline the answer is fused from BM25 alone and says so
(``diagnostics.degraded``); a request never waits past its deadline. Inserts that arrive
within a few milliseconds of each other are stored by one store ingest (a group commit), each
still all or nothing on its own.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from car_rag import __version__
from car_rag.channels import ChannelHit
from car_rag.eligibility import CallerContext
from car_rag.evidence import build_packets, render_plain, render_reader, render_xml
from car_rag.extractors import missing_scope
from car_rag.graph import Edge
from car_rag.record_log import Change
from car_rag.records import Record, RecordError, parse_records
from car_rag.retriever import AnchorMode, ControllingAuthorityRetriever
from car_rag.serve import INSERT_WINDOW_MS
from car_rag.serve.keys import ApiKey, ApiKeys
from car_rag.serve.schema import (
    AmbiguityOut,
    Candidate,
    ChannelEvidence,
    Diagnostics,
    EdgeOut,
    EvidencePack,
    RankedRecord,
    RecordProblem,
    RecordsRejected,
    RecordsResponse,
    RetrieveRequest,
    RetrieveResponse,
    ScopeLinkOut,
    ScopeProbability,
)
from car_rag.store import CARStore, IngestReport

__all__ = ["Service", "create_app", "DENSE_SHARE", "DENSE_THREADS", "INSERT_WINDOW_MS"]

log = logging.getLogger(__name__)

DENSE_SHARE = 0.75
"""Of a request's deadline, how long the dense channel may take; the rest is for fusion, Stages 2-3
and rendering from what arrived."""
DENSE_THREADS = 4
"""Dense searches in flight at once; more wait (and, past their share of the deadline, are left out),
so a stalled vector store ties up these threads, not the server's."""
_REQUEST = "<request>"
"""The source a request's record errors name (their item is the record's place in the request)."""
_PATHS = frozenset({"/retrieve", "/records", "/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})
_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Unavailable(RuntimeError):
    """What the service cannot do now (not ready, the vector store down): a 503 that says why."""


class Forbidden(PermissionError):
    """A write the key may not make: a 403 that says why; nothing of the request is stored."""


@dataclass
class _Insert:
    """One POST /records on its way into the store, alone or in a group, and what it is answered."""

    records: list[Record]
    key: ApiKey | None
    warnings: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    answer: RecordsResponse | RecordsRejected | None = None
    error: Exception | None = None


class Metrics:
    """Prometheus metrics of one server, in a registry of its own. No label carries a tenant,
    a key or anything from a request but its path and status.

    Under ``--workers N`` (``PROMETHEUS_MULTIPROC_DIR`` set), prometheus_client keeps every
    worker's values in that folder and ``/metrics`` sums requests, stages and feed delays over
    the workers; gauges are per worker (a ``pid`` label)."""

    def __init__(self, store: CARStore):
        self.store = store
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.requests = Histogram("car_rag_http_request_seconds", "HTTP requests by path and status", ["path", "status"],
                                  buckets=_SECONDS, registry=self.registry)
        self.stages = Histogram("car_rag_retrieve_stage_seconds", "Time per /retrieve stage", ["stage"],
                                buckets=_SECONDS, registry=self.registry)
        self.degraded = Counter("car_rag_degraded_answers", "Answers that left a channel out", ["channel"],
                                registry=self.registry)
        self.ingested = Counter("car_rag_records_ingested", "Records posted, by outcome", ["outcome"], registry=self.registry)
        self.feed_delay = Histogram("car_rag_change_feed_delay_seconds",
                                    "From a change's write (another process's, in its transaction) to this process applying it",
                                    buckets=_SECONDS, registry=self.registry)
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
        if with_outbox and store.log.shared:
            try:
                self.pending.set(store._shared_log.count_pending())
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


class Service:
    """What the HTTP layer calls: retrieval under a deadline, atomic inserts, readiness."""

    def __init__(
        self,
        store: CARStore,
        *,
        api_keys: ApiKeys | None = None,
        timeout_ms: float = 2000,
        insert_window_ms: float = INSERT_WINDOW_MS,
        anchors: AnchorMode = "hybrid",
        owns_store: bool = False,
        **retriever_options: Any,
    ):
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be positive, got {timeout_ms}")
        if insert_window_ms < 0:
            raise ValueError(f"insert_window_ms must be 0 (no grouping) or more, got {insert_window_ms}")
        self.store = store
        self.owns_store = owns_store
        """Whether :meth:`close` closes the store (a worker process opened it for this service)."""
        self.api_keys = api_keys
        self.timeout_s = timeout_ms / 1000
        self.insert_window_s = insert_window_ms / 1000
        self.anchors = anchors
        self._options = retriever_options
        self.not_ready: str | None = "loading the retriever (and the embedding model)"
        self.metrics = Metrics(store)
        self._dense_pool = ThreadPoolExecutor(DENSE_THREADS, thread_name_prefix="car-rag-dense")
        self._resolver: ControllingAuthorityRetriever | None = None
        self._bm25: ControllingAuthorityRetriever | None = None
        self._dense: ControllingAuthorityRetriever | None = None
        self._storing = threading.Lock()  # one group stored at a time; the next one gathers meanwhile
        self._joining = threading.Lock()
        self._group: list[_Insert] | None = None  # inserts waiting for the next store ingest

    def load(self) -> None:
        """Build the retrievers (loading MiniLM for a dense channel); /readyz answers 200 after."""
        try:
            make = ControllingAuthorityRetriever
            self._resolver = make(self.store, anchors=self.anchors, **self._options)
            if self.anchors != "dense":
                self._bm25 = make(self.store, anchors="bm25", **self._options)
            if self.anchors != "bm25":
                self._dense = make(self.store, anchors="dense", **self._options)
            self.metrics.refresh()
            # The store is millions of long-lived objects that every full collection walks again: at
            # 100k records that stalled one request in a hundred by 150-280 ms (BM25 anchors, p99 261
            # ms against 10 ms frozen, evals/results/serve/gc-freeze.md). Frozen, they are left out.
            gc.freeze()
            self.not_ready = None
        except Exception as exc:
            log.exception("the retriever could not be built")
            self.not_ready = f"the retriever could not be built: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        self._dense_pool.shutdown(wait=False, cancel_futures=True)
        if self.owns_store:
            self.store.close()

    def readiness(self) -> str | None:
        """Why this process should not be sent requests now (None: ready): the retriever is still
        loading, or the shared store's database cannot be reached (its answers would miss what
        other processes write meanwhile)."""
        if self.not_ready:
            return self.not_ready
        return self._feed_down()

    def _feed_down(self) -> str | None:
        feed = self.store.feed
        if feed is None or feed.connected:
            return None
        since = "" if feed.down_since is None else f" for {time.time() - feed.down_since:.0f} s"
        return f"the shared store is unreachable{since} ({feed.error}): records written meanwhile are missing here"

    # ------------------------------------------------------------------ retrieval
    def answer(self, request: RetrieveRequest, caller: CallerContext | None) -> RetrieveResponse:
        resolver = self._resolver
        if resolver is None or self.not_ready:
            raise Unavailable(f"not ready: {self.not_ready}")
        query = request.query
        started = time.perf_counter()
        dense = self._dense_pool.submit(_timed, self._dense.channel_runs, query, caller) if self._dense else None
        runs: dict[str, list[ChannelHit]] = {}
        timings: dict[str, float] = {}
        degraded: list[str] = []
        if self._bm25 is not None:
            got, timings["bm25"] = _timed(self._bm25.channel_runs, query, caller)
            runs.update(got)
        if dense is not None:
            self._collect_dense(dense, started + self.timeout_s * DENSE_SHARE, runs, timings, degraded)
        if (down := self._feed_down()) is not None:
            degraded.append(f"authority: {down}")
            self.metrics.degraded.labels("authority").inc()
        result = resolver.resolve_runs(query, runs, caller, started=started)
        tick = time.perf_counter()
        k, policy = request.k, self.store.policy
        if request.format == "json":
            evidence = EvidencePack(format="json", packets=build_packets(result, policy, k))
        elif request.format == "xml":
            evidence = EvidencePack(format="xml", text=render_xml(result, policy=policy, k=k, token_budget=request.token_budget))
        elif request.format == "reader":
            evidence = EvidencePack(format="reader",
                                    text=render_reader(result, policy=policy, k=k, token_budget=request.token_budget))
        else:
            evidence = EvidencePack(format="plain", text=render_plain(result, k=k, token_budget=request.token_budget))
        timings.update(result.timings_ms)
        timings["evidence"] = (time.perf_counter() - tick) * 1000
        anchors = {h.doc_id for h in result.anchors}
        candidates = [
            Candidate(
                doc_id=hit.doc_id, rank=hit.rank, score=hit.score, anchor=hit.doc_id in anchors,
                channels={
                    name: ChannelEvidence(score=score, rank=hit.channel_ranks[name],
                                          contribution=hit.channel_contributions.get(name))
                    for name, score in hit.channel_scores.items()
                },
            )
            for hit in resolver.fuse(runs)
        ]
        posterior = result.scope_posterior
        for stage, ms in timings.items():
            self.metrics.stages.labels(stage).observe(ms / 1000)
        return RetrieveResponse(
            query=query,
            k=k,
            candidates=candidates,
            reranked=[
                RankedRecord.model_validate({**rec.to_dict(), "text": rec.record.text if request.with_text else None})
                for rec in result.top(k)
            ],
            evidence_pack=evidence,
            diagnostics=Diagnostics(
                timings_ms={name: round(ms, 3) for name, ms in timings.items()},
                channel_hits={name: len(hits) for name, hits in runs.items()},
                anchors=len(result.anchors),
                scope_ids=result.scope_ids,
                scope_posterior=None if posterior is None else [ScopeProbability.model_validate(p) for p in posterior.to_dict()],
                scope_links=[ScopeLinkOut.model_validate(link.to_dict()) for link in result.scope_links],
                ambiguity=None if result.ambiguity is None else AmbiguityOut.model_validate(result.ambiguity.to_dict()),
                degraded=degraded,
            ),
        )

    def _collect_dense(
        self,
        future: Future[tuple[dict[str, list[ChannelHit]], float]],
        deadline: float,
        runs: dict[str, list[ChannelHit]],
        timings: dict[str, float],
        degraded: list[str],
    ) -> None:
        """The dense run if it arrives by ``deadline``; else the reason it is left out."""
        try:
            got, timings["dense"] = future.result(timeout=max(0.0, deadline - time.perf_counter()))
            runs.update(got)
            return
        except FutureTimeout:
            future.cancel()  # still queued behind stalled searches: never started
            reason = f"timeout after {self.timeout_s * DENSE_SHARE * 1000:.0f} ms"
        except Exception as exc:  # the vector store refused or failed: answer without it
            log.warning("dense channel failed: %s: %s", type(exc).__name__, exc)
            reason = f"unavailable ({type(exc).__name__})"
        degraded.append(f"dense: {reason}")
        self.metrics.degraded.labels("dense").inc()

    # ------------------------------------------------------------------ inserts
    def insert(self, items: list[Any], key: ApiKey | None) -> RecordsResponse | RecordsRejected:
        """Store one request's records whole or not at all; what they voided, as far as ``key`` may read.

        The records are validated (and their scope filled) here, so a bad request is refused on its
        own. Requests within ``insert_window_ms`` of each other, or arriving while a store ingest
        runs, are then stored by one ingest (Chroma's per-call cost is paid once per group)."""
        parsed = parse_records(items, _REQUEST)
        filled = self.store.extractor.fill(parsed.records, source=_REQUEST, lines=parsed.lines)  # an LLM may be slow
        if parsed.errors or filled.errors:
            return self._rejected(parsed.errors + filled.errors, len(items))
        warnings = [str(m) for m in missing_scope(self.store.policy, filled.records)] + filled.warnings
        pending = _Insert(filled.records, key, warnings)
        if self.insert_window_s == 0:
            with self._storing:
                self._store_alone(pending)
        else:
            self._join(pending)
        if pending.error is not None:
            raise pending.error
        assert pending.answer is not None
        return pending.answer

    def _join(self, pending: _Insert) -> None:
        """Join the open group, or open one and store it after the window (a group commit)."""
        with self._joining:
            group, leads = self._group, self._group is None
            if group is None:
                group = self._group = []
            group.append(pending)
        if not leads:
            pending.done.wait()
            return
        time.sleep(self.insert_window_s)
        with self._storing:  # while an earlier group is stored, this one keeps taking requests
            with self._joining:
                self._group = None
            self._store(group)

    def _store(self, group: list[_Insert]) -> None:
        """One ingest for the group; if it fails or rejects anything (a cycle, a doc_id two requests
        send, a record its key may not replace), each request alone, so that one request's problem
        never fails another."""
        try:
            if not (len(group) > 1 and self._store_together(group)):
                for pending in group:
                    self._store_alone(pending)
        finally:
            for pending in group:
                pending.done.set()

    def _store_together(self, group: list[_Insert]) -> bool:
        """Ingest the group's records at once and answer each request its part; False: nothing was stored."""
        try:
            report = self.store.ingest([r for p in group for r in p.records], progress=False, atomic=True,
                                       may_replace=_Owners(group))
        except Exception as exc:
            log.info("a group of %d inserts was not stored together (%s); storing each alone", len(group), type(exc).__name__)
            return False
        if report.errors:
            return False
        edges = _edges_by_request(group, report)
        for n, pending in enumerate(group):
            pending.warnings += [w for w in report.warnings if w not in pending.warnings]  # the outbox's concern all
            mine = {r.doc_id for r in pending.records}
            pending.answer = self._answer(pending, [d for d in report.added if d in mine],
                                          [d for d in report.updated if d in mine], edges[n])
        return True

    def _store_alone(self, pending: _Insert) -> None:
        """Ingest one request's records; its answer, or the error its request raises."""
        owners = _Owners([pending])
        try:
            report = self.store.ingest(pending.records, progress=False, atomic=True, may_replace=owners)
        except Exception as exc:
            log.warning("insert failed: %s: %s", type(exc).__name__, exc)
            self.metrics.ingested.labels("failed").inc(len(pending.records))
            pending.error = Unavailable(
                f"the store did not take the batch ({type(exc).__name__}); no record of it was stored: retry")
            return
        if owners.refused:
            number, doc_id = owners.refused[0]
            assert pending.key is not None
            pending.error = Forbidden(f"key {pending.key.name!r} may not replace record {number} ({doc_id!r}): "
                                      "the doc_id is taken by a record this key does not own; nothing was stored")
        elif report.errors:
            pending.answer = self._rejected(report.errors, len(pending.records))
        else:
            pending.warnings += [w for w in report.warnings if w not in pending.warnings]  # vectors in the outbox
            pending.answer = self._answer(pending, report.added, report.updated, report.new_edges)

    def _answer(self, pending: _Insert, added: list[str], updated: list[str], edges: list[Edge]) -> RecordsResponse:
        """What one request stored, and the edges it made that its key may read."""
        unchanged = len(pending.records) - len(added) - len(updated)
        for outcome, count in (("added", len(added)), ("updated", len(updated)), ("unchanged", unchanged)):
            self.metrics.ingested.labels(outcome).inc(count)
        key = pending.key
        with self.store.lock.read():
            records = self.store.records
            readable: Callable[[str], bool] = (lambda _d: True) if key is None else (
                lambda d: d in records and key.caller.can_read(records[d]))
            shown = [e for e in edges if readable(e.superseder) and readable(e.target)]
        return RecordsResponse(
            added=added, updated=updated, unchanged=unchanged,
            newly_superseded=sorted({e.target for e in shown}),
            new_edges=[EdgeOut(superseder=e.superseder, target=e.target, rule=e.rule) for e in shown],
            warnings=pending.warnings,
        )

    def _rejected(self, errors: list[RecordError], count: int) -> RecordsRejected:
        self.metrics.ingested.labels("rejected").inc(count)
        return RecordsRejected(
            detail=f"{len({e.line for e in errors})} of {count} records rejected; nothing was stored",
            errors=[RecordProblem(item=e.line, doc_id=e.doc_id, field=e.field, message=e.message) for e in errors],
        )


class _Owners:
    """Whether each record of a group's requests may replace the stored record of its doc_id (the
    store asks while the write holds its turn, so the answer holds across processes): a key of a
    tenant replaces only its tenant's records that it may read, so a doc_id is no way to overwrite
    another tenant's record or to make a public one private. Keeps what it refused."""

    def __init__(self, group: list[_Insert]):
        self.keys = {r.doc_id: (number, p.key) for p in group for number, r in enumerate(p.records, start=1)}
        self.refused: list[tuple[int, str]] = []
        """(position in its request, doc_id) of each record refused."""

    def __call__(self, held: Record, new: Record) -> str | None:
        number, key = self.keys[new.doc_id]
        if key is None or key.tenant is None or (held.tenant == key.tenant and key.caller.can_read(held)):
            return None
        self.refused.append((number, new.doc_id))
        return "the doc_id is taken by a record this key does not own"


def _edges_by_request(group: list[_Insert], report: IngestReport) -> list[list[Edge]]:
    """A group ingest's new edges, per request: each to the request whose record made it. The store
    adds records one by one, each linking to those already there, so an edge is made by the later
    of its two records that this ingest added or replaced (an unchanged one was not added again)."""
    changed = set(report.added) | set(report.updated)
    made_by: dict[str, tuple[int, int]] = {}  # doc_id -> (its place in the ingest, its request)
    for n, pending in enumerate(group):
        for record in pending.records:
            if record.doc_id in changed:
                made_by[record.doc_id] = (len(made_by), n)
    edges: list[list[Edge]] = [[] for _ in group]
    for edge in report.new_edges:
        _, n = max(made_by[d] for d in (edge.superseder, edge.target) if d in made_by)
        edges[n].append(edge)
    return edges


def _timed(
    run: Callable[[str, CallerContext | None], dict[str, list[ChannelHit]]], query: str, caller: CallerContext | None
) -> tuple[dict[str, list[ChannelHit]], float]:
    tick = time.perf_counter()
    return run(query, caller), (time.perf_counter() - tick) * 1000


# ---------------------------------------------------------------------- HTTP
class _Refused(Exception):
    """A request answered before the app sees it (its body is too large, or its length unreadable)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


class _Edge:
    """Outermost ASGI layer: reads a request's body before the app sees it and refuses one over
    ``max_body`` bytes with 413, declared (Content-Length) or not (chunked), closing the connection
    rather than reading the rest; times every request into the metrics and marks every response
    ``nosniff`` (a JSON string holding retrieved text is never read as HTML)."""

    def __init__(self, app: Any, metrics: Metrics, max_body: int):
        self.app, self.metrics, self.max_body = app, metrics, max_body

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def marked(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-content-type-options", b"nosniff")]
            await send(message)

        try:
            try:
                body = await self._body(scope, receive)
            except _Refused as refused:
                await JSONResponse({"detail": refused.detail}, refused.status, refused.headers)(scope, receive, marked)
                return
            if body is None:
                status[0] = 499  # the client left before it had sent its request
                return
            unread = True

            async def replay() -> Any:
                nonlocal unread
                if unread:
                    unread = False
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # the app may wait for the client to disconnect

            await self.app(scope, replay, marked)
        finally:
            path = scope["path"] if scope["path"] in _PATHS else "other"
            self.metrics.requests.labels(path, str(status[0])).observe(time.perf_counter() - started)

    async def _body(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]]) -> bytes | None:
        """The whole body, up to ``max_body`` bytes (None: the client disconnected)."""
        too_large = _Refused(413, f"the body is larger than {self.max_body} bytes", {"Connection": "close"})
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise _Refused(400, "bad Content-Length header")
            if int(length) > self.max_body:
                raise too_large
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


_RECORDS_BODY = {
    "requestBody": {
        "required": True,
        "description": "one record, or a list of them, in the neutral format (README, Records)",
        "content": {"application/json": {"schema": {"anyOf": [
            Record.model_json_schema(), {"type": "array", "items": Record.model_json_schema()}]}}},
    }
}


_BEARER = HTTPBearer(auto_error=False, description="an API key of the server's keys file")


def _authenticate(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
) -> ApiKey | None:
    """The key a request presents (None on a server without keys); 401 without a known one."""
    keys: ApiKeys | None = request.app.state.service.api_keys
    if keys is None:
        return None
    if credentials is None:
        raise HTTPException(401, "missing API key: send 'Authorization: Bearer KEY'", {"WWW-Authenticate": "Bearer"})
    key = keys.lookup(credentials.credentials)
    if key is None:
        raise HTTPException(401, "unknown API key", {"WWW-Authenticate": "Bearer"})
    return key


Key = Annotated[ApiKey | None, Depends(_authenticate)]


def create_app(service: Service, *, max_body_bytes: int = 16 * 2**20) -> Any:
    """The ASGI application over ``service`` (the retriever is built when the app starts, so the
    port opens at once and /readyz says when it can answer)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=service.load, name="car-rag-load", daemon=True).start()
        yield
        service.close()

    app = FastAPI(
        title="car-rag", version=__version__, lifespan=lifespan,
        description="Controlling Authority Retrieval: the records a question is about, the ones that void them, "
                    "and which control.",
    )
    app.state.service = service

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes each bad value ("input"): a 100k-character query, or text, back.
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
        return JSONResponse({"detail": errors}, 422)

    @app.exception_handler(Unavailable)
    async def unavailable(_: Request, exc: Unavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, 503)

    @app.exception_handler(Forbidden)
    async def forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, 403)

    @app.post("/retrieve", response_model=RetrieveResponse, responses={
        400: {"description": "a caller in the body of a server with API keys"}, 401: {"description": "no or unknown key"},
        503: {"description": "not ready, or no answer within the deadline"}})
    async def retrieve(body: RetrieveRequest, key: Key) -> RetrieveResponse:
        """Rank the controlling records for a question: candidates, the final ranking, the evidence, diagnostics."""
        if key is not None and body.caller is not None:
            raise HTTPException(400, "this server takes the caller from the API key: leave 'caller' out of the body")
        caller = key.caller if key is not None else (
            None if body.caller is None else CallerContext(body.caller.tenant, frozenset(body.caller.principals)))
        try:
            with anyio.fail_after(service.timeout_s):
                return await anyio.to_thread.run_sync(service.answer, body, caller, abandon_on_cancel=True)
        except TimeoutError:
            raise HTTPException(503, f"no answer within {service.timeout_s * 1000:.0f} ms: the store is busy") from None

    @app.post("/records", response_model=RecordsResponse, openapi_extra=_RECORDS_BODY, responses={
        401: {"description": "no or unknown key"}, 403: {"description": "the key may not write these records"},
        413: {"description": "body too large"}, 422: {"model": RecordsRejected, "description": "nothing was stored"},
        503: {"description": "the store did not take the batch; nothing was stored"}})
    async def records(request: Request, key: Key) -> Any:
        """Add or replace records (idempotent by doc_id), all or none; says what they voided."""
        if key is not None and not key.write:
            raise HTTPException(403, f"key {key.name!r} may not write records")
        try:
            data = json.loads(await request.body())
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
            return JSONResponse(RecordsRejected(detail=f"the body is not JSON: {exc}", errors=[]).model_dump(), 422)
        items = data if isinstance(data, list) else [data]
        if not items:
            return JSONResponse(RecordsRejected(detail="no records in the body", errors=[]).model_dump(), 422)
        if key is not None and key.tenant is not None:
            for number, item in enumerate(items, start=1):
                if not isinstance(item, dict) or item.get("tenant") != key.tenant:
                    doc_id = item.get("doc_id") if isinstance(item, dict) else None
                    raise HTTPException(403, f"key {key.name!r} writes records of tenant {key.tenant!r} only: record {number} "
                                             f"({doc_id!r}) is not one; nothing was stored")
        outcome = await anyio.to_thread.run_sync(service.insert, items, key)
        if isinstance(outcome, RecordsRejected):
            return JSONResponse(outcome.model_dump(), 422)
        return outcome

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"description": "not ready, and why"}})
    async def readyz() -> JSONResponse:
        """The store is open, the retriever (with its model) is loaded and, for a shared store, its
        database answers."""
        reason = service.readiness()
        body: dict[str, Any] = {"ready": reason is None, "records": len(service.store), "anchors": service.anchors,
                                "auth": "api-keys" if service.api_keys is not None else "none", "head": service.store.head}
        if reason:
            body["reason"] = reason
        return JSONResponse(body, 200 if reason is None else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text: request latency by path and status, /retrieve stages, degraded answers, store size."""
        return Response(service.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    return _Edge(app, service.metrics, max_body_bytes)
