"""A new shared store's PostgreSQL schema filled with COPY: the rows ``car-rag ingest`` writes into a
store on pgvector (records, edges, disputed claims, the entity index), at the rate PostgreSQL takes
them, for measurements at sizes where ingest's row-by-row writes are not the point (1M, 10M records).

Records go through ingest's own steps (validation, the policy's scope extractors, the authority
graph's rules), so the rows are ingest's: ``seq`` and ``change`` number the records in input order
as an ingest in any chunk size does, bodies and fingerprints are the records' own, vectors are
written both as ingest writes them (``vector``, little-endian float32) and as pgvector's column.
The secondary indexes are dropped for the COPY and made again after it with the definitions the
schema had, each timed (what an index build costs at that size). All of it is one transaction: a
load that fails (a bad record, named) stores nothing and leaves the schema as it was.

Edges come from one :class:`~car_rag.graph.AuthorityGraph` over every record (``edges="graph"``, what
ingest holds), or, for a corpus too large for one process to hold, from a small graph per *run*
(``edges="runs"``): consecutive records of one scope bucket (their values of the scope keys every
rule pairs within; a record lacking one is paired by no rule and is a run of its own), with the
records their ``supersedes`` names taken from a window of recent records. Runs give the whole
graph's edges when each bucket's records arrive together (the perf corpus: a disclosure then its
patches); the loader refuses a bucket that comes back after its run ended and a named record
outside the window, and :func:`edges_agree` checks the two modes on a corpus.
"""

from __future__ import annotations

import struct
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from car_rag import CARStore
from car_rag.embedding import Embedder
from car_rag.extractors import ScopeExtractor
from car_rag.graph import AuthorityGraph, Edge
from car_rag.policy import Policy
from car_rag.postgres import PostgresRecordLog
from car_rag.postgres.log import _gate
from car_rag.records import Record, parse_records

__all__ = ["STORED_ROWS", "BulkLoader", "LoadReport", "create_store", "edges_agree", "stored_rows"]

WINDOW = 200_000
"""Records a run may name in ``supersedes`` (``edges="runs"``): the most recent ones."""
_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_NULL = struct.pack(">i", -1)
_TEXT_OID = 25


def create_store(url: str, schema: str, policy: Policy, folder: Path, embedder: Embedder) -> None:
    """An empty store on pgvector in ``schema``, made by :meth:`CARStore.open` itself (its
    configuration, tables and indexes are the ones every process of the store expects)."""
    CARStore.open(
        folder, policy, authority_url=url, authority_schema=schema, vector_store="pgvector", embedder=embedder, follow=False
    ).close()


@dataclass
class LoadReport:
    records: int = 0
    edges: int = 0
    disputed: int = 0
    scope_rows: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    """Per step: records (validation, scope, rules: Python), copy_records, copy_edges, and one per index made."""
    deferred: list[tuple[str, str]] = field(default_factory=list)
    """Indexes left for the caller to make, as (name, definition)."""

    def add(self, step: str, since: float) -> None:
        self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - since


