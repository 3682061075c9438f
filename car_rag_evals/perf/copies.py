"""A store on pgvector made of ``copies`` copies of another, in PostgreSQL: the perf store at 1M
records without ingesting a million records or computing their vectors (issue 36,
``evals/scale_out/stage2_1m.py``).

Copy ``k`` (0 to ``copies - 1``; copy 0 is the source's rows as they are) of every record has the
id ``<id>#k``, its ``supersedes`` ids and ``cve_id`` scope value tagged the same (its own chains:
its edges and claims are the source's between its own records), and its ``package`` value
``<package>~(k mod variants)`` (no suffix when ``k mod variants`` is 0), so a package a question
names holds the records of every ``variants``-th copy: a named scope grows with the store, as in
the streamed corpus. Its text is the source's; its vector the source's plus fresh Gaussian noise
(as :func:`~car_rag_evals.perf.corpus.gist_vectors` adds it), normalised. Each record is
validated and its body and fingerprint written as ingest writes them; ``seq`` and ``change``
follow the copies before it. The target's configuration is the source's, its tables are made
like the source's and its indexes again from the source's own definitions once the rows are in
and committed (one after another, HNSW last).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from car_rag.postgres import PostgresRecordLog
from car_rag.postgres.log import _vector_bytes
from car_rag.records import Record

__all__ = ["copy_store"]

_TABLES = ("store", "records", "edges", "disputed_edges", "scope_index")
_SCOPE_VALUE = "CASE key WHEN 'cve_id' THEN value || x.tag WHEN 'package' THEN value || x.variant ELSE value END"
_COPIES = (
    "CROSS JOIN generate_series(0, %(copies)s - 1) k CROSS JOIN LATERAL (SELECT CASE WHEN k = 0 THEN '' ELSE '#' || k END "
    "AS tag, CASE WHEN k %% %(variants)s = 0 THEN '' ELSE '~' || (k %% %(variants)s) END AS variant) x"
)


def tagged(body: str, k: int, variants: int) -> Record:
    """Copy ``k`` of the stored record ``body`` (see the module)."""
    data = json.loads(body)
    tag, variant = f"#{k}" if k else "", f"~{k % variants}" if k % variants else ""
    data["doc_id"] += tag
    data["supersedes"] = [
        {**entry, "id": entry["id"] + tag} if isinstance(entry, dict) else entry + tag for entry in data["supersedes"]
    ]
    suffix = {"cve_id": tag, "package": variant}
    data["scope"] = {key: value + suffix.get(key, "") for key, value in data["scope"].items()}
    return Record.model_validate(data)


def copy_store(
    url: str, source: str, target: str, copies: int, *, variants: int = 4, noise: float = 0.25, seed: int = 7
) -> dict[str, Any]:
    """Make the store ``target`` (a schema, replaced) of ``copies`` copies of the store ``source``
    in the database at ``url``; what was made and the seconds of each step."""
    if copies < 1 or variants < 1:
        raise ValueError(f"copies and variants must be >= 1, got {copies} and {variants}")
    log = PostgresRecordLog(url, source)
    seconds: dict[str, float] = {}
    tick = time.perf_counter()
    with log.connect(autocommit=False, role="copies") as conn:
        conn.execute("SET statement_timeout = 0")
        conn.execute("SET maintenance_work_mem = '1GB'")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE connamespace = %s::regnamespace) ORDER BY indexname = 'records_embedding'",
            (source, source),
        ).fetchall()
        count = conn.execute(f'SELECT count(*) FROM "{source}".records').fetchone()[0]
        conn.execute(f'DROP SCHEMA IF EXISTS "{target}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{target}"')
        for table in _TABLES:  # columns, defaults and constraints but no indexes: those come after the rows
            conn.execute(f'CREATE TABLE "{target}".{table} (LIKE "{source}".{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)')
        conn.execute(f'INSERT INTO "{target}".store SELECT * FROM "{source}".store')
        fill = {"copies": copies, "variants": variants}
        conn.execute(f'INSERT INTO "{target}".records SELECT * FROM "{source}".records')
        for table in ("edges", "disputed_edges"):
            conn.execute(
                f'INSERT INTO "{target}".{table} SELECT superseder || x.tag, target || x.tag, rule, confidence '
                f'FROM "{source}".{table} {_COPIES}',
                fill,
            )
        conn.execute(
            f'INSERT INTO "{target}".scope_index SELECT key, {_SCOPE_VALUE}, doc_id || x.tag '
            f'FROM "{source}".scope_index {_COPIES}',
            fill,
        )
        seconds["copy 0, edges, claims, scope index"] = time.perf_counter() - tick
        tick = time.perf_counter()
        rows = conn.execute(
            f'SELECT seq, change, body, vector, tenant, public, readers FROM "{source}".records ORDER BY seq'
        ).fetchall()
        top = conn.execute(f'SELECT max(seq), max(change) FROM "{source}".records').fetchone()
        vectors = np.vstack([np.frombuffer(row[3], dtype="<f4") for row in rows])
        rng = np.random.default_rng(seed)
        columns = "doc_id, seq, change, fingerprint, body, vector, vector_pending, embedding, tenant, public, readers"
        for k in range(1, copies):
            moved = vectors + rng.standard_normal(vectors.shape, dtype=np.float32) * (noise / np.sqrt(vectors.shape[1]))
            moved /= np.linalg.norm(moved, axis=1, keepdims=True)
            with conn.cursor().copy(f'COPY "{target}".records ({columns}) FROM STDIN') as copy:
                for (seq, change, body, _, tenant, public, readers), vector in zip(rows, moved):
                    record = tagged(body, k, variants)
                    copy.write_row(
                        (
                            record.doc_id,
                            seq + k * top[0],
                            change + k * top[1],
                            record.fingerprint(),
                            record.model_dump_json(),
                            _vector_bytes(vector),
                            False,
                            "[" + ",".join(map(repr, vector.tolist())) + "]",
                            tenant,
                            public,
                            readers,
                        )
                    )
        seconds["copies 1.. of the records"] = time.perf_counter() - tick
        conn.commit()  # the rows stay if an index build below is cut off (HNSW at 1M takes the longest)
        conn.autocommit = True
        for table in ("records", "edges", "disputed_edges", "scope_index"):
            conn.execute(f'ANALYZE "{target}".{table}')
        for constraint in conn.execute(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid), conname FROM pg_constraint "
            "WHERE connamespace = %s::regnamespace AND contype IN ('p', 'u') ORDER BY conname",
            (source,),
        ).fetchall():
            table = constraint[0].rsplit(".", 1)[-1]
            conn.execute(f'ALTER TABLE "{target}".{table} ADD CONSTRAINT {constraint[2]} {constraint[1]}')
        for name, definition in indexes:
            started = time.perf_counter()
            conn.execute(definition.replace(f" ON {source}.", f' ON "{target}".', 1))
            seconds[f"index {name}"] = time.perf_counter() - started
    made = count * copies
    return {"records": made, "copies": copies, "variants": variants, "seconds": seconds, "source_records": count}
