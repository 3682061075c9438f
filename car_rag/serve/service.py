"""The service behind ``car-rag serve``'s routes: retrieval under a per-request deadline that answers
from BM25 when the dense channel is slow, inserts (:mod:`.inserts`), readiness and metrics.

One process owns the store and serves queries and inserts from many threads (the store's
readers-writer lock keeps each query on one state of it). The dense channel (the query
embedding, then Chroma) runs beside BM25 in a small pool of its own: when it has not answered
within three quarters of the deadline the answer is fused from BM25 alone and says so
(``diagnostics.degraded``); a request never waits past its deadline.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import Any

from car_rag.annotations import annotations_for
from car_rag.authority_chain import authority_chain
from car_rag.channels import ChannelHit
from car_rag.eligibility import CallerContext, RecordFilter, as_of_label, filter_of, instant
from car_rag.evidence import build_packets, evidence_form, render, render_plain
from car_rag.resolution import RetrievalResult, RetrievedRecord
from car_rag.retriever import AnchorMode, ControllingAuthorityRetriever
from car_rag.serve import INSERT_WINDOW_MS
from car_rag.serve.errors import Unavailable
from car_rag.serve.inserts import Inserts
from car_rag.serve.keys import ApiKey, ApiKeys
from car_rag.serve.metrics import Metrics
from car_rag.serve.schema import (
    AmbiguityOut,
    Candidate,
    ChannelEvidence,
    Diagnostics,
    EvidencePack,
    RankedRecord,
    RecordsRejected,
    RecordsResponse,
    RetrieveRequest,
    RetrieveResponse,
    ScopeLinkOut,
    ScopeProbability,
)
from car_rag.store import CARStore
from car_rag.store.lean import LeanStore

__all__ = ["Service", "DENSE_SHARE", "DENSE_THREADS"]

log = logging.getLogger(__name__)

DENSE_SHARE = 0.75
"""Of a request's deadline, how long the dense channel may take; the rest is for fusion, Stages 2-3
and rendering from what arrived."""
DENSE_THREADS = 4
"""Dense searches in flight at once; more wait (and, past their share of the deadline, are left out),
so a stalled vector store ties up these threads, not the server's."""


