"""POST /records into one store: each request's records stored whole or not at all, requests that
arrive within a few milliseconds of each other stored by one store ingest (a group commit), and
a tenant's key replacing only the records it owns. What each request is answered shows only the
edges its key may read."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from car_rag.extractors import missing_scope
from car_rag.graph import Edge
from car_rag.namespacing import shown_edge
from car_rag.records import TENANT_SEPARATOR, Record, RecordError, parse_records, shown_id
from car_rag.serve.errors import INSERT_RETRY_S, Forbidden, Unavailable
from car_rag.serve.keys import ApiKey
from car_rag.serve.metrics import Metrics
from car_rag.serve.schema import EdgeOut, RecordProblem, RecordsRejected, RecordsResponse
from car_rag.store import CARStore, IngestReport
from car_rag.store.ingest import CycleRefused
from car_rag.trust import TRUST_REASONS

__all__ = ["Inserts"]

log = logging.getLogger(__name__)

_REQUEST = "<request>"
"""The source a request's record errors name (their item is the record's place in the request)."""


@dataclass
class _Insert:
    """One POST /records on its way into the store, alone or in a group, and what it is answered."""

    records: list[Record]
    key: ApiKey | None
    warnings: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    answer: RecordsResponse | RecordsRejected | None = None
    error: Exception | None = None


class Inserts:
    """The inserts into one store: validated alone, then stored alone or in a group (one ingest for
    the requests within ``window_s`` of the first, or arriving while a group is stored)."""

    def __init__(self, store: CARStore, metrics: Metrics, window_s: float):
        self.store, self.metrics, self.window_s = store, metrics, window_s
        self._storing = threading.Lock()  # one group stored at a time; the next one gathers meanwhile
        self._joining = threading.Lock()
        self._group: list[_Insert] | None = None  # inserts waiting for the next store ingest

    def insert(self, items: list[Any], key: ApiKey | None) -> RecordsResponse | RecordsRejected:
        """Store one request's records whole or not at all; what they voided, as far as ``key`` may read.

        The records are validated (and their scope filled) here, so a bad request is refused on its
        own. Requests within ``window_s`` of each other, or arriving while a store ingest
        runs, are then stored by one ingest (Chroma's per-call cost is paid once per group)."""
        parsed = parse_records(_with_publisher(items, key), _REQUEST)
        filled = self.store.extractor.fill(parsed.records, source=_REQUEST, lines=parsed.lines)  # an LLM may be slow
        if parsed.errors or filled.errors:
            return self._rejected(parsed.errors + filled.errors, len(items))
        if self.store.policy.trust.untrusted == "refuse":
            self._refuse_untrusted(filled.records)
            bounded = []
        else:
            bounded = self._claims_over_cap(filled.records, key)
        warnings = [str(m) for m in missing_scope(self.store.policy, filled.records)] + filled.warnings + bounded
        pending = _Insert(filled.records, key, warnings)
        if self.window_s == 0:
            with self._storing:
                self._store_alone(pending)
        else:
            self._join(pending)
        if pending.error is not None:
            raise pending.error
        assert pending.answer is not None
        return pending.answer

    def _refuse_untrusted(self, records: list[Record]) -> None:
        """Under ``untrusted = "refuse"``: a 403 naming the trust rule, for a request whose record
        would claim to void a stored record it is not trusted to (the target is never named)."""
        keyed = self.store.keyed(records)
        with self.store.lock.read():
            for number, (record, held_as) in enumerate(zip(records, keyed, strict=True), start=1):
                claims = self.store.graph.claims_by(held_as)
                if claims:
                    rule = claims[0].untrusted
                    assert rule is not None
                    raise Forbidden(
                        f"record {number} ({record.doc_id!r}) would void a record it is not trusted to "
                        f"(trust rule {rule}: {TRUST_REASONS[rule]}); nothing was stored"
                    )

    def _claims_over_cap(self, records: list[Record], key: ApiKey | None) -> list[str]:
        """A warning for each record whose untrusted claims over records ``key`` may read are more
        than one write keeps (``trust.claims_per_write``). Claims over records it may not read are
        bounded alike but never counted here: their number would tell it they exist."""
        cap = self.store.policy.trust.claims_per_write
        keyed = self.store.keyed(records)
        warnings = []
        with self.store.lock.read():
            graph = self.store.graph
            for number, (record, held_as) in enumerate(zip(records, keyed, strict=True), start=1):
                readable = [graph.records[c.target] for c in graph.claims_by(held_as)]
                readable = [r for r in readable if key is None or key.caller.can_read(r)]
                for tenant in sorted({r.tenant for r in readable}, key=lambda t: t or ""):
                    count = sum(1 for r in readable if r.tenant == tenant)
                    if count > cap:
                        warnings.append(
                            f"record {number} ({record.doc_id!r}) claims to void {count} records it is not trusted to; "
                            f"only {cap} are kept as claims (they void nothing either way)"
                        )
        return warnings

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
        time.sleep(self.window_s)
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
            report = self.store.ingest(
                [r for p in group for r in p.records], progress=False, atomic=True, may_replace=_Owners(group)
            )
        except Exception as exc:
            log.info("a group of %d inserts was not stored together (%s); storing each alone", len(group), type(exc).__name__)
            return False
        if report.errors:
            return False
        with self.store.lock.read():
            owners = {d: _owner(d, self.store.records) for d in report.added + report.updated}
            edges = _edges_by_request(group, report, self.store.records)
        for n, pending in enumerate(group):
            pending.warnings += [w for w in report.warnings if w not in pending.warnings]  # the outbox's concern all
            mine = {(r.tenant, r.doc_id) for r in pending.records}
            pending.answer = self._answer(
                pending,
                [d for d in report.added if owners[d] in mine],
                [d for d in report.updated if owners[d] in mine],
                edges[n],
            )
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
                f"the store did not take the batch ({type(exc).__name__}); no record of it was stored: retry",
                retry_after_s=INSERT_RETRY_S,
            )
            return
        if owners.refused:
            number, doc_id = owners.refused[0]
            assert pending.key is not None
            pending.error = Forbidden(
                f"key {pending.key.name!r} may not replace record {number} ({doc_id!r}): "
                "the doc_id is taken by a record this key does not own; nothing was stored"
            )
        elif report.errors:
            pending.answer = self._rejected([self._as_read_by(e, pending) for e in report.errors], len(pending.records))
        else:
            pending.warnings += [w for w in report.warnings if w not in pending.warnings]  # vectors in the outbox
            pending.answer = self._answer(pending, report.added, report.updated, report.new_edges)

    def _answer(self, pending: _Insert, added: list[str], updated: list[str], edges: list[Edge]) -> RecordsResponse:
        """What one request stored, and the edges it made that its key may read, by the doc_ids their
        writers gave (``added``, ``updated`` and ``edges`` name records by the keys the store holds them under)."""
        unchanged = len(pending.records) - len(added) - len(updated)
        for outcome, count in (("added", len(added)), ("updated", len(updated)), ("unchanged", unchanged)):
            self.metrics.ingested.labels(outcome).inc(count)
        key = pending.key
        with self.store.lock.read():
            records = self.store.records
            readable: Callable[[str], bool] = (
                (lambda _d: True) if key is None else (lambda d: d in records and key.caller.can_read(records[d]))
            )
            shown = [shown_edge(e) for e in edges if readable(e.superseder) and readable(e.target)]
        return RecordsResponse(
            added=[shown_id(d) for d in added],
            updated=[shown_id(d) for d in updated],
            unchanged=unchanged,
            newly_superseded=sorted({e.target for e in shown}),
            new_edges=[EdgeOut(superseder=e.superseder, target=e.target, rule=e.rule) for e in shown],
            warnings=pending.warnings,
        )

    def _as_read_by(self, error: RecordError, pending: _Insert) -> RecordError:
        """``error`` as the request's key may be told it: a cycle through records the key may not
        read is said to be one, without their ids or rules (the records of the request itself it
        may read)."""
        key = pending.key
        if not isinstance(error, CycleRefused) or key is None:
            return error
        mine = {(r.tenant, r.doc_id) for r in pending.records}
        with self.store.lock.read():
            records = self.store.records
            hidden = [
                d
                for d in error.cycle
                if _owner(d, records) not in mine and not (d in records and key.caller.can_read(records[d]))
            ]
        if not hidden:
            return error
        return replace(
            error,
            message=f"record {error.doc_id!r} would close a supersession cycle through records this key may not read",
        )

    def _rejected(self, errors: list[RecordError], count: int) -> RecordsRejected:
        self.metrics.ingested.labels("rejected").inc(count)
        return RecordsRejected(
            detail=f"{len({e.line for e in errors})} of {count} records rejected; nothing was stored",
            errors=[RecordProblem(item=e.line, doc_id=e.doc_id, field=e.field, message=e.message) for e in errors],
        )


