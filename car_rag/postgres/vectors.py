"""Dense search in the store's own PostgreSQL: the records' pgvector column under an HNSW index.

A store whose vector engine is pgvector writes each record's vector in the transaction that
writes the record (:class:`~car_rag.postgres.log.VectorColumn`), so every process searches exactly
what is committed and no vector waits in an outbox. The caller gate (``where``, in the Chroma
dialect of :meth:`~car_rag.eligibility.CallerContext.chroma_where`) becomes a condition on the
records' tenant, public and readers columns inside the search: records a caller may not read
are never candidates; a query's ``as_of`` and filters (:class:`~car_rag.eligibility.Gate`) become
conditions on the record's date, type, source, scope and metadata as its stored body holds them.
HNSW applies such a condition to the candidates it has found, so with
``hnsw.iterative_scan`` (pgvector 0.8) the index is walked further until k readable records
are found; a search it still leaves short (``hnsw.max_scan_tuples`` reached) is answered by an
exact scan.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from car_rag.channels.base import ChannelHit
from car_rag.channels.dense import EXACT_SEARCH_LIMIT, VectorChannel
from car_rag.postgres.log import PostgresRecordLog
from car_rag.records import UNDATED

__all__ = ["PgVectorChannel", "GATE_COLUMNS"]

log = logging.getLogger(__name__)

GATE_COLUMNS = {"car_tenant": "tenant", "car_public": "public", "allowed_principals": "readers"}
"""The caller gate's metadata keys (:func:`~car_rag.eligibility.governance_metadata`) and the
records' columns that hold them."""


