"""The record log on PostgreSQL: one truth that several processes on several machines share.

Tables live in a schema of their own (default ``car_rag``), so one database can hold several
stores::

    store          the store's configuration (policy, embedding model and encoder, vector store)
    records        doc_id, seq (ingest order, kept when a record is replaced), change (the commit
                   that wrote it last: the change feed), fingerprint, body (the record as JSON),
                   vector (float32; the copy the vector store is filled from), vector_pending
                   (the durable outbox: true until the vector store has taken it), committed_at;
                   with the pgvector engine (:class:`VectorColumn`) also embedding (the vector as
                   pgvector's type, under an HNSW index) and tenant, public, readers (what the
                   caller gate reads), written in the same transaction
    edges          supersession edges (superseder, target, rule, confidence), a btree on target
    disputed_edges the claims of disputed pairs, both directions, a btree on target (the closure
                   query and a rewrite look edges up by the record they void)
    scope_index    (key, value, doc_id): the entity index, a btree on key and value

Writers take turns under a transaction-scoped advisory lock, so changes are numbered and
committed in one order: a reader that has seen change ``n`` has seen every change before it.
Each commit sends ``NOTIFY`` on the store's channel (delivered at commit) so that followers
(:mod:`car_rag.postgres.feed`) wake at once instead of at their next poll.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import numpy as np

from car_rag.eligibility import governance_metadata
from car_rag.extras import require
from car_rag.graph import Edge
from car_rag.record_log import Change, LoggedState, LogWriter, RecordLog, parse_stored
from car_rag.records import Record

__all__ = ["PostgresRecordLog", "Outbox", "VectorColumn", "DEFAULT_SCHEMA", "redact_url"]

DEFAULT_SCHEMA = "car_rag"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_LOCK_CLASS = 0x0CA7  # the first key of car-rag's advisory locks; the second is the schema's hash
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_S = 30
"""The longest any statement may run, waiting for another writer's turn included: a stalled
database fails a write (a 503 that stores nothing) instead of holding it for ever."""
PGVECTOR_MIN = (0, 8)
"""pgvector's first release with iterative index scans, which keep a filtered HNSW search from
returning fewer than k records (``hnsw.iterative_scan``)."""


_REDACTED = "***"


def redact_url(url: str) -> str:
    """``url`` without its password, for messages and logs: a ``postgresql://`` URL keeps its
    form with the password of its user part and of its ``?password=`` parameter replaced; a
    key-value DSN (``host=h password=...``) is read by libpq's rules (``psycopg.conninfo``) and
    written back with the password replaced. Whatever cannot be read that way is not shown."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        userinfo, at, hostport = parts.netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        query = [(k, _REDACTED if k == "password" else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        netloc = f"{user}{colon and ':' + _REDACTED}{at}{hostport}"
        return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{urlencode(query, safe='*/')}" if query else "")
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(url)
    except Exception:  # psycopg missing, or not a DSN libpq reads: it may hold a password anywhere
        return "<a connection string that is not a postgresql:// URL or a DSN libpq reads>"
    if "password" in params:
        params["password"] = _REDACTED
    return make_conninfo("", **params)


def _vector_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def _vector(data: bytes | None) -> np.ndarray | None:
    return None if data is None else np.frombuffer(data, dtype="<f4")


@dataclass(frozen=True)
class VectorColumn:
    """The records' vectors as a pgvector column, ``vector(dimension)`` under an HNSW index for
    cosine distance (``m``, ``ef_construction``), and the fields the caller gate reads as columns:
    what a store whose vector engine is pgvector searches in SQL
    (:class:`~car_rag.postgres.vectors.PgVectorChannel`). Written in the records' own
    transaction, so nothing waits in an outbox."""

    dimension: int
    m: int
    ef_construction: int