def _with_publisher(items: list[Any], key: ApiKey | None) -> list[Any]:
    """The request's records with the publisher the key stands for: a publisher key's name on
    each public record it writes; from any other key, a record naming a publisher is a 403."""
    if key is None:
        return items  # a server without keys trusts its callers with every field
    out = []
    for number, item in enumerate(items, start=1):
        if isinstance(item, dict):
            named = item.get("publisher")
            if named is not None and (not key.publisher or named != key.name):
                raise Forbidden(
                    f"key {key.name!r} may not write record {number} ({item.get('doc_id')!r}) with publisher "
                    f"{named!r}: only a publisher key, under its own name; nothing was stored"
                )
            if key.publisher and item.get("tenant") is None:
                item = {**item, "publisher": key.name}
        out.append(item)
    return out


class _Owners:
    """Whether each record of a group's requests may replace the stored record of its doc_id (the
    store asks while the write holds its turn, so the answer holds across processes): a key of a
    tenant replaces only its tenant's records that it may read, so a doc_id is no way to overwrite
    another tenant's record or to make a public one private. Keeps what it refused."""

    def __init__(self, group: list[_Insert]):
        self.keys = {(r.tenant, r.doc_id): (number, p.key) for p in group for number, r in enumerate(p.records, start=1)}
        self.refused: list[tuple[int, str]] = []
        """(position in its request, doc_id) of each record refused."""

    def __call__(self, held: Record, new: Record) -> str | None:
        doc_id = shown_id(new.doc_id)
        number, key = self.keys[(new.tenant, doc_id)]
        if key is None or key.tenant is None or (held.tenant == key.tenant and key.caller.can_read(held)):
            return None
        self.refused.append((number, doc_id))
        return "the doc_id is taken by a record this key does not own"