class PgVectorChannel(VectorChannel):
    """Nearest neighbours by cosine distance over the pgvector column of a store's records table
    (``log``), searched with ``hnsw.ef_search = ef_search`` and ``hnsw.iterative_scan =
    iterative_scan``: ``relaxed_order`` (the better recall of pgvector's two orders; the hits are
    re-sorted by distance, then id), ``strict_order``, or ``off`` (HNSW's first candidates only,
    what the exact scan makes up for)."""

    def __init__(
        self,
        log: PostgresRecordLog,
        *,
        ef_search: int,
        iterative_scan: str = "relaxed_order",
        exact_limit: int = EXACT_SEARCH_LIMIT,
    ):
        super().__init__(exact_limit=exact_limit)
        self.log, self.ef_search, self.iterative_scan = log, ef_search, iterative_scan
        self.exact_scans = 0
        """Searches the HNSW index left short of k admitted records, answered by an exact scan."""
        self._sql = log.psycopg.sql
        self._records = self._sql.Identifier(log.schema, "records")
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A connection of the channel's own (one per search running at once), set for HNSW search;
        one that fails is closed, not reused."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        try:
            if conn is None:
                conn = self.log.connect(role="vectors")
                # The cast loads pgvector first, so that it checks the settings (else a wrong value
                # would be a warning when it loads, and the setting its default). pgvector's cost
                # estimate grows with ef_search: at ef_search 200 the planner chose an exact sequential
                # scan over 20k records (70 ms instead of 4, evals/serve/pgvector.py); a search HNSW
                # leaves short gets that exact scan anyway (_nearest).
                conn.execute(
                    "SELECT '[0]'::vector, set_config('hnsw.ef_search', %s, false), "
                    "set_config('hnsw.iterative_scan', %s, false), set_config('enable_seqscan', 'off', false)",
                    (str(self.ef_search), self.iterative_scan),
                )
            yield conn
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        with self._lock:
            self._idle.append(conn)

    def _nearest(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None) -> list[ChannelHit]:
        condition, params = self._condition(where)
        query = np.asarray(vector, dtype=np.float32).tolist()
        sql = self._sql
        search = "SELECT doc_id, embedding <=> %s::vector AS distance FROM {records} WHERE {condition} ORDER BY distance"
        with self._connection() as conn:
            rows = conn.execute(
                sql.SQL(
                    f"WITH nearest AS MATERIALIZED ({search} LIMIT %s) "
                    "SELECT doc_id, distance FROM nearest ORDER BY distance, doc_id"
                ).format(records=self._records, condition=condition),
                [query, *params, k],
            ).fetchall()
            if len(rows) < k and self._count(conn, condition, params, k) > len(rows):
                with self._lock:
                    self.exact_scans += 1
                log.debug("HNSW found %d of the %d nearest admitted records: exact scan", len(rows), k)
                with conn.transaction():
                    conn.execute("SET LOCAL enable_indexscan = off")
                    conn.execute("SET LOCAL enable_seqscan = on")
                    rows = conn.execute(
                        sql.SQL(f"{search}, doc_id LIMIT %s").format(records=self._records, condition=condition),
                        [query, *params, k],
                    ).fetchall()
        return [ChannelHit(doc_id, 1.0 - float(distance), rank) for rank, (doc_id, distance) in enumerate(rows, 1)]

    def _count(self, conn: Any, condition: Any, params: list[Any], up_to: int) -> int:
        """How many records ``condition`` admits, counted up to ``up_to``."""
        counted = self._sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {records} WHERE {condition} LIMIT %s) AS admitted")
        return int(conn.execute(counted.format(records=self._records, condition=condition), [*params, up_to]).fetchone()[0])

    def _matching(self, where: Mapping[str, Any]) -> list[str]:
        condition, params = self._condition(where)
        with self._connection() as conn:
            found = conn.execute(
                self._sql.SQL("SELECT doc_id FROM {records} WHERE {condition}").format(
                    records=self._records, condition=condition
                ),
                params,
            )
            return [doc_id for (doc_id,) in found.fetchall()]

    def _condition(self, where: Mapping[str, Any] | None) -> tuple[Any, list[Any]]:
        """``where`` (the caller gate, Chroma's dialect) as a SQL condition on the gate's columns
        and its parameters; an operator or key the gate never produces is named in an error."""
        sql = self._sql
        if not where:
            return sql.SQL("true"), []
        if len(where) != 1:
            raise ValueError(f"a filter takes one key or operator per level, as in Chroma; got {sorted(where)}")
        [(key, value)] = where.items()
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise ValueError(f"{key} takes a non-empty list of filters, got {value!r}")
            parts = [self._condition(part) for part in value]
            joined = sql.SQL(" AND " if key == "$and" else " OR ").join(sql.SQL("({})").format(p) for p, _ in parts)
            return joined, [param for _, params in parts for param in params]
        operator, operand = next(iter(value.items())) if isinstance(value, dict) and len(value) == 1 else ("$eq", value)
        column = GATE_COLUMNS.get(key)
        if column is None:
            return self._body_condition(key, operator, operand)
        forms = {"$eq": "{} = %s", "$in": "{} = ANY(%s)"} if column != "readers" else {"$contains": "{} @> ARRAY[%s]::text[]"}
        if operator not in forms or (operator == "$in") != isinstance(operand, list):
            raise ValueError(f"the pgvector engine filters {key!r} with {' or '.join(forms)}, got {value!r}")
        return sql.SQL(forms[operator]).format(sql.Identifier(column)), [operand]

    def _body_condition(self, key: str, operator: str, operand: Any) -> tuple[Any, list[Any]]:
        """A condition of a query's date or filter (:meth:`~car_rag.eligibility.Gate.chroma_where`)
        on the record's body: ``car_time`` its date in seconds (an undated one's before every date),
        ``doc_type`` and ``source`` its fields, any other key its scope value, else its metadata
        value (as Chroma's flat metadata holds them)."""
        sql = self._sql
        if key == "car_time":
            comparisons = {"$lte": "<=", "$gte": ">=", "$gt": ">", "$lt": "<"}
            if operator not in comparisons or not isinstance(operand, (int, float)):
                raise ValueError(
                    f"the pgvector engine compares car_time with {', '.join(comparisons)} and a number, got {operand!r}"
                )
            dated = "extract(epoch FROM ((body::jsonb)->>{})::timestamptz)"
            when = f"coalesce({dated.format(repr('effective_at'))}, {dated.format(repr('published_at'))}, %s)"
            return sql.SQL(f"{when} {comparisons[operator]} %s"), [UNDATED.timestamp(), operand]
        if key in ("doc_type", "source"):
            held, params = sql.SQL("((body::jsonb)->>%s)"), [key]
        else:
            held, params = sql.SQL("(coalesce((body::jsonb)->'scope'->%s, (body::jsonb)->'metadata'->%s) #>> '{}')"), [key, key]
        if operator == "$in" and isinstance(operand, list):
            return sql.SQL("{} = ANY(%s)").format(held), [*params, [str(v) for v in operand]]
        if operator == "$eq" and isinstance(operand, (str, int, float, bool)):
            if key in ("doc_type", "source"):
                return sql.SQL("{} = %s").format(held), [*params, str(operand)]
            # Typed: true is not "true", 1 is not "1" (a JSON value against a JSON value).
            typed = sql.SQL("coalesce((body::jsonb)->'scope'->%s, (body::jsonb)->'metadata'->%s) = %s::jsonb")
            return typed, [key, key, json.dumps(operand)]
        raise ValueError(f"the pgvector engine filters {key!r} with $eq or $in, got {operator} {operand!r}")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