class PostgresRecordLog(RecordLog):
    """Records, edges and the entity index of one store in PostgreSQL, shared by its processes.

    ``outbox``: vectors written with a record are marked pending until the vector store has
    taken them (it is another service, written after the commit; see :meth:`pending`)."""

    shared = True
    keeps_vectors = True

    def __init__(self, url: str, schema: str = DEFAULT_SCHEMA, *, outbox: bool = True):
        self.psycopg = require("psycopg", "postgres", "a store on PostgreSQL")
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema must be a lower-case SQL name (letters, digits, _), got {schema!r}")
        self.url, self.schema, self.outbox = url, schema, outbox
        self.location = f"{redact_url(url)} (schema {schema})"
        self.channel = f"car_rag_{schema}"
        """The NOTIFY channel a commit signals on."""
        self._lock_key = (_LOCK_CLASS, _schema_hash(schema))
        self._guard = threading.Lock()  # one statement at a time on the reading connection
        self._turn = threading.Lock()  # one write transaction at a time on the writing connection
        self._read: Any = None
        self._write: Any = None
        self.statement_timeout_s = STATEMENT_TIMEOUT_S
        """Bound on each statement of connections made from now on."""
        self.vector_column: VectorColumn | None = None
        """Set by :meth:`use_vector_column`: the pgvector column each write fills."""

    # ------------------------------------------------------------------ connections
    def connect(self, *, autocommit: bool = True, role: str = "read") -> Any:
        """A new connection to the store's database (``autocommit`` for reads and LISTEN), named
        in ``pg_stat_activity`` by this process and its ``role`` (read, write, feed, outbox)."""
        try:
            return self.psycopg.connect(
                self.url,
                autocommit=autocommit,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name=f"car-rag {os.getpid()} {role}",
                options=f"-c statement_timeout={self.statement_timeout_s * 1000:.0f}",
            )
        except self.psycopg.Error as exc:
            raise self.psycopg.OperationalError(f"cannot reach PostgreSQL at {redact_url(self.url)}: {exc}") from None

    def _reader(self) -> Any:
        if self._read is None or self._read.closed or self._read.broken:
            self._read = self.connect()
        return self._read

    def _writer(self) -> Any:
        if self._write is None or self._write.closed or self._write.broken:
            self._write = self.connect(autocommit=False, role="write")
        return self._write

    def _table(self, name: str) -> Any:
        return self.psycopg.sql.Identifier(self.schema, name)

    def _sql(self, text: str) -> Any:
        """``text`` with ``{name}`` placeholders bound to this store's tables."""
        names = ("store", "records", "edges", "disputed_edges", "scope_index")
        return self.psycopg.sql.SQL(text).format(**{n: self._table(n) for n in names if "{" + n + "}" in text})

    # ------------------------------------------------------------------ setup
    def setup(self, config: dict[str, Any] | None, *, vectors: VectorColumn | None = None) -> dict[str, Any] | None:
        """Create the schema when missing and return the stored configuration; store ``config``
        when none is stored yet (the first process to open a new store), with the pgvector column
        ``vectors`` when given (in the same transaction: no such store without it). Processes
        opening the same new store at once take turns."""
        sql = self.psycopg.sql
        with self.connect(autocommit=False, role="setup") as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", self._lock_key)
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            for statement in _SCHEMA:
                conn.execute(self._sql(statement))
            row = conn.execute(self._sql("SELECT config FROM {store} WHERE id = 1")).fetchone()
            if row is None and config is not None:
                if vectors is not None:
                    self._add_vector_column(conn, vectors)
                conn.execute(self._sql("INSERT INTO {store} (id, config) VALUES (1, %s)"), (json.dumps(config),))
                return config
            return None if row is None else dict(row[0])

    def _add_vector_column(self, conn: Any, column: VectorColumn) -> None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except self.psycopg.Error as exc:
            raise RuntimeError(
                f"{self.location}: the pgvector engine needs the vector extension in this database "
                f"({str(exc).strip()}): CREATE EXTENSION vector as a user allowed to"
            ) from None
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < PGVECTOR_MIN:
            raise RuntimeError(
                f"{self.location}: the pgvector engine needs pgvector {'.'.join(map(str, PGVECTOR_MIN))} or "
                f"later (iterative index scans keep filtered searches whole); this database has {version}: "
                "ALTER EXTENSION vector UPDATE"
            )
        conn.execute(
            self._sql(
                f"ALTER TABLE {{records}} ADD COLUMN embedding vector({int(column.dimension)}), "
                "ADD COLUMN tenant text, ADD COLUMN public boolean, ADD COLUMN readers text[]"
            )
        )
        conn.execute(
            self._sql(
                f"CREATE INDEX records_embedding ON {{records}} USING hnsw (embedding vector_cosine_ops) "
                f"WITH (m = {int(column.m)}, ef_construction = {int(column.ef_construction)})"
            )
        )

    def use_vector_column(self, column: VectorColumn) -> None:
        """Write every record's vector and caller-gate fields to the pgvector columns that
        :meth:`setup` made, in the records' own transaction: no vector waits in the outbox."""
        self.vector_column, self.outbox = column, False

    def replace_config(self, config: dict[str, Any]) -> None:
        """Store ``config`` (a policy upgrade that only adds rules, see ``CARStore.open``)."""
        with self._guard:
            self._reader().execute(self._sql("UPDATE {store} SET config = %s WHERE id = 1"), (json.dumps(config),))

    # ------------------------------------------------------------------ reading
    def load(self, *, vectors_up_to: int = 0) -> LoggedState:
        with self.connect(autocommit=False) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")  # one snapshot for all of it
            count = conn.execute(self._sql("SELECT count(*) FROM {records}")).fetchone()[0]
            vectors = "vector" if count <= vectors_up_to else "NULL"
            records: list[Record] = []
            kept: dict[str, np.ndarray] = {}
            with conn.cursor(name="car_rag_load") as cursor:  # server-side: bodies parsed as they arrive, not all held
                cursor.itersize = 5000
                cursor.execute(self._sql(f"SELECT doc_id, body, {vectors} FROM {{records}} ORDER BY seq"))
                for doc_id, body, data in cursor:
                    records.append(parse_stored(body, self.location))
                    if data is not None:
                        kept[doc_id] = np.frombuffer(data, dtype="<f4")
            edges, disputed = (
                [Edge(*row) for row in conn.execute(self._sql(f"SELECT superseder, target, rule, confidence FROM {{{t}}}"))]
                for t in ("edges", "disputed_edges")
            )
            head = conn.execute(self._sql("SELECT coalesce(max(change), 0) FROM {records}")).fetchone()[0]
        return LoggedState(records, edges, disputed, head, kept)

    def fingerprints(self, doc_ids: Sequence[str]) -> dict[str, str]:
        with self._guard:
            return _fingerprints(self._reader(), self._sql, doc_ids)

    def ordered(self) -> list[tuple[str, str]]:
        with self._guard:
            return list(self._reader().execute(self._sql("SELECT doc_id, fingerprint FROM {records} ORDER BY seq")))

    def changes(self, after: int, *, vectors: bool = True) -> list[Change]:
        """Changes committed after ``after``, oldest first (the change feed); ``vectors``: with
        each record's vector (a process that searches exactly needs them, one past the
        exact-search limit does not)."""
        with self._guard:
            return _changes(self._reader(), self._sql, after, vectors)

    def head(self) -> int:
        """The newest committed change."""
        with self._guard:
            return int(self._reader().execute(self._sql("SELECT coalesce(max(change), 0) FROM {records}")).fetchone()[0])

    # ------------------------------------------------------------------ writing
    @contextmanager
    def transaction(self) -> Iterator[LogWriter]:
        with self._turn:
            conn = self._writer()
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", self._lock_key)
                writer = _PostgresWriter(self, conn)
                yield writer
                if not writer.committed:
                    conn.commit()
            except BaseException:
                if not conn.closed and not conn.broken:
                    conn.rollback()
                raise

    # ------------------------------------------------------------------ the vector outbox
    def pending(self, limit: int = 500, doc_ids: Sequence[str] | None = None, min_age_s: float = 0.0) -> Outbox:
        """Up to ``limit`` records whose vectors the vector store has not taken, in a transaction
        of their own (``with log.pending() as outbox: … outbox.done(...)``); ``doc_ids``: only
        those, waiting for another process that is handing them over (a writer's own records);
        ``min_age_s``: only those written at least that long ago (their writer had its chance)."""
        return Outbox(self, limit, doc_ids, min_age_s)

    def count_pending(self) -> int:
        with self._guard:
            return int(self._reader().execute(self._sql("SELECT count(*) FROM {records} WHERE vector_pending")).fetchone()[0])

    def close(self) -> None:
        with self._guard, self._turn:
            for conn in (self._read, self._write):
                if conn is not None and not conn.closed:
                    conn.close()


