"""Ingest: records into a store, embedded and committed a chunk at a time.

Ingest is idempotent by ``doc_id``: an unchanged record is skipped before it is embedded, a
changed one replaces the old, and a rejected one leaves everything already stored untouched. A
chunk is embedded outside the store's lock (the slow part), then, in one transaction of the record
log (a shared log: this process's turn among the writers) and under the write lock, it takes in
what other processes committed before it, enters the graph, is made durable, and reaches BM25; a
chunk that fails is taken back out of the graph (:meth:`Ingest.run` says how).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from car_rag.embedding import Embedder
from car_rag.extractors import MissingScope, ScopeExtractor, missing_scope
from car_rag.graph import Edge, SupersessionCycleError
from car_rag.policy import Policy
from car_rag.record_log import LogWriter, RecordLog
from car_rag.records import (
    TENANT_SEPARATOR,
    LoadReport,
    Record,
    RecordError,
    load_records,
    parse_records,
    shown_id,
    tenant_key,
)
from car_rag.store import chroma
from car_rag.store.config import StoreError
from car_rag.store.indexes import Indexes
from car_rag.store.locking import ReadWriteLock
from car_rag.store.replica import Replica

__all__ = ["DEFAULT_CHUNK", "ChunkEncoder", "CycleRefused", "Ingest", "IngestReport", "key_of", "key_records"]

log = logging.getLogger(__package__)  # car_rag.store: one logger for all the store says, whichever module

DEFAULT_CHUNK = 512
"""Records an ingest embeds and commits together (:meth:`CARStore.ingest`). On ghsa-freeform (2,318
records; ``evals/results/ingest/``) embedding is 95% of an ingest at any chunk size, and chunks of 128
to 1,024 took the time of one chunk within the machine's noise; what chunks add is in the writes (2.2 s
in one chunk, 2.4 to 3.7 s in chunks of 1,024 down to 128). A crash loses at most the chunk being
embedded: at 512, about 20 s of work on those long texts, under 10 s on short records; its vectors
take 0.8 MB."""

ChunkEncoder = Callable[[Sequence[Record], int], Iterator[tuple[Sequence[Record], np.ndarray]]]
"""Another engine's encoding of what an ingest stores (:mod:`car_rag.store.distributed`): given the
records to embed and the chunk size, those records in chunks of at most that size, in any order, each
with its vectors row for row. The store commits each chunk as it comes, as it commits its own."""


@dataclass(frozen=True)
class CycleRefused(RecordError):
    """A record refused because it would close a supersession cycle; the cycle's records and edges
    too, so that a caller who may read only some of them is told only of those (``car-rag serve``)."""

    cycle: tuple[str, ...] = ()
    edges: tuple[Edge, ...] = ()


@dataclass
class IngestReport:
    """What one ingest changed."""

    added: list[str] = field(default_factory=list)
    """The records added, by the keys the store holds them under (a tenant's: :func:`~car_rag.records.tenant_key`)."""
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    errors: list[RecordError] = field(default_factory=list)
    new_edges: list[Edge] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    """Seconds spent per step: parse, scope (the policy's extractors), embed, graph, chroma, records (sqlite), bm25."""
    scope_filled: dict[str, int] = field(default_factory=dict)
    """Scope values the policy's ``[record_scope]`` extractors filled, by extractor."""
    missing_scope: list[MissingScope] = field(default_factory=list)
    """Per rule, the input's records it can never fire for: they lack a key of its ``within``."""
    warnings: list[str] = field(default_factory=list)
    """Extractors that matched nothing in the input (a mapped metadata field no record has)."""
    strict_refused: bool = False
    """``strict`` ingest found missing scope or a warning, and stored nothing."""

    def merge(self, part: IngestReport) -> None:
        """Add what one chunk of the ingest changed, and the time it took."""
        self.added += part.added
        self.updated += part.updated
        self.unchanged += part.unchanged
        self.errors += part.errors
        self.new_edges += part.new_edges
        self.warnings += part.warnings
        for step, seconds in part.timings_s.items():
            self.timings_s[step] = self.timings_s.get(step, 0.0) + seconds

    @property
    def newly_superseded(self) -> list[str]:
        """Records that this ingest made superseded."""
        return sorted({e.target for e in self.new_edges})

    def summary(self) -> str:
        counts = (
            f"{len(self.added)} added, {len(self.updated)} updated, {self.unchanged} unchanged, "
            f"{len(self.errors)} rejected, {len(self.new_edges)} supersession edges added"
        )
        if self.scope_filled:
            counts += "; scope filled by " + ", ".join(f"{name} {n}" for name, n in self.scope_filled.items())
        problems = [str(m) for m in self.missing_scope] + self.warnings
        if self.strict_refused:
            return f"nothing stored (strict): {'; '.join(problems)}"
        return "; ".join([counts, *problems])


class Ingest:
    """The ingest of one store: its ``indexes``, ``log`` and ``lock``, the ``embedder`` its vectors
    come from, the Chroma ``client`` of a store whose vectors are in Chroma, and the ``replica`` of
    a store on a shared log; ``location`` is what messages call the store."""

    def __init__(
        self,
        indexes: Indexes,
        log: RecordLog,
        lock: ReadWriteLock,
        embedder: Embedder,
        client: Any,
        replica: Replica | None,
        location: str,
    ):
        self.indexes, self.log, self.lock, self.embedder = indexes, log, lock, embedder
        self.client, self.replica, self.location = client, replica, location

    def run(
        self,
        source: str | Path | Iterable[Record | dict[str, Any]],
        policy: Policy,
        extractor: ScopeExtractor,
        *,
        progress: bool,
        embeddings: Mapping[str, Sequence[float]] | None,
        strict: bool,
        atomic: bool,
        chunk_size: int,
        may_replace: Callable[[Record, Record], str | None] | None,
        encode: ChunkEncoder | None = None,
    ) -> IngestReport:
        """:meth:`CARStore.ingest <car_rag.store.CARStore.ingest>` under ``policy``, whose ``extractor``
        fills the scope records lack; ``encode``, where given, embeds the records instead of this
        process's embedder."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if encode is not None and embeddings is not None:
            raise ValueError("give embeddings or an engine to encode the records, not both")
        started = time.perf_counter()
        label = str(source) if isinstance(source, (str, Path)) else "<records>"
        loaded: LoadReport = load_records(source) if isinstance(source, (str, Path)) else parse_records(source, label)
        report = IngestReport(errors=list(loaded.errors))
        report.timings_s["parse"] = time.perf_counter() - started
        tick = time.perf_counter()
        filled = extractor.fill(loaded.records, source=label, lines=loaded.lines)  # an LLM may be slow: no lock
        report.errors += filled.errors
        report.warnings, report.scope_filled = filled.warnings, filled.filled
        report.timings_s["scope"] = time.perf_counter() - tick
        with self.lock.read():  # another thread's ingest may be writing the records table
            records = key_records(filled.records, self.indexes.graph.records)
            fingerprints = self.log.fingerprints([r.doc_id for r in records])
        lines = {r.doc_id: line for r in records if (line := loaded.lines.get(shown_id(r.doc_id))) is not None}
        if embeddings is not None:
            embeddings = {r.doc_id: embeddings[shown] for r in records if (shown := shown_id(r.doc_id)) in embeddings}
        valid: list[Record] = []
        changed: list[Record] = []
        for record in records:
            problems = _scope_key_errors(record, label, lines.get(record.doc_id))
            if problems:
                report.errors.extend(problems)
                continue
            valid.append(record)
            if fingerprints.get(record.doc_id) == record.fingerprint():
                report.unchanged += 1
                continue
            changed.append(record)
        report.missing_scope = missing_scope(policy, valid)
        if strict and (report.missing_scope or report.warnings):
            report.strict_refused = True
            changed = []
        if atomic and report.errors:
            changed = []
        if changed:
            size = len(changed) if atomic else chunk_size
            quiet = not progress or len(changed) <= self.embedder.batch_size  # a bar only where embedding takes a while
            with tqdm(total=len(valid), initial=report.unchanged, desc="ingest", unit="rec", disable=quiet) as bar:
                if report.unchanged:
                    bar.set_postfix_str(f"{report.unchanged} already stored", refresh=False)
                chunks: Iterable[tuple[Sequence[Record], np.ndarray | None]] = (
                    encode(changed, size)
                    if encode is not None
                    else ((changed[start : start + size], None) for start in range(0, len(changed), size))
                )
                for chunk, encoded in chunks:
                    report.merge(self._chunk(chunk, encoded, embeddings, atomic, label, lines, may_replace))
                    bar.update(len(chunk))
        report.errors = [_as_given(e) for e in report.errors]
        self._log(label, report)
        return report

    def _chunk(
        self,
        chunk: Sequence[Record],
        encoded: np.ndarray | None,
        embeddings: Mapping[str, Sequence[float]] | None,
        atomic: bool,
        label: str,
        lines: Mapping[str, int],
        may_replace: Callable[[Record, Record], str | None] | None,
    ) -> IngestReport:
        """Embed one chunk (unless it comes ``encoded``), then add it to the graph and write it; what it changed."""
        part = IngestReport()
        held = self.indexes
        # Outside the lock: the slow part.
        vectors = self.vectors(chunk, embeddings, part) if encoded is None else self.checked(encoded, len(chunk))
        with self.log.transaction() as tx:  # a shared log: this process's turn among the writers
            others = tx.changes(held.head, vectors=held.dense.exact)  # what other processes committed before this turn
            with self.lock.write():
                if self.replica is not None:
                    self.replica.apply(others)
                # Another thread or process may have ingested some of these since they were read.
                fingerprints = tx.fingerprints([r.doc_id for r in chunk])
                accepted: list[Record] = []
                replaced: list[Record | None] = []  # what each accepted record replaced in the graph
                try:
                    tick = time.perf_counter()
                    for record in chunk:
                        if fingerprints.get(record.doc_id) == record.fingerprint():
                            part.unchanged += 1
                            continue
                        previous = held.graph.records.get(record.doc_id)
                        refusal = None if previous is None or may_replace is None else may_replace(previous, record)
                        line = lines.get(record.doc_id)
                        problem = None if refusal is None else RecordError(label, line, record.doc_id, "doc_id", refusal)
                        if problem is None:
                            try:
                                part.new_edges.extend(held.graph.add(record))
                            except SupersessionCycleError as exc:
                                problem = CycleRefused(
                                    label, line, record.doc_id, "supersedes", str(exc), tuple(exc.cycle), tuple(exc.edges)
                                )
                        if problem is not None:
                            part.errors.append(problem)
                            if atomic:
                                self._undo(accepted, replaced, part)
                                accepted, replaced = [], []
                                break
                            continue
                        accepted.append(record)
                        replaced.append(previous)
                        (part.updated if record.doc_id in fingerprints else part.added).append(record.doc_id)
                    part.timings_s["graph"] = time.perf_counter() - tick
                    if accepted:
                        keep = {r.doc_id for r in accepted}
                        rows = [i for i, r in enumerate(chunk) if r.doc_id in keep]
                        self._write(tx, accepted, vectors[rows], bool(part.updated), part)
                except BaseException:
                    if self.log.shared and not tx.committed:
                        # Nothing of this chunk is durable and the graph alone took it in: take it back
                        # out (re-reading the log needs the database, which may be what failed).
                        log.warning(
                            "%s: ingest of %s failed; nothing of its last chunk was stored (chunks committed before stay)",
                            self.location,
                            label,
                        )
                        self._undo(accepted, replaced, part)
                    else:
                        log.warning(
                            "%s: ingest of %s failed; re-reading the store (chunks committed before stay)", self.location, label
                        )
                        held.reload()  # the graph may be ahead of what was written: re-read the log
                    raise
        if self.replica is not None and self.replica.outbox and accepted:
            tick = time.perf_counter()
            if warning := self.replica.drain_after_ingest([r.doc_id for r in accepted]):
                part.warnings.append(warning)
            part.timings_s["chroma"] = time.perf_counter() - tick
        return part

    def _undo(self, accepted: list[Record], replaced: list[Record | None], report: IngestReport) -> None:
        """Take an atomic batch's records back out of the graph, newest first, restoring what each
        replaced; nothing of the batch has been written yet."""
        graph = self.indexes.graph
        for record, previous in zip(reversed(accepted), reversed(replaced)):
            graph.remove(record.doc_id)
            if previous is not None:
                graph.add(previous)
        report.added, report.updated, report.new_edges = [], [], []

    def _log(self, label: str, report: IngestReport) -> None:
        log.info("%s: ingested %s: %s; %d records held", self.location, label, report.summary(), len(self.indexes.graph))
        if report.new_edges:  # counts only: a log line is read by people who may not read every record
            log.debug(
                "%s: %d new supersession edges; %d records newly superseded",
                self.location,
                len(report.new_edges),
                len(report.newly_superseded),
            )
        log.debug("%s: ingest timings (s): %s", self.location, ", ".join(f"{k} {v:.3f}" for k, v in report.timings_s.items()))

    def vectors(self, records: Sequence[Record], given: Mapping[str, Sequence[float]] | None, report: IngestReport) -> np.ndarray:
        """The vectors of ``records``: ``given`` ones, the others encoded."""
        tick = time.perf_counter()
        given = given or {}
        todo = [r for r in records if r.doc_id not in given]
        encoded = iter(self.embedder.encode([r.text for r in todo])) if todo else iter(())
        rows = [np.asarray(given[r.doc_id], dtype=np.float32) if r.doc_id in given else next(encoded) for r in records]
        vectors = np.vstack(rows).astype(np.float32, copy=False)
        if given:
            self.checked(vectors, len(records))
        report.timings_s["embed"] = time.perf_counter() - tick
        return vectors

    def checked(self, vectors: np.ndarray, rows: int) -> np.ndarray:
        """``vectors`` made elsewhere, as float32, once they are one row per record and this store's dimension."""
        if vectors.ndim != 2 or vectors.shape[0] != rows or vectors.shape[1] != self.embedder.dimension:
            raise StoreError(
                f"embeddings have shape {vectors.shape} for {rows} records; "
                f"{self.embedder.model_name} vectors have {self.embedder.dimension} dimensions"
            )
        return vectors.astype(np.float32, copy=False)

    def _write(self, tx: LogWriter, records: Sequence[Record], vectors: np.ndarray, replaces: bool, report: IngestReport) -> None:
        """Make ``records`` (already in the graph) durable, then searchable. Into a log one process
        owns, vectors go first (a crash before the records' commit leaves orphan vectors, healed by
        re-ingesting); into a shared log, the records' vectors commit with them and a Chroma server
        is handed them after the commit (the outbox); pgvector searches them as committed."""
        held, timings = self.indexes, report.timings_s
        ids = [r.doc_id for r in records]
        if not self.log.shared:
            tick = time.perf_counter()
            chroma.write(held.chroma, self.client, records, vectors, stored=set(report.updated) | (held.orphans & set(ids)))
            held.orphans.difference_update(ids)
            timings["chroma"] = time.perf_counter() - tick
        tick = time.perf_counter()
        graph = held.graph
        edges = {(e.superseder, e.target): e for d in ids for e in graph.superseders(d) + graph.superseded_by(d)}
        # The claims that are not linked (disputed pairs, untrusted edges), over each record and its own.
        disputed = {(c.superseder, c.target): c for d in ids for c in graph.claims_involving(d)}
        head = tx.write(records, edges.values(), disputed.values(), vectors if self.log.keeps_vectors else None)
        tx.commit()
        held.head = max(held.head, head)
        timings["records"] = time.perf_counter() - tick
        tick = time.perf_counter()
        held.take(ids, [r.text for r in records], vectors if self.log.shared else None, replaces)
        timings["bm25"] = time.perf_counter() - tick


def key_records(records: Sequence[Record], held: Mapping[str, Record]) -> list[Record]:
    """``records`` as a store holds them, next to the records ``held``: each tenant's record under its
    :func:`~car_rag.records.tenant_key`, and each id its ``supersedes`` names resolved to its own
    tenant's record of that id, else to a public one, never to another tenant's (an id neither
    names yet: its own tenant's, which the edge waits for). A record a store holds already under
    its bare doc_id (stored before tenants' ids were namespaced) keeps that key. Public records
    are held as they are."""
    keys = {(r.tenant, r.doc_id): key_of(r.tenant, r.doc_id, held) for r in records if r.tenant is not None}
    batch = set(keys.values())

    def target(tenant: str, doc_id: str) -> str:
        own = key_of(tenant, doc_id, held)
        if own in held or own in batch:
            return own
        public = held.get(doc_id)
        return doc_id if public is not None and public.tenant is None else own

    out = []
    for record in records:
        tenant = record.tenant
        if tenant is None:
            out.append(record)
            continue
        named = [target(tenant, d) for d in record.supersedes]
        key = keys[(tenant, record.doc_id)]
        if key == record.doc_id and named == record.supersedes:
            out.append(record)
            continue
        weak = {target(tenant, d): c for d, c in record.supersedes_confidence.items()}
        out.append(record.model_copy(update={"doc_id": key, "supersedes": named, "supersedes_confidence": weak}))
    return out


def key_of(tenant: str | None, doc_id: str, held: Mapping[str, Record]) -> str:
    """The key ``tenant``'s record ``doc_id`` is (or would be) held under, among the records ``held``."""
    if tenant is None:
        return doc_id
    legacy = held.get(doc_id)
    return doc_id if legacy is not None and legacy.tenant == tenant else tenant_key(tenant, doc_id)


def _as_given(error: RecordError) -> RecordError:
    """``error`` naming records by the doc_ids their writers gave them."""
    if error.doc_id is None or TENANT_SEPARATOR not in error.doc_id + error.message:
        return error
    message = error.message
    for key in sorted({error.doc_id, *getattr(error, "cycle", ())}, key=len, reverse=True):
        message = message.replace(repr(key), repr(shown_id(key))).replace(key, shown_id(key))
    return replace(error, doc_id=shown_id(error.doc_id), message=message)


def _scope_key_errors(record: Record, source: str, line: int | None) -> list[RecordError]:
    return [
        RecordError(source, line, record.doc_id, f"scope.{key}", f"scope key {key!r} is reserved for {owner} metadata")
        for key in record.scope
        if (owner := chroma.reserved_by(key))
    ]