class BulkLoader:
    """Writes records into the empty store ``schema`` at ``url`` (see :func:`create_store`)."""

    def __init__(self, url: str, schema: str, policy: Policy, *, edges: str = "graph", maintenance_work_mem: str = "1GB"):
        if edges not in ("graph", "runs"):
            raise ValueError(f"edges must be 'graph' or 'runs', got {edges!r}")
        self.log = PostgresRecordLog(url, schema)
        self.policy, self.edges, self.maintenance_work_mem = policy, edges, maintenance_work_mem
        self.extractor = ScopeExtractor(policy)

    def load(
        self,
        items: Iterable[dict[str, Any]],
        vectors: np.ndarray | None = None,
        *,
        batch: int = 20_000,
        defer: Sequence[str] = (),
    ) -> LoadReport:
        """Write ``items`` (record dicts, in ingest order) with ``vectors`` (one row each, or None:
        the authority log alone, vector columns left NULL), then make the indexes again but those
        named in ``defer`` (``report.deferred``: an index build measured on its own)."""
        report = LoadReport()
        self.log.statement_timeout_s = 0  # an index build at 10M takes longer than any request may
        with self.log.connect(autocommit=False, role="bulk") as conn:
            if conn.execute(self.log._sql("SELECT count(*) FROM {records}")).fetchone()[0]:
                raise ValueError(f"{self.log.location} holds records: the bulk loader writes a new store only")
            indexes = self._drop_indexes(conn)  # in the load's transaction: a load that fails leaves them
            graph = AuthorityGraph(self.policy)
            runs = _Runs(self.policy) if self.edges == "runs" else None
            position = 0
            for chunk in _batches(items, batch):
                tick = time.perf_counter()
                records = self._records(chunk, position)
                found: list[Edge] = []
                claims: list[Edge] = []
                if runs is None:
                    for record in records:
                        graph.add(record)
                else:
                    found, claims = runs.take(records)
                report.add("records", tick)
                part = None if vectors is None else vectors[position : position + len(records)]
                self._copy_records(conn, records, position, part, report)
                if found or claims:
                    self._copy_edges(conn, found, claims, report)
                position += len(records)
            if runs is not None:
                self._copy_edges(conn, *runs.finish(), report)
            else:
                tick = time.perf_counter()
                claims = list({(c.superseder, c.target): c for d in graph.records for c in graph.claims_involving(d)}.values())
                report.add("records", tick)
                self._copy_edges(conn, graph.edges(), claims, report)
            if vectors is not None and position != len(vectors):
                raise ValueError(f"{len(vectors)} vectors for {position} records")
            report.records = position
            report.deferred = [(name, definition) for name, definition in indexes if name in defer]
            self._make_indexes(conn, [(n, d) for n, d in indexes if n not in defer], report)
            conn.commit()
        return report

    def _records(self, chunk: Sequence[dict[str, Any]], position: int) -> list[Record]:
        """A chunk validated and scoped as ingest does it; a bad record stops the load, named."""
        label = f"<records {position + 1}-{position + len(chunk)}>"
        loaded = parse_records(chunk, label)
        filled = self.extractor.fill(loaded.records, source=label)
        problems = loaded.errors + filled.errors
        if problems:
            raise ValueError(f"{label}: {problems[0]} (nothing of this chunk written; {position} records before it were)")
        tenants = [r.doc_id for r in filled.records if r.tenant is not None]
        if tenants:
            raise ValueError(f"{label}: record {tenants[0]!r}: field tenant: the bulk loader writes public records only")
        return list(filled.records)

    def _drop_indexes(self, conn: Any) -> list[tuple[str, str]]:
        """The schema's indexes that back no constraint, as (name, definition), dropped."""
        rows = conn.execute(
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_namespace n ON n.oid = i.relnamespace WHERE n.nspname = %s "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid) ORDER BY i.relname",
            (self.log.schema,),
        ).fetchall()
        sql = self.log.psycopg.sql
        for name, _ in rows:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(self.log.schema, name)))
        return [(str(name), str(definition)) for name, definition in rows]

    def _make_indexes(self, conn: Any, indexes: Sequence[tuple[str, str]], report: LoadReport) -> None:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (self.maintenance_work_mem,))
        for name, definition in indexes:
            tick = time.perf_counter()
            conn.execute(definition)
            report.add(f"index {name}", tick)
        tick = time.perf_counter()
        for table in ("records", "edges", "disputed_edges", "scope_index"):
            conn.execute(self.log._sql(f"ANALYZE {{{table}}}"))
        report.add("analyze", tick)

    def _copy_records(
        self, conn: Any, records: Sequence[Record], position: int, vectors: np.ndarray | None, report: LoadReport
    ) -> None:
        tick = time.perf_counter()
        rows = [_HEADER]
        for i, record in enumerate(records):
            number = struct.pack(">q", position + i + 1)  # seq and change: 1, 2, ... as ingest numbers them
            if vectors is None:
                dense: list[bytes | None] = [None, None]
            else:
                vector = np.asarray(vectors[i], dtype=np.float32)
                dense = [vector.astype("<f4").tobytes(), struct.pack(">hh", len(vector), 0) + vector.astype(">f4").tobytes()]
            tenant, public, readers = _gate(record)
            rows.append(
                _row(
                    [
                        record.doc_id.encode(),
                        number,
                        number,
                        record.fingerprint().encode(),
                        record.model_dump_json().encode(),
                        dense[0],
                        b"\x00",  # vector_pending: a pgvector store's vectors wait in no outbox
                        dense[1],
                        tenant.encode(),
                        b"\x01" if public else b"\x00",
                        _text_array(readers),
                    ]
                )
            )
        rows.append(_TRAILER)
        columns = "doc_id, seq, change, fingerprint, body, vector, vector_pending, embedding, tenant, public, readers"
        with conn.cursor().copy(self.log._sql(f"COPY {{records}} ({columns}) FROM STDIN (FORMAT BINARY)")) as copy:
            copy.write(b"".join(rows))
        scope = [_row([k.encode(), v.encode(), r.doc_id.encode()]) for r in records for k, v in r.scope.items()]
        with conn.cursor().copy(self.log._sql("COPY {scope_index} (key, value, doc_id) FROM STDIN (FORMAT BINARY)")) as copy:
            copy.write(b"".join([_HEADER, *scope, _TRAILER]))
        report.scope_rows += len(scope)
        report.add("copy_records", tick)

    def _copy_edges(self, conn: Any, edges: Iterable[Edge], claims: Iterable[Edge], report: LoadReport) -> None:
        tick = time.perf_counter()
        for table, rows in (("edges", list(edges)), ("disputed_edges", list(claims))):
            data = [
                _row([e.superseder.encode(), e.target.encode(), e.rule.encode(), struct.pack(">d", e.confidence)]) for e in rows
            ]
            sql = self.log._sql(f"COPY {{{table}}} (superseder, target, rule, confidence) FROM STDIN (FORMAT BINARY)")
            with conn.cursor().copy(sql) as copy:
                copy.write(b"".join([_HEADER, *data, _TRAILER]))
            if table == "edges":
                report.edges += len(rows)
            else:
                report.disputed += len(rows)
        report.add("copy_edges", tick)