class _PostgresWriter(LogWriter):
    def __init__(self, log: PostgresRecordLog, conn: Any):
        self.log, self.conn = log, conn

    def changes(self, after: int, *, vectors: bool = True) -> list[Change]:
        return _changes(self.conn, self.log._sql, after, vectors)

    def fingerprints(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return _fingerprints(self.conn, self.log._sql, doc_ids)

    def write(
        self, records: Sequence[Record], edges: Iterable[Edge], disputed: Iterable[Edge], vectors: np.ndarray | None
    ) -> int:
        sql, conn = self.log._sql, self.conn
        seq, change = conn.execute(sql("SELECT coalesce(max(seq), 0), coalesce(max(change), 0) FROM {records}")).fetchone()
        pending = vectors is not None and self.log.outbox
        ids = [r.doc_id for r in records]
        written: list[tuple[Any, ...]] = [
            (
                r.doc_id,
                seq + i,
                change + i,
                r.fingerprint(),
                r.model_dump_json(),
                None if vectors is None else _vector_bytes(vectors[i - 1]),
                pending,
            )
            for i, r in enumerate(records, 1)
        ]
        columns, values, updates = "", "", ""
        if self.log.vector_column is not None:
            if vectors is None:
                raise ValueError(f"{self.log.location} searches vectors in SQL: every record written needs its vector")
            columns, values = ", embedding, tenant, public, readers", ", %s::vector, %s, %s, %s"
            updates = (
                ", embedding = excluded.embedding, tenant = excluded.tenant, public = excluded.public, readers = excluded.readers"
            )
            written = [(*row, vector.tolist(), *_gate(r)) for row, vector, r in zip(written, vectors, records)]
        with conn.cursor() as cur:
            cur.executemany(
                sql(
                    f"INSERT INTO {{records}} (doc_id, seq, change, fingerprint, body, vector, vector_pending{columns}) "
                    f"VALUES (%s, %s, %s, %s, %s, %s, %s{values}) ON CONFLICT (doc_id) DO UPDATE SET "
                    "change = excluded.change, fingerprint = excluded.fingerprint, body = excluded.body, "
                    f"vector = excluded.vector, vector_pending = excluded.vector_pending{updates}, "
                    "committed_at = clock_timestamp()"
                ),
                written,
            )
            for table in ("edges", "disputed_edges"):
                cur.execute(sql(f"DELETE FROM {{{table}}} WHERE superseder = ANY(%s) OR target = ANY(%s)"), (ids, ids))
            for table, rows in (("edges", edges), ("disputed_edges", disputed)):
                cur.executemany(
                    sql(f"INSERT INTO {{{table}}} (superseder, target, rule, confidence) VALUES (%s, %s, %s, %s)"),
                    [(e.superseder, e.target, e.rule, e.confidence) for e in rows],
                )
            cur.execute(sql("DELETE FROM {scope_index} WHERE doc_id = ANY(%s)"), (ids,))
            cur.executemany(
                sql("INSERT INTO {scope_index} (key, value, doc_id) VALUES (%s, %s, %s)"),
                [(k, v, r.doc_id) for r in records for k, v in r.scope.items()],
            )
            head = change + len(records)
            cur.execute("SELECT pg_notify(%s, %s)", (self.log.channel, str(head)))
        return int(head)

    def commit(self) -> None:
        self.conn.commit()
        self.committed = True


class Outbox:
    """Records whose vectors the vector store has not taken, locked by this transaction so that
    processes draining at once take different ones (``FOR UPDATE SKIP LOCKED``), or, for given
    records, wait until another process has handed them over (then none is still pending)."""

    def __init__(self, log: PostgresRecordLog, limit: int, doc_ids: Sequence[str] | None = None, min_age_s: float = 0.0):
        self.log, self.limit, self.doc_ids, self.min_age_s = log, limit, doc_ids, min_age_s
        self.rows: list[tuple[str, int, Record, np.ndarray]] = []
        """(doc_id, change, record, vector), oldest change first."""
        self._done: list[tuple[str, int]] = []

    def __enter__(self) -> Outbox:
        self.conn = self.log.connect(autocommit=False, role="outbox")
        if self.doc_ids is None:
            found = self.conn.execute(
                self.log._sql(
                    "SELECT doc_id, change, body, vector FROM {records} WHERE vector_pending AND committed_at <= "
                    "clock_timestamp() - make_interval(secs => %s) ORDER BY change LIMIT %s FOR UPDATE SKIP LOCKED"
                ),
                (self.min_age_s, self.limit),
            ).fetchall()
        else:
            found = self.conn.execute(
                self.log._sql(
                    "SELECT doc_id, change, body, vector FROM {records} WHERE vector_pending AND doc_id = ANY(%s) "
                    "ORDER BY change LIMIT %s FOR UPDATE"
                ),
                (list(self.doc_ids), self.limit),
            ).fetchall()
        self.rows = [(d, int(c), parse_stored(body, self.log.location), np.frombuffer(v, dtype="<f4")) for d, c, body, v in found]
        return self

    def done(self, taken: Iterable[tuple[str, int]]) -> None:
        """These (doc_id, change) are in the vector store: no longer pending when the block ends
        (unless a newer change of the record came meanwhile)."""
        self._done.extend(taken)

    def __exit__(self, kind: object, *_: object) -> None:
        try:
            if kind is None and self._done:
                with self.conn.cursor() as cur:
                    cur.executemany(
                        self.log._sql("UPDATE {records} SET vector_pending = false WHERE doc_id = %s AND change = %s"), self._done
                    )
            if kind is None:
                self.conn.commit()
            else:
                self.conn.rollback()
        finally:
            self.conn.close()


def _gate(record: Record) -> tuple[str, bool, list[str]]:
    """The caller gate's fields of ``record`` (:func:`~car_rag.eligibility.governance_metadata`) as
    the tenant, public and readers columns."""
    meta = governance_metadata(record)
    return meta["car_tenant"], meta["car_public"], list(meta.get("allowed_principals", []))


def _fingerprints(conn: Any, sql: Any, doc_ids: Sequence[str]) -> dict[str, str]:
    rows = conn.execute(sql("SELECT doc_id, fingerprint FROM {records} WHERE doc_id = ANY(%s)"), (list(doc_ids),))
    return dict(rows.fetchall())


def _changes(conn: Any, sql: Any, after: int, vectors: bool) -> list[Change]:
    rows = conn.execute(
        sql(
            f"SELECT change, body, {'vector' if vectors else 'NULL'}, extract(epoch FROM committed_at) FROM {{records}} "
            "WHERE change > %s ORDER BY change"
        ),
        (after,),
    ).fetchall()
    return [Change(int(n), parse_stored(body, "the change feed"), _vector(v), float(at)) for n, body, v, at in rows]


def _schema_hash(schema: str) -> int:
    """A stable signed 32-bit number for ``schema`` (the advisory lock's second key)."""
    value = 0
    for byte in schema.encode():
        value = (value * 131 + byte) % 2**32
    return value - 2**32 if value >= 2**31 else value


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {store} (id integer PRIMARY KEY CHECK (id = 1), config jsonb NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {records} (doc_id text PRIMARY KEY, seq bigint NOT NULL UNIQUE, "
    "change bigint NOT NULL UNIQUE, fingerprint text NOT NULL, body text NOT NULL, vector bytea, "
    "vector_pending boolean NOT NULL DEFAULT false, committed_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    "CREATE INDEX IF NOT EXISTS records_pending ON {records} (change) WHERE vector_pending",
    "CREATE TABLE IF NOT EXISTS {edges} (superseder text NOT NULL, target text NOT NULL, rule text NOT NULL, "
    "confidence double precision NOT NULL DEFAULT 1.0, PRIMARY KEY (superseder, target))",
    "CREATE INDEX IF NOT EXISTS edges_by_target ON {edges} (target)",
    "CREATE TABLE IF NOT EXISTS {disputed_edges} (superseder text NOT NULL, target text NOT NULL, rule text NOT NULL, "
    "confidence double precision NOT NULL DEFAULT 1.0, PRIMARY KEY (superseder, target))",
    "CREATE INDEX IF NOT EXISTS disputed_edges_by_target ON {disputed_edges} (target)",
    "CREATE TABLE IF NOT EXISTS {scope_index} (key text NOT NULL, value text NOT NULL, doc_id text NOT NULL, "
    "PRIMARY KEY (key, value, doc_id))",
    "CREATE INDEX IF NOT EXISTS scope_index_by_doc ON {scope_index} (doc_id)",
)
