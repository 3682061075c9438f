"""The two-stage controlling-authority retriever over a :class:`CARStore`.

Stage 1 finds the records the query is about by BM25, dense search or their fusion,
inside the caller's eligibility; the latent-scope step (:mod:`car_rag.latent_scope`) turns
those candidates into a posterior over scopes and picks anchors that cover the probable
scopes; Stages 2 and 3 are :mod:`car_rag.resolution`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import date, datetime
from typing import Literal

import numpy as np

from car_rag.ambiguity import Ambiguity
from car_rag.channels import ChannelHit, FusedHit, LexicalIndex, reciprocal_rank_fusion
from car_rag.channels.fusion import DEFAULT_TEMPERATURES, calibrated_fusion
from car_rag.eligibility import CallerContext, Gate, RecordFilter, instant
from car_rag.graph import AuthorityGraph
from car_rag.latent_scope import AMBIGUITY_MARGIN, QuestionScope, TieOrder, detect_ambiguity, read_question_scope, select_anchors
from car_rag.namespacing import as_shown
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, ResolutionMode, RetrievalResult, RetrievedRecord, resolve_authority
from car_rag.store import CARStore
from car_rag.store.lean import LeanStore

__all__ = [
    "ControllingAuthorityRetriever",
    "RetrievalResult",
    "RetrievedRecord",
    "AnchorMode",
    "FusionMode",
    "ResolutionMode",
]

log = logging.getLogger(__name__)

When = date | datetime | str
"""An ``as_of``: a day (its last instant), an instant, or either in ISO 8601."""
AnchorMode = Literal["bm25", "dense", "hybrid"]
FusionMode = Literal["calibrated", "rrf"]

SCOPE_TIES = 0.5
"""Scopes whose posterior is within this fraction of a more probable one count as tied
(chosen leave-one-suite-out, ``evals/results/anchors/loso.md``)."""
SCOPE_DECAY = 0.5
"""A scope's next anchor is worth this fraction of its previous one (same provenance)."""
MASKS_KEPT = 64
"""Eligibility masks a retriever keeps, one per gate (caller, ``as_of``, filter) asked lately."""
MASK_BYTES = 64 * 2**20
"""...and the bytes they may hold together (a mask is a byte per record): at 10M records 64
masks would hold 640 MB of a ``--stage2 sql`` worker's memory, 6 hold 60 MB."""


