"""Stage 2 without the graph in memory: a query's authority closure read from PostgreSQL.

A worker serving a store on PostgreSQL with ``stage2="sql"`` (:class:`~car_rag.store.lean.LeanStore`)
holds neither the records nor the authority graph. For each query it asks for the records the
latent-scope step and Stages 2 and 3 read (the fused Stage-1 candidates, every record holding a
scope value the question may name) and everything that voids them, transitively, followed
through the store's stored edges and disputed claims, with the edges and claims among them: one
recursive query with its members' rows, edges and claims in one statement (one round trip, one
snapshot). What comes back is the store's graph restricted to that closure
(:meth:`AuthorityGraph.load_edges`, no rule re-applied): the same records, edges and entity-index
lookups for those ids and values as the whole graph, so the query's answer is the same.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from car_rag.graph import AuthorityGraph, Edge
from car_rag.policy import Policy
from car_rag.postgres.log import PostgresRecordLog
from car_rag.record_log import parse_stored
from car_rag.records import Record

__all__ = ["ClosureQuery", "ClosureRead", "records_by_id", "scope_values", "texts"]

_MEMBERS = (
    "WITH RECURSIVE seeds(doc_id) AS ("
    "SELECT unnest(%(ids)s::text[]) UNION "
    "SELECT s.doc_id FROM {scope_index} s JOIN unnest(%(keys)s::text[], %(values)s::text[]) AS q(key, value) "
    "ON s.key = q.key AND s.value = q.value), "
    "up(doc_id) AS (SELECT doc_id FROM seeds UNION "
    "SELECT v.superseder FROM (SELECT superseder, target FROM {edges} UNION ALL "
    "SELECT superseder, target FROM {disputed_edges}) AS v JOIN up ON v.target = up.doc_id) "
)
"""The closure's ids: the seeds (ids, and the records holding each (key, value)), then whatever
voids or claims a member, until nothing new comes (UNION: each id once, so it ends)."""

_IN_UP = "ANY(ARRAY(SELECT doc_id FROM up))"
"""A closure member, as an index lookup: PostgreSQL estimates a recursive query's rows in the
millions, and for ``IN (SELECT doc_id FROM up)`` chose to scan the whole edges table (reading a
closure's edges took 8.9 ms so against 3.8 at 100k records, the scan growing with the table)."""

_CLOSURE = _MEMBERS + (
    "SELECT 0 AS part, seq, NULL::tid AS place, body, NULL AS superseder, NULL AS target, NULL AS rule, "
    f"NULL::float8 AS confidence FROM {{records}} WHERE doc_id = {_IN_UP} "
    f"UNION ALL SELECT 1, NULL, ctid, NULL, superseder, target, rule, confidence FROM {{edges}} WHERE target = {_IN_UP} "
    "UNION ALL SELECT 2, NULL, ctid, NULL, superseder, target, rule, confidence FROM {disputed_edges} "
    f"WHERE target = {_IN_UP} ORDER BY part, seq, place"
)
"""The closure in one statement, so in one snapshot with the recursive query run once (three
statements each ran it: 9.5 against 5.2 ms p50 at 100k records): the members' bodies in ingest
order (part 0), then the stored edges (1) and claims (2) that void one, each in ``ctid`` order,
the order a plain scan of the table gives (as the in-memory load reads them)."""


@dataclass(frozen=True)
class ClosureRead:
    """What one closure query cost: records read, and the seconds waiting on PostgreSQL and decoding."""

    records: int
    sql_s: float
    decode_s: float


class ClosureQuery:
    """The closure of a query's seeds, read from ``log``'s tables on a connection of its own.
    Callers serialise their calls (one statement at a time per connection): the lean store's
    connections pool does."""

    def __init__(self, log: PostgresRecordLog, policy: Policy):
        self.log, self.policy = log, policy
        self.last: ClosureRead | None = None
        """The cost of the latest :meth:`graph` call."""
        self.statement = log._sql(_CLOSURE)

    def graph(self, conn: Any, doc_ids: Collection[str], values: Collection[tuple[str, str]]) -> AuthorityGraph:
        """The store's graph restricted to the closure of ``doc_ids`` and of the records holding
        each scope ``(key, value)`` of ``values``: records in ingest order, stored edges and claims."""
        params = {"ids": list(doc_ids), "keys": [k for k, _ in values], "values": [v for _, v in values]}
        tick = time.perf_counter()
        with conn.transaction():
            rows = conn.execute(self.statement, params).fetchall()
        tock = time.perf_counter()
        records = [parse_stored(row[3], self.log.location) for row in rows if row[0] == 0]
        edges, disputed = ([Edge(*row[4:]) for row in rows if row[0] == part] for part in (1, 2))
        graph = AuthorityGraph(self.policy)
        graph.load_edges(records, edges, disputed)
        self.last = ClosureRead(len(records), tock - tick, time.perf_counter() - tock)
        return graph


def records_by_id(conn: Any, log: PostgresRecordLog, doc_ids: Collection[str]) -> dict[str, Record]:
    """The stored records of ``doc_ids`` (those stored), by id."""
    rows = conn.execute(log._sql("SELECT body FROM {records} WHERE doc_id = ANY(%s)"), (list(doc_ids),)).fetchall()
    return {(record := parse_stored(body, log.location)).doc_id: record for (body,) in rows}


def scope_values(conn: Any, log: PostgresRecordLog, *, after: int = 0) -> Iterator[tuple[str, str]]:
    """Every scope ``(key, value)`` some stored record holds (the entity index's distinct pairs);
    ``after``: held by records committed after that change (a saved vocabulary's catch-up)."""
    with conn.cursor(name="car_rag_scope_values") as cursor:
        cursor.itersize = 20_000
        if after:
            held = (
                "SELECT DISTINCT s.key, s.value FROM {scope_index} s JOIN {records} r ON r.doc_id = s.doc_id WHERE r.change > %s"
            )
            cursor.execute(log._sql(held), (after,))
        else:
            cursor.execute(log._sql("SELECT DISTINCT key, value FROM {scope_index}"))
        yield from cursor


def texts(conn: Any, log: PostgresRecordLog, *, vectors: bool, after: int = 0) -> Iterator[tuple[str, str, np.ndarray | None]]:
    """Every record's id, text and (``vectors``) stored vector, in ingest order, without parsing
    the bodies: what a worker's BM25 index and exact search are built from; ``after``: the records
    committed after that change (what a saved index catches up with)."""
    column = "vector" if vectors else "NULL"
    with conn.cursor(name="car_rag_texts") as cursor:
        cursor.itersize = 5000
        cursor.execute(
            log._sql(f"SELECT doc_id, body::jsonb ->> 'text', {column} FROM {{records}} WHERE change > %s ORDER BY seq"), (after,)
        )
        for doc_id, text, data in cursor:
            yield doc_id, text, None if data is None else np.frombuffer(data, dtype="<f4")