def _edges_by_request(group: list[_Insert], report: IngestReport, records: Mapping[str, Record]) -> list[list[Edge]]:
    """A group ingest's new edges, per request: each to the request whose record made it. The store
    adds records one by one, each linking to those already there, so an edge is made by the later
    of its two records that this ingest added or replaced (an unchanged one was not added again)."""
    changed = {_owner(d, records) for d in report.added + report.updated}
    made_by: dict[tuple[str | None, str], tuple[int, int]] = {}  # (tenant, doc_id) -> (its place in the ingest, its request)
    for n, pending in enumerate(group):
        for record in pending.records:
            if (record.tenant, record.doc_id) in changed:
                made_by[(record.tenant, record.doc_id)] = (len(made_by), n)
    edges: list[list[Edge]] = [[] for _ in group]
    for edge in report.new_edges:
        _, n = max(made_by[o] for d in (edge.superseder, edge.target) if (o := _owner(d, records)) in made_by)
        edges[n].append(edge)
    return edges


def _owner(key: str, records: Mapping[str, Record]) -> tuple[str | None, str]:
    """(tenant, doc_id its writer gave) of the record a store holds, or would hold, under ``key``."""
    held = records.get(key)
    if held is not None:
        return held.tenant, shown_id(key)
    tenant, separated, _ = key.partition(TENANT_SEPARATOR)
    return (tenant if separated else None), shown_id(key)