class ControllingAuthorityRetriever:
    """Query → anchors → authority closure → active frontier, over a :class:`CARStore`.

    ``anchors`` picks the Stage-1 channels; ``k1`` is how many fused Stage-1 hits become
    anchors; ``depth`` is how deep each channel is read before fusion; ``resolution`` is
    ``"rules"`` (policy rules and explicit edges, the RSSG) or ``"timestamp"`` (the paper's
    anchor-only baseline, for comparison); ``scope_lookup_limit`` caps how many records one
    scope id named in the query may pull in; ``lexical`` replaces the store's BM25 index for
    Stage 1 (e.g. a ``rank-bm25`` index for parity with the paper).

    ``fusion`` is ``"calibrated"`` (per-channel softmax over the query's scores, averaged;
    ``temperatures`` per channel) or ``"rrf"`` (reciprocal rank fusion). With
    ``latent_scope`` (default) the ``depth`` fused candidates vote a posterior over scopes,
    the anchors cover the probable scopes (``scope_ties``, ``scope_decay``, ``scope_tie_order``:
    see :func:`~car_rag.latent_scope.select_anchors`), every record reports its scope's
    probability, and a question that plausibly names several scopes it does not tell apart
    (within ``ambiguity_margin`` of the most probable) gets the result's ``ambiguity``; without
    it the top ``k1`` fused hits are the anchors, as in the paper.

    ``min_confidence`` is τ of the safe frontier: only edges at least that sure void; see
    :data:`~car_rag.resolution.DEFAULT_MIN_CONFIDENCE` for why 0.5.

    ``store`` may be a :class:`~car_rag.store.lean.LeanStore` (a store on PostgreSQL opened with
    ``stage2="sql"``): each query then reads the records its latent-scope step and Stages 2 and 3
    need from the database (:meth:`~car_rag.store.lean.LeanStore.neighbourhood`) instead of a graph
    in memory, with the same result; ``resolution="timestamp"`` needs the whole graph there.

    Every query may be asked ``as_of`` a date (the records that existed then, and the frontier
    they made: ``docs/point-in-time.md``) and under ``filters`` (a :class:`RecordFilter`); both
    are compiled into every channel and Stage 2 like the caller's eligibility.
    """

    def __init__(
        self,
        store: CARStore | LeanStore,
        *,
        anchors: AnchorMode = "hybrid",
        k1: int = 10,
        depth: int = 50,
        resolution: ResolutionMode = "rules",
        scope_lookup_limit: int = 20,
        lexical: LexicalIndex | None = None,
        fusion: FusionMode = "calibrated",
        temperatures: dict[str, float] | None = None,
        latent_scope: bool = True,
        scope_ties: float = SCOPE_TIES,
        scope_decay: float = SCOPE_DECAY,
        scope_tie_order: TieOrder = "score",
        ambiguity_margin: float = AMBIGUITY_MARGIN,
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    ):
        if anchors not in ("bm25", "dense", "hybrid"):
            raise ValueError(f"anchors must be 'bm25', 'dense' or 'hybrid', got {anchors!r}")
        if resolution not in ("rules", "timestamp"):
            raise ValueError(f"resolution must be 'rules' or 'timestamp', got {resolution!r}")
        if resolution == "timestamp" and isinstance(store, LeanStore):
            raise ValueError("resolution='timestamp' reads whole scope buckets: open the store with stage2='memory'")
        if k1 < 1 or depth < k1:
            raise ValueError(f"need 1 <= k1 <= depth, got k1={k1}, depth={depth}")
        if fusion not in ("calibrated", "rrf"):
            raise ValueError(f"fusion must be 'calibrated' or 'rrf', got {fusion!r}")
        if not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
        if not 0.0 <= scope_ties < 1.0 or not 0.0 < scope_decay <= 1.0:
            raise ValueError(f"need 0 <= scope_ties < 1 and 0 < scope_decay <= 1, got {scope_ties}, {scope_decay}")
        if scope_tie_order not in ("score", "state"):
            raise ValueError(f"scope_tie_order must be 'score' or 'state', got {scope_tie_order!r}")
        if not 0.0 <= ambiguity_margin < 1.0:
            raise ValueError(f"ambiguity_margin must be in [0, 1), got {ambiguity_margin}")
        self.temperatures = {**DEFAULT_TEMPERATURES, **(temperatures or {})}
        if any(t <= 0 for t in self.temperatures.values()):
            raise ValueError(f"temperatures must be positive, got {self.temperatures}")
        self.fusion = fusion
        self.latent_scope = latent_scope
        self.scope_ties = scope_ties
        self.scope_decay = scope_decay
        self.scope_tie_order: TieOrder = scope_tie_order
        self.ambiguity_margin = ambiguity_margin
        self.store = store
        self.anchor_mode = anchors
        self.k1 = k1
        self.depth = depth
        self.resolution = resolution
        self.scope_lookup_limit = scope_lookup_limit
        self.min_confidence = min_confidence
        self.lexical = lexical
        self._pool: ThreadPoolExecutor | None = None
        self._mask_index: tuple[object, int] | None = None
        self._masks: dict[Gate, np.ndarray] = {}
        self._times: np.ndarray | None = None  # the lexical index's records' dates, for as_of masks
        if anchors != "bm25":
            _ = store.embedder.model  # load now, so no query's timing includes loading the model

    # ------------------------------------------------------------------ Stage 1
    def stage1(
        self, query: str, caller: CallerContext | None = None, *, as_of: When | None = None, filters: RecordFilter | None = None
    ) -> list[FusedHit]:
        """The ``k1`` anchors for ``query`` among records ``caller`` may read (after the
        latent-scope step when it is on)."""
        vector = self._embed(query)
        gate = _gate(caller, as_of, filters)
        with self.store.lock.read():
            candidates = self.fuse(self._runs(query, vector, gate))
            return self._anchors(query, candidates, gate, self._query_graph(query, candidates, gate))[0]

    def channel_runs(
        self,
        query: str,
        caller: CallerContext | None = None,
        *,
        channels: Collection[str] | None = None,
        as_of: When | None = None,
        filters: RecordFilter | None = None,
    ) -> dict[str, list[ChannelHit]]:
        """Each Stage-1 channel's top ``depth`` for ``query`` (embedding it when a dense channel
        is on), before fusion: what :meth:`resolve_runs` takes. ``channels`` searches only some
        of this retriever's channels (a service runs the dense one under its own deadline)."""
        wanted = self._channels(channels)
        vector = self._embed(query) if "dense" in wanted else None
        with self.store.lock.read():
            return self._runs(query, vector, _gate(caller, as_of, filters), wanted)

    def _channels(self, channels: Collection[str] | None) -> tuple[str, ...]:
        own = {"bm25": ("bm25",), "dense": ("dense",)}.get(self.anchor_mode, ("bm25", "dense"))
        if channels is None:
            return own
        unknown = [c for c in channels if c not in own]
        if unknown:
            raise ValueError(f"channels {unknown} are not among this retriever's ({', '.join(own)})")
        return tuple(c for c in own if c in channels)

    def _embed(self, query: str) -> np.ndarray | None:
        """The query's vector, when a dense channel is on; done before the store's lock is taken."""
        return self.store.embedder.encode([query])[0] if self.anchor_mode != "bm25" else None

    def _runs(
        self, query: str, vector: np.ndarray | None, gate: Gate | None, channels: Collection[str] = ("bm25", "dense")
    ) -> dict[str, list[ChannelHit]]:
        runs: dict[str, list[ChannelHit]] = {}
        dense: Future[list[ChannelHit]] | None = None
        where = gate.chroma_where() if gate is not None else None
        # A lean store's gate is PostgreSQL's to decide: the dense channel asks it once per gate.
        readable = None if gate is None or isinstance(self.store, LeanStore) else functools.partial(self._readable, gate)
        lexical = self.anchor_mode in ("bm25", "hybrid") and "bm25" in channels
        # The part of the records a date or filter admits, for an engine that answers them from
        # its unfiltered nearest records (VectorChannel.search; exact search has no use for it);
        # a caller's eligibility stays the engine's pre-filter.
        dated = gate is not None and gate.caller is None and vector is not None and not self.store.dense.exact
        mask = self._mask(gate) if lexical or dated else None
        search = functools.partial(self.store.dense.search, where=where, readable=readable)
        if dated and mask is not None and len(mask):
            search = functools.partial(search, share=float(np.count_nonzero(mask)) / len(mask))
        if vector is not None and lexical and not self.store.dense.exact:
            # Chroma's HNSW search releases the GIL: BM25 runs meanwhile (0.55x the time of one
            # after the other at 100k records, evals/perf/concurrency.py; exact search below
            # 20k records gains nothing, so it stays on this thread).
            dense = self._dense_pool().submit(search, vector, self.depth)
        if lexical:
            runs["bm25"] = (self.lexical or self.store.lexical).search(query, self.depth, mask=mask)
        if dense is not None:
            runs["dense"] = dense.result()
        elif vector is not None:
            runs["dense"] = search(vector, self.depth)
        return runs

    def _dense_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="car-rag-dense")
        return self._pool

    def fuse(self, runs: dict[str, list[ChannelHit]]) -> list[FusedHit]:
        """The fused candidates (top ``depth``) of channel runs, by this retriever's ``fusion``."""
        if self.fusion == "rrf":
            return reciprocal_rank_fusion(runs, k=self.depth)
        return calibrated_fusion(runs, k=self.depth, temperatures=self.temperatures)

    def _anchors(
        self, query: str, candidates: list[FusedHit], gate: Gate | None, graph: AuthorityGraph
    ) -> tuple[list[FusedHit], QuestionScope | None, Ambiguity | None]:
        """Anchors, what the question says about its scope (None without the latent-scope
        step: the policy's patterns name it) and its ambiguity, read from ``graph`` (:meth:`_query_graph`)."""
        if not self.latent_scope:
            return candidates[: self.k1], None, None
        policy = self.store.policy
        can_read = None if gate is None else gate.can_read  # None: no read check at all (the fast path)
        readable = can_read or (lambda _r: True)
        lexical = self.lexical or self.store.lexical
        scope = read_question_scope(
            query,
            candidates,
            graph,
            policy,
            readable=can_read,
            document_frequency=functools.partial(lexical.document_frequency, mask=self._mask(gate)),
            lookup_limit=self.scope_lookup_limit,
        )
        anchors = select_anchors(
            candidates,
            scope.posterior,
            graph,
            policy,
            self.k1,
            ties=self.scope_ties,
            decay=self.scope_decay,
            tie_order=self.scope_tie_order,
            readable=readable,
        )
        ambiguity = detect_ambiguity(candidates, scope.posterior, graph, policy, margin=self.ambiguity_margin, readable=readable)
        return anchors, scope, ambiguity

    def _mask(self, gate: Gate | None) -> np.ndarray | None:
        if gate is None:
            return None
        lexical = self.lexical or self.store.lexical
        if self._mask_index != (lexical, lexical.generation):  # an ingest changed the index
            self._mask_index, self._masks, self._times = (lexical, lexical.generation), {}, None
        if gate not in self._masks:
            kept = max(1, min(MASKS_KEPT, MASK_BYTES // max(1, len(lexical.doc_ids))))
            while len(self._masks) >= kept:
                self._masks.pop(next(iter(self._masks)))
            if gate.as_of is not None and self._times is None and not isinstance(self.store, LeanStore):
                self._times = self._dates(lexical.doc_ids)
            self._masks[gate] = self._gate_mask(gate, lexical.doc_ids, self._times)
        return self._masks[gate]

    def _readable(self, gate: Gate, doc_ids: Sequence[str]) -> np.ndarray:
        """``gate``'s mask over ids the dense channel asks about (its exact search's rows, or the
        nearest records Chroma gave): the BM25 mask where both hold the records in one order (as a
        store builds them; one compare in C instead of a pass in Python for each new date), else
        built for them."""
        lexical = self.lexical or self.store.lexical
        same = len(doc_ids) == len(lexical.doc_ids) and doc_ids == lexical.doc_ids
        if same and (mask := self._mask(gate)) is not None:
            return mask
        return self._gate_mask(gate, doc_ids)

    def _gate_mask(self, gate: Gate, doc_ids: Sequence[str], times: np.ndarray | None = None) -> np.ndarray:
        """``gate``'s mask over ``doc_ids``, its date compared as one array (a query asked as of a
        new date costs no pass over the records in Python); ``times``: :meth:`_dates` of ``doc_ids``."""
        if isinstance(self.store, LeanStore):  # decided over the stored records, as its dense channel's
            return self.store.gate_mask(gate, doc_ids)
        records = self.store.records
        if gate.as_of is None:
            return gate.mask(doc_ids, records)
        existed = (self._dates(doc_ids) if times is None else times) <= gate.as_of.timestamp()
        rest = Gate(gate.caller, None, gate.filter)
        return existed & rest.mask(doc_ids, records) if rest else existed

    def _dates(self, doc_ids: Sequence[str]) -> np.ndarray:
        """Each record's date in seconds (an undated one's before every date; an id with no stored
        record after every date: never a candidate), in ``doc_ids`` order."""
        records = self.store.records
        return np.fromiter(
            (records[d].sort_time.timestamp() if d in records else np.inf for d in doc_ids), dtype=np.float64, count=len(doc_ids)
        )

    def _query_graph(self, query: str, hits: Sequence[FusedHit], gate: Gate | None) -> AuthorityGraph:
        """The graph the latent-scope step and Stages 2 and 3 read for ``hits`` (the fused
        candidates, or the anchors), as it stood at the gate's ``as_of`` where it has one: the
        store's, or on a :class:`LeanStore` the query's neighbourhood read from its database."""
        store = self.store
        if isinstance(store, LeanStore):
            graph = store.neighbourhood(query, [h.doc_id for h in hits], store.policy.scope_ids_in(query))
        else:
            graph = store.graph
        return graph if gate is None or gate.as_of is None else graph.as_of(gate.as_of)

    # ------------------------------------------------------------------ Stage 2 + 3
    def resolve(
        self,
        query: str,
        anchors: list[FusedHit],
        caller: CallerContext | None = None,
        *,
        scope: QuestionScope | None = None,
        ambiguity: Ambiguity | None = None,
        as_of: When | None = None,
        filters: RecordFilter | None = None,
        graph: AuthorityGraph | None = None,
    ) -> RetrievalResult:
        """Stage 2 + 3 over the store's graph (as it stood ``as_of``) for given Stage-1 anchors
        (see :func:`resolve_authority`); ``graph``: the one :meth:`_query_graph` gave for them."""
        gate = _gate(caller, as_of, filters)
        with self.store.lock.read():
            result = resolve_authority(
                self._query_graph(query, anchors, gate) if graph is None else graph,
                self.store.policy,
                query,
                anchors,
                caller,
                filters=filters,
                resolution=self.resolution,
                scope_lookup_limit=self.scope_lookup_limit,
                scope_ids=None if scope is None else scope.named,
                posterior=None if scope is None else scope.posterior,
                min_confidence=self.min_confidence,
            )
        if scope is not None:
            result.scope_links = scope.links
        result.ambiguity = ambiguity
        return as_shown(result)  # tenants' records by the doc_ids their writers gave (car_rag.namespacing)

    # ------------------------------------------------------------------ all stages
    def resolve_runs(
        self,
        query: str,
        runs: dict[str, list[ChannelHit]],
        caller: CallerContext | None = None,
        *,
        started: float | None = None,
        as_of: When | None = None,
        filters: RecordFilter | None = None,
    ) -> RetrievalResult:
        """Fusion, the latent-scope step and Stages 2 + 3 for channel runs already searched
        (what :meth:`retrieve` does after searching; a study can replay cached runs, searched
        under the same ``as_of`` and ``filters``). The result keeps the fused candidates
        (``candidates``), so no caller fuses again."""
        started = time.perf_counter() if started is None else started
        gate = _gate(caller, as_of, filters)
        with self.store.lock.read():
            candidates = self.fuse(runs)
            stage1_done = time.perf_counter()
            graph = self._query_graph(query, candidates, gate)
            anchors, scope, ambiguity = self._anchors(query, candidates, gate, graph)
            latent_done = time.perf_counter()
            result = self.resolve(
                query, anchors, caller, scope=scope, ambiguity=ambiguity, as_of=as_of, filters=filters, graph=graph
            )
        result = as_shown(replace(result, candidates=candidates))
        result.timings_ms = {
            "stage1": (stage1_done - started) * 1000,
            "latent_scope": (latent_done - stage1_done) * 1000,
            **result.timings_ms,
            "total": (time.perf_counter() - started) * 1000,
        }
        return result

    def retrieve(
        self, query: str, caller: CallerContext | None = None, *, as_of: When | None = None, filters: RecordFilter | None = None
    ) -> RetrievalResult:
        """Run all three stages for one query; ``caller`` restricts every stage to what they may read
        (no caller: unrestricted, as for a trusted service), ``as_of`` to the records that existed
        at that date (a day: its end) and the frontier they made, ``filters`` to what it keeps."""
        _check_query(query)
        started = time.perf_counter()
        when = None if as_of is None else instant(as_of)
        # The query is embedded before the lock is taken; all stages then read one state
        # of the store, so an ingest running meanwhile is seen entirely or not at all.
        return self._retrieve(query, self._embed(query), caller, started, when, filters)

    def retrieve_many(
        self,
        queries: Sequence[str],
        caller: CallerContext | None = None,
        *,
        as_of: When | None = None,
        filters: RecordFilter | None = None,
    ) -> list[RetrievalResult]:
        """:meth:`retrieve` for each query, with the queries embedded together in batches: one
        forward pass per batch instead of one per query. Each result's timings include its share
        of the batched embedding."""
        for query in queries:
            _check_query(query)
        when = None if as_of is None else instant(as_of)
        if not queries:
            return []
        started = time.perf_counter()
        vectors = self.store.embedder.encode(queries) if self.anchor_mode != "bm25" else None
        share = (time.perf_counter() - started) / len(queries)
        return [
            self._retrieve(query, None if vectors is None else vectors[i], caller, time.perf_counter() - share, when, filters)
            for i, query in enumerate(queries)
        ]

    def _retrieve(
        self,
        query: str,
        vector: np.ndarray | None,
        caller: CallerContext | None,
        started: float,
        as_of: datetime | None = None,
        filters: RecordFilter | None = None,
    ) -> RetrievalResult:
        gate = _gate(caller, as_of, filters)
        with self.store.lock.read():
            runs = self._runs(query, vector, gate)
            result = self.resolve_runs(query, runs, caller, started=started, as_of=as_of, filters=filters)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "query %r: %d anchors (%s), %d records, %d active; %s",
                query[:80],
                len(result.anchors),
                self.anchor_mode,
                len(result),
                sum(r.status == "active" for r in result),
                ", ".join(f"{name} {ms:.1f} ms" for name, ms in result.timings_ms.items()),
            )
        return result


def _gate(caller: CallerContext | None, as_of: When | None, filters: RecordFilter | None) -> Gate | None:
    """What decides a query's candidates; None where nothing narrows them (the fast path), and
    a caller alone gated as it always was."""
    if as_of is None and not filters:
        return None if caller is None else Gate(caller)
    return Gate(caller, None if as_of is None else instant(as_of), filters or None)


def _check_query(query: object) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