class Service:
    """What the HTTP layer calls: retrieval under a deadline, atomic inserts, readiness."""

    def __init__(
        self,
        store: CARStore | LeanStore,
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
        self.anchors = anchors
        self._options = retriever_options
        self.not_ready: str | None = "loading the retriever (and the embedding model)"
        self.metrics = Metrics(store)
        self._dense_pool = ThreadPoolExecutor(DENSE_THREADS, thread_name_prefix="car-rag-dense")
        self._retriever: ControllingAuthorityRetriever | None = None
        self.inserts = Inserts(store, self.metrics, insert_window_ms / 1000) if isinstance(store, CARStore) else None
        """None where the store is open with Stage 2 in SQL (a :class:`LeanStore` stores nothing)."""

    def load(self) -> None:
        """Build the retrievers (loading MiniLM for a dense channel); /readyz answers 200 after."""
        try:
            self._retriever = ControllingAuthorityRetriever(self.store, anchors=self.anchors, **self._options)
            self.metrics.refresh()
            # The store is millions of long-lived objects that every full collection walks again: at
            # 100k records that stalled one request in a hundred by 150-280 ms (BM25 anchors, p99 261
            # ms against 10 ms frozen, evals/results/serve/gc-freeze.md). Frozen, they are left out.
            gc.freeze()
            self.not_ready = None
        except Exception as exc:
            log.exception("the retriever could not be built")
            self.not_ready = f"the retriever could not be built ({type(exc).__name__}; the server's log says why)"

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
        """Why the shared store's feed is down, as a response may say it: the error's type alone
        (its message names the database's host and user; the log has it)."""
        feed = self.store.feed
        if feed is None or feed.connected:
            return None
        since = "" if feed.down_since is None else f" for {time.time() - feed.down_since:.0f} s"
        kind = (feed.error or "").split(":", 1)[0]
        return f"the shared store is unreachable{since} ({kind}): records written meanwhile are missing here"

    # ------------------------------------------------------------------ retrieval
    def asked(self, request: RetrieveRequest) -> tuple[datetime | None, RecordFilter | None]:
        """The request's ``as_of`` and ``filters``; a ValueError naming the field that is wrong."""
        as_of = None if request.as_of is None else instant(request.as_of)
        filters = None if request.filters is None else filter_of(request.filters, self.store.policy.scope_keys)
        return as_of, filters or None

    def answer(self, request: RetrieveRequest, caller: CallerContext | None) -> RetrieveResponse:
        retriever = self._retriever
        if retriever is None or self.not_ready:
            raise Unavailable(f"not ready: {self.not_ready}")
        query = request.query
        as_of, filters = self.asked(request)
        asked = {"as_of": as_of, "filters": filters}
        started = time.perf_counter()
        dense = None
        if retriever.anchor_mode != "bm25":
            dense = self._dense_pool.submit(_timed, retriever.channel_runs, query, caller, ("dense",), asked)
        runs: dict[str, list[ChannelHit]] = {}
        timings: dict[str, float] = {}
        degraded: list[str] = []
        if retriever.anchor_mode != "dense":
            got, timings["bm25"] = _timed(retriever.channel_runs, query, caller, ("bm25",), asked)
            runs.update(got)
        if dense is not None:
            self._collect_dense(dense, started + self.timeout_s * DENSE_SHARE, runs, timings, degraded)
        if (down := self._feed_down()) is not None:
            degraded.append(f"authority: {down}")
            self.metrics.degraded.labels("authority").inc()
        result = retriever.resolve_runs(query, runs, caller, started=started, as_of=as_of, filters=filters)
        tick = time.perf_counter()
        k, policy = request.k, self.store.policy
        if request.format == "json":
            evidence = EvidencePack(format="json", packets=build_packets(result, policy, k))
        else:
            form = evidence_form(request.format)  # "xml" (audit) still accepted, with a warning in the log
            if form == "plain" and request.marked:
                text = render_plain(result, k=k, token_budget=request.token_budget, marked=True)
            else:
                text = render(result, form, policy=policy, k=k, token_budget=request.token_budget)
            evidence = EvidencePack(format=form, text=text)
        timings.update(result.timings_ms)
        timings["evidence"] = (time.perf_counter() - tick) * 1000
        anchors = {h.doc_id for h in result.anchors}
        candidates = [
            Candidate(
                doc_id=hit.doc_id,
                rank=hit.rank,
                score=hit.score,
                anchor=hit.doc_id in anchors,
                channels={
                    name: ChannelEvidence(
                        score=score, rank=hit.channel_ranks[name], contribution=hit.channel_contributions.get(name)
                    )
                    for name, score in hit.channel_scores.items()
                },
            )
            for hit in result.candidates
        ]
        posterior = result.scope_posterior
        for stage, ms in timings.items():
            self.metrics.stages.labels(stage).observe(ms / 1000)
        return RetrieveResponse(
            query=query,
            k=k,
            as_of=None if as_of is None else as_of_label(as_of),
            filters=None if filters is None else filters.to_dict(),
            candidates=candidates,
            reranked=[
                RankedRecord.model_validate(
                    {
                        **rec.to_dict(),
                        "text": rec.record.text if request.with_text else None,
                        **(self._whole(rec, result, caller) if request.with_records else {}),
                    }
                )
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

    def explain(self, doc_id: str, caller: CallerContext | None) -> dict[str, Any]:
        """The authority chain of ``doc_id`` as ``caller`` may see it (:func:`~car_rag.authority_chain.authority_chain`,
        at the retriever's ``min_confidence``); a KeyError, in the same words, for a record that does not
        exist and for one the caller may not read."""
        retriever = self._retriever
        if retriever is None or self.not_ready:
            raise Unavailable(f"not ready: {self.not_ready}")
        if isinstance(self.store, LeanStore):
            raise NotImplementedError("explain follows the graph in memory: this server runs Stage 2 in SQL (--stage2 memory)")
        with self.store.lock.read():
            return authority_chain(self.store, doc_id, caller, min_confidence=retriever.min_confidence)

    def _whole(self, item: RetrievedRecord, result: RetrievalResult, caller: CallerContext | None) -> dict[str, Any]:
        """The record and its annotations, for ``with_records``: an explicit ``supersedes`` entry naming a
        record ``caller`` may not read is left out (its id is not the caller's to see)."""
        record = item.record.model_dump(mode="json")
        if caller is not None:
            named = [entry if isinstance(entry, str) else entry["id"] for entry in record["supersedes"]]
            stored = self.store.records if isinstance(self.store, CARStore) else self.store.fetch(named)
            record["supersedes"] = [
                entry
                for entry in record["supersedes"]
                if (target := entry if isinstance(entry, str) else entry["id"]) in stored and caller.can_read(stored[target])
            ]
        return {"record": record, "annotations": annotations_for(item, result)}

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
        """Store one request's records whole or not at all (:class:`Inserts`); what they voided, as far
        as ``key`` may read."""
        if self.inserts is None:
            raise Unavailable(
                "this worker serves queries with Stage 2 in SQL (--stage2 sql) and stores nothing; nothing was "
                "stored: send records to a worker serving with --stage2 memory, or run car-rag ingest"
            )
        return self.inserts.insert(items, key)


def _timed(
    run: Callable[..., dict[str, list[ChannelHit]]],
    query: str,
    caller: CallerContext | None,
    channels: tuple[str, ...],
    asked: dict[str, Any],
) -> tuple[dict[str, list[ChannelHit]], float]:
    tick = time.perf_counter()
    return run(query, caller, channels=channels, **asked), (time.perf_counter() - tick) * 1000