class _Runs:
    """Edges a run of one scope bucket makes among its records and the records they name."""

    def __init__(self, policy: Policy):
        keys = [set(rule.within) for rule in policy.edge_rules]
        self.keys = sorted(set.intersection(*keys)) if keys else []
        if policy.edge_rules and not self.keys:
            raise ValueError(
                f"policy {policy.name!r}: no scope key that every rule pairs within; runs need one (use edges='graph')"
            )
        self.policy = policy
        self.window: OrderedDict[str, Record] = OrderedDict()
        self.run: list[Record] = []
        self.bucket: tuple[str | None, ...] | None = None
        self.ended: set[tuple[str | None, ...]] = set()

    def take(self, records: Sequence[Record]) -> tuple[list[Edge], list[Edge]]:
        edges: list[Edge] = []
        claims: list[Edge] = []
        for record in records:
            bucket: tuple[str | None, ...] | None = tuple(record.scope.get(k) for k in self.keys)
            if bucket is not None and None in bucket:  # no rule pairs it: a run of its own, wherever its like come
                bucket = None
            if bucket is None or bucket != self.bucket:
                more, disputed = self._end()
                edges += more
                claims += disputed
                if bucket is not None and bucket in self.ended:
                    raise ValueError(f"record {record.doc_id!r}: field scope: its bucket {bucket} came back after its run ended")
                self.bucket = bucket
            self.run.append(record)
            self.window[record.doc_id] = record
            if len(self.window) > WINDOW:
                self.window.popitem(last=False)
        return edges, claims

    def finish(self) -> tuple[list[Edge], list[Edge]]:
        return self._end()

    def _end(self) -> tuple[list[Edge], list[Edge]]:
        run, self.run = self.run, []
        if self.bucket is not None:
            self.ended.add(self.bucket)
        if len(run) < 2 and not any(r.supersedes for r in run):
            return [], []
        graph = AuthorityGraph(self.policy)
        members = {r.doc_id for r in run}
        for record in run:
            for target in record.supersedes:
                if target not in members:
                    if target not in self.window:
                        raise ValueError(
                            f"record {record.doc_id!r}: field supersedes: {target!r} is not among the last {WINDOW:,} records"
                        )
                    graph.add(self.window[target])
        for record in run:
            graph.add(record)
        claims = {(c.superseder, c.target): c for d in members for c in graph.claims_involving(d)}
        return [e for e in graph.edges() if members & {e.superseder, e.target}], list(claims.values())


def edges_agree(items: Sequence[dict[str, Any]], policy: Policy) -> bool:
    """Whether runs give the whole graph's edges and claims on ``items``."""
    loaded = parse_records(items, "<check>")
    records = ScopeExtractor(policy).fill(loaded.records, source="<check>").records
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    runs = _Runs(policy)
    edges, claims = runs.take(records)
    more, disputed = runs.finish()
    whole = {(c.superseder, c.target): c for d in graph.records for c in graph.claims_involving(d)}
    return set(graph.edges()) == set(edges + more) and set(whole.values()) == set(claims + disputed)


def _batches(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _row(fields: Sequence[bytes | None]) -> bytes:
    """One tuple of PostgreSQL's binary COPY format."""
    out = [struct.pack(">h", len(fields))]
    for value in fields:
        out.append(_NULL if value is None else struct.pack(">i", len(value)) + value)
    return b"".join(out)


def _text_array(values: Sequence[str]) -> bytes:
    """A ``text[]`` in binary form (array_recv): dimensions, no NULLs, the element type, then the elements."""
    if not values:
        return struct.pack(">iii", 0, 0, _TEXT_OID)
    head = struct.pack(">iiiii", 1, 0, _TEXT_OID, len(values), 1)
    return head + b"".join(struct.pack(">i", len(v.encode())) + v.encode() for v in values)


STORED_ROWS = {
    "records": "doc_id, seq, change, fingerprint, body, vector, vector_pending, embedding::text, tenant, public, readers",
    "edges": "superseder, target, rule, confidence",
    "disputed_edges": "superseder, target, rule, confidence",
    "scope_index": "key, value, doc_id",
    "store": "config::text",
}
"""What a store holds in ``schema``, table by table: what a bulk load must write as ingest does."""


def stored_rows(url: str, schema: str) -> dict[str, list[tuple]]:
    """Every row of :data:`STORED_ROWS` in ``schema``, ordered by all its columns (comparable across stores)."""
    with PostgresRecordLog(url, schema).connect(role="check") as conn:
        order = {t: ", ".join(str(i + 1) for i in range(c.count(",") + 1)) for t, c in STORED_ROWS.items()}
        return {t: conn.execute(f"SELECT {c} FROM {schema}.{t} ORDER BY {order[t]}").fetchall() for t, c in STORED_ROWS.items()}
