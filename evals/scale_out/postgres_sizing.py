"""PostgreSQL/pgvector at scale for the plan to 100M records (issue 36): the perf corpus written into
a shared store's schema by the bulk loader (:mod:`car_rag_evals.perf.bulk_load`, COPY; rows as
``car-rag ingest`` writes them), then

* ``load``: load rates, and table and index sizes per record (records, edges, entity index,
  vectors), for each ``--sizes`` (with gist vectors up to ``--vectors-upto``; above it the authority
  log alone, vector columns NULL);
* ``index``: pgvector's HNSW index as the store defines it (m 32, ef_construction 200) and an
  IVFFlat index (lists = records / 1,000), build time, the server's memory while building
  (``maintenance_work_mem``, and whether pgvector said the graph outgrew it), and recall@50 against
  exact search on the corpus's questions (MiniLM-encoded), for the sizes with vectors;
* ``replica``: the authority log at a size past what the loader's Python reaches here, in SQL: a loaded
  store's rows copied with new ids and as many packages as the streamed corpus has (:data:`REPLICA`);
* ``stage2``: the recursive Stage-2 query (``evals/serve/stage2_sql.py``'s
  ``SqlAuthorityStore.closure_by_edges``, one round trip) over each size's store, from Stage-1 seeds:
  each question's 50 nearest records by exact dense search, alone and with the package the
  question names (as a scope the query names). Over a replica the seeds are its source's (its first
  copy); the named package holds as many records as in the streamed corpus of that size.

One PostgreSQL (``car_rag.postgres.server``) under ``--work`` serves every phase and stays up between
runs (``--stop`` stops it). Run from the repository root with ``evals/serve`` on ``PYTHONPATH`` (the
prototype's query is ``evals/serve/stage2_sql.py``'s; until ``car_rag.postgres.closure`` is merged), nice'd::

    export PYTHONPATH=$PYTHONPATH:evals/serve
    nice -n 10 python evals/scale_out/postgres_sizing.py --phases load index --sizes 100000
    nice -n 10 python evals/scale_out/postgres_sizing.py --phases replica --sizes 1000000 10000000 --replica-of 100000
    nice -n 10 python evals/scale_out/postgres_sizing.py --phases stage2 --sizes 100000 1000000 10000000

``--phases load`` streams any size through the bulk loader; on 2 shared cores 10M records did not fit
a session, hence the replicas. Results merge into ``evals/results/scale-out/postgres-sizing.json``
(load, index, replica) and ``stage2-sql-scale.json`` (stage2), each with its ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from stage2_sql import SqlAuthorityStore  # noqa: E402  (evals/serve/ on PYTHONPATH: the prototype's query)

from car_rag import load_policy  # noqa: E402
from car_rag.embedding import DEFAULT_MODEL, Embedder  # noqa: E402
from car_rag.postgres import PostgresRecordLog  # noqa: E402
from car_rag.postgres import server as pg_server  # noqa: E402
from car_rag_evals.perf.bulk_load import BulkLoader, create_store  # noqa: E402
from car_rag_evals.perf.corpus import generate, gist_vectors, stream  # noqa: E402
from car_rag_evals.perf.stats import percentiles  # noqa: E402
from car_rag_evals.results_header import load_text, results_header  # noqa: E402
from car_rag_evals.servers import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "evals" / "results" / "scale-out"
SEED = 7
K = 50
HNSW = "records_embedding"
TABLES = ("records", "edges", "disputed_edges", "scope_index")
PASSES = 3


def schema_of(size: int) -> str:
    return f"perf_{size}"


def run_header() -> dict[str, Any]:
    """Each phase's row opens with its own run: the command, the commit (and whether the checkout had
    uncommitted changes), the time, the load averages and the machine."""
    header = results_header(__file__)
    return {
        "command": header.command,
        "commit": header.commit + (" (uncommitted changes)" if header.uncommitted else ""),
        "when": header.when,
        "load_average": header.load,
        "machine": {"cpus": header.cpus, "platform": header.platform, "python": header.python},
    }


def server(work: Path) -> str:
    """The PostgreSQL of ``work`` (started when down, on the port it had before)."""
    pinned = work / "pg-port"
    port = int(pinned.read_text()) if pinned.is_file() else free_port()
    work.mkdir(parents=True, exist_ok=True)
    pinned.write_text(str(port))
    return pg_server.start(work / "pg", port=port)


def settings(conn: Any) -> dict[str, str]:
    names = ("shared_buffers", "max_wal_size", "max_parallel_maintenance_workers", "work_mem", "server_version")
    found = {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}
    found["pgvector"] = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    return found


def vectors_for(size: int, work: Path, embedder: Embedder) -> np.ndarray:
    """The corpus's gist vectors, kept under ``work`` (the same at every run)."""
    cache = work / f"gist-{size}-{SEED}.npy"
    if not cache.is_file():
        np.save(cache, gist_vectors(generate(size, seed=SEED), embedder, seed=SEED))
    return np.load(cache)


# --------------------------------------------------------------------------- load


def sizes(conn: Any, schema: str, records: int) -> dict[str, Any]:
    """Heap (with TOAST) and each index of every table, in bytes and per record."""
    out: dict[str, Any] = {}
    for table in TABLES:
        rows = conn.execute(
            "SELECT count(*) FROM " + f"{schema}.{table}",
        ).fetchone()[0]
        heap = conn.execute("SELECT pg_table_size(%s)", (f"{schema}.{table}",)).fetchone()[0]
        indexes = dict(
            conn.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes WHERE schemaname = %s "
                "AND relname = %s ORDER BY 1",
                (schema, table),
            ).fetchall()
        )
        out[table] = {"rows": rows, "heap_bytes": heap, "indexes_bytes": indexes}
    total = sum(t["heap_bytes"] + sum(t["indexes_bytes"].values()) for t in out.values())
    vector_bytes = conn.execute(
        f"SELECT coalesce(sum(pg_column_size(vector)), 0), coalesce(sum(pg_column_size(embedding)), 0) FROM {schema}.records"
    ).fetchone()
    out["columns_bytes"] = {"vector (bytea)": int(vector_bytes[0]), "embedding (pgvector)": int(vector_bytes[1])}
    out["total_bytes"] = total
    out["per_record_bytes"] = total / records
    return out


def phase_load(url: str, size: int, work: Path, vectors_upto: int, embedder: Embedder) -> dict[str, Any]:
    policy = load_policy("security-advisory")
    schema = schema_of(size)
    log = PostgresRecordLog(url, schema)
    with log.connect() as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    create_store(url, schema, policy, work / schema, embedder)
    with_vectors = size <= vectors_upto
    vectors = vectors_for(size, work, embedder) if with_vectors else None
    items = (record for record, _, _ in stream(size, seed=SEED))
    started = {"load_average": os.getloadavg()}
    tick = time.perf_counter()
    loader = BulkLoader(url, schema, policy, edges="graph" if with_vectors else "runs")
    report = loader.load(items, vectors, defer=(HNSW,))
    seconds = time.perf_counter() - tick
    with log.connect() as conn:
        measured = sizes(conn, schema, report.records)
    copy_s = report.seconds["copy_records"] + report.seconds["copy_edges"]
    return {
        **started,
        "records": report.records,
        "vectors": with_vectors,
        "edges_from": loader.edges,
        "edges": report.edges,
        "disputed": report.disputed,
        "scope_rows": report.scope_rows,
        "seconds": {**report.seconds, "total": seconds},
        "records_per_s": {"whole load": report.records / seconds, "COPY alone": report.records / copy_s},
        "loader_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "hnsw_definition": report.deferred[0][1] if report.deferred else None,
        "sizes": measured,
    }


_COPIES = (
    "CROSS JOIN generate_series(0, {copies} - 1) k "
    "CROSS JOIN LATERAL (SELECT CASE WHEN k = 0 THEN '' ELSE '#' || k END AS tag, "
    "CASE WHEN k % {variants} = 0 THEN '' ELSE '~' || (k % {variants}) END AS variant) x"
)
REPLICA = (
    # The k-th copy of every row: its ids get "#k" (new records, new chains), its package "~(k mod
    # variants)" (so that a corpus of any size has as many packages as the streamed one: 2,000), bodies
    # verbatim (the query reads and parses the same bytes; the records they parse into are the source's).
    "CREATE TABLE {t}.records (LIKE {s}.records INCLUDING DEFAULTS)",
    "INSERT INTO {t}.records (doc_id, seq, change, fingerprint, body, vector_pending, tenant, public, readers) "
    "SELECT doc_id || x.tag, seq + k * {n}, change + k * {n}, fingerprint, body, false, tenant, public, readers "
    "FROM {s}.records " + _COPIES,
    "CREATE TABLE {t}.edges (LIKE {s}.edges INCLUDING DEFAULTS)",
    "INSERT INTO {t}.edges SELECT superseder || x.tag, target || x.tag, rule, confidence FROM {s}.edges " + _COPIES,
    "CREATE TABLE {t}.disputed_edges (LIKE {s}.disputed_edges INCLUDING DEFAULTS)",
    "CREATE TABLE {t}.scope_index (LIKE {s}.scope_index INCLUDING DEFAULTS)",
    "INSERT INTO {t}.scope_index SELECT key, value || CASE key WHEN 'cve_id' THEN x.tag WHEN 'package' THEN x.variant "
    "ELSE '' END, doc_id || x.tag FROM {s}.scope_index " + _COPIES,
    "ALTER TABLE {t}.records ADD PRIMARY KEY (doc_id), ADD UNIQUE (seq), ADD UNIQUE (change)",
    "ALTER TABLE {t}.edges ADD PRIMARY KEY (superseder, target)",
    "CREATE INDEX edges_by_target ON {t}.edges (target)",
    "ALTER TABLE {t}.disputed_edges ADD PRIMARY KEY (superseder, target)",
    "CREATE INDEX disputed_edges_by_target ON {t}.disputed_edges (target)",
    "ALTER TABLE {t}.scope_index ADD PRIMARY KEY (key, value, doc_id)",
    "CREATE INDEX scope_index_by_doc ON {t}.scope_index (doc_id)",
    "ANALYZE {t}.records",
    "ANALYZE {t}.edges",
    "ANALYZE {t}.scope_index",
)
PACKAGES = 2_000
"""The streamed corpus's packages from 400k records on (``corpus.generate``): a replica keeps it."""


def phase_replica(url: str, size: int, source: int) -> dict[str, Any]:
    """The authority log at ``size`` records without the Python of a load: the ``source`` store's
    records, edges and entity index copied ``size / source`` times in SQL (:data:`REPLICA`; no
    vectors), with as many packages as the streamed corpus of that size (records per package grow
    with the size as there). Not ingest's rows: the same shapes, for what tables, indexes and the
    recursive query cost at that size."""
    copies = size // source
    with PostgresRecordLog(url, schema_of(source)).connect() as conn:
        held = conn.execute(
            f"SELECT count(DISTINCT value) FROM {schema_of(source)}.scope_index WHERE key = 'package'"
        ).fetchone()[0]
    variants = max(1, min(copies, PACKAGES // held))
    fill = {"t": schema_of(size), "s": schema_of(source), "n": source, "copies": copies, "variants": variants}
    log = PostgresRecordLog(url, schema_of(size))
    out: dict[str, Any] = {
        "load_average": os.getloadavg(),
        "built_as": f"{copies} SQL copies of the {source:,}-record store, its {held} packages in {variants} variants",
        "source": source,
        "seconds": {},
    }
    with log.connect() as conn:
        conn.execute("SET statement_timeout = 0")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema_of(size)} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema_of(size)}")
        conn.execute("SET maintenance_work_mem = '1GB'")
        for statement in REPLICA:
            tick = time.perf_counter()
            conn.execute(statement.format(**fill))
            out["seconds"][statement.format(**fill)[:70]] = time.perf_counter() - tick
        out["sizes"] = sizes(conn, schema_of(size), size)
    return out


# --------------------------------------------------------------------------- index


class BackendMemory:
    """The peak RSS of a PostgreSQL backend and its parallel workers while a statement runs (same
    machine: /proc), sampled every 0.2 s."""

    def __init__(self, pid: int):
        self.pid, self.peak_mb, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _pids(self) -> list[int]:
        out = [self.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"parallel worker for PID " + str(self.pid).encode() in cmdline:
                    out.append(int(entry.name))
        return out

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            total = 0.0
            for pid in self._pids():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                if m := re.search(r"VmRSS:\s+(\d+) kB", status):
                    total += int(m.group(1)) / 1024
            self.peak_mb = max(self.peak_mb, total)

    def __enter__(self) -> BackendMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def build(conn: Any, statement: str, memory: str) -> dict[str, Any]:
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (memory,))
    with BackendMemory(conn.info.backend_pid) as watch:
        tick = time.perf_counter()
        conn.execute(statement)
        seconds = time.perf_counter() - tick
    return {
        "statement": statement,
        "seconds": seconds,
        "maintenance_work_mem": memory,
        "peak_rss_mb": watch.peak_mb,
        "notices": notices,
    }


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> list[list[int]]:
    out = []
    for q in queries:
        scores = vectors @ q
        top = np.argpartition(-scores, k)[:k]
        out.append(top[np.argsort(-scores[top])].tolist())
    return out


def recall(conn: Any, schema: str, queries: np.ndarray, exact: list[set[str]], setting: tuple[str, int]) -> dict[str, Any]:
    conn.execute(f"SET {setting[0]} = {int(setting[1])}")
    found, times = [], []
    for q in queries:
        text = "[" + ",".join(f"{x:.8f}" for x in q) + "]"
        tick = time.perf_counter()
        rows = conn.execute(
            f"SELECT doc_id FROM {schema}.records ORDER BY embedding <=> %s::vector LIMIT {K}", (text,)
        ).fetchall()
        times.append((time.perf_counter() - tick) * 1000)
        found.append({r[0] for r in rows})
    per = [len(f & e) / K for f, e in zip(found, exact)]
    return {
        "setting": f"{setting[0]} = {setting[1]}",
        "recall_at_50": float(np.mean(per)),
        "min": float(min(per)),
        "ms": percentiles(times),
    }


def phase_index(url: str, size: int, work: Path, embedder: Embedder, statement: str, memory: str) -> dict[str, Any]:
    """One vector index built (``statement``), its recall@50 at three settings, then dropped unless it
    is the store's own (HNSW): an index at a time, so that the planner takes the one measured."""
    schema = schema_of(size)
    corpus = generate(size, seed=SEED)
    ids = [r["doc_id"] for r in corpus.records]
    queries = np.asarray(embedder.encode([q.query for q in corpus.queries]), dtype=np.float32)
    del corpus
    exact = [{ids[i] for i in top} for top in exact_top(vectors_for(size, work, embedder), queries, K)]
    name = HNSW if " hnsw " in statement else "records_ivfflat"
    log = PostgresRecordLog(url, schema)
    with log.connect() as conn:
        conn.execute("SET statement_timeout = 0")
        for index in (HNSW, "records_ivfflat"):
            conn.execute(f"DROP INDEX IF EXISTS {schema}.{index}")
        out = {"load_average": os.getloadavg(), "queries": len(exact), **build(conn, statement, memory)}
        out["bytes"] = conn.execute(f"SELECT pg_relation_size('{schema}.{name}')").fetchone()[0]
        if name == HNSW:
            settings = [("hnsw.ef_search", ef) for ef in (40, 100, 400)]
        else:
            lists = int(re.search(r"lists = (\d+)", statement).group(1))  # type: ignore[union-attr]
            settings = [("ivfflat.probes", p) for p in (1, 10, max(1, round(lists**0.5)))]
        out["recall"] = [recall(conn, schema, queries, exact, setting) for setting in settings]
        if name != HNSW:
            conn.execute(f"DROP INDEX {schema}.{name}")
    return out


def ivfflat(size: int) -> str:
    """pgvector's advice: lists = rows / 1,000 up to 1M rows."""
    return (
        f"CREATE INDEX records_ivfflat ON {schema_of(size)}.records USING ivfflat (embedding vector_cosine_ops) "
        f"WITH (lists = {max(1, size // 1000)})"
    )


# --------------------------------------------------------------------------- stage 2


def seeds(size: int, work: Path, embedder: Embedder) -> list[dict[str, Any]]:
    """Per question: its 50 nearest records (exact) and the package it names."""
    cache = work / f"seeds-{size}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    corpus = generate(size, seed=SEED)
    ids = [r["doc_id"] for r in corpus.records]
    packages = {r["scope"]["package"] for r in corpus.records}
    queries = np.asarray(embedder.encode([q.query for q in corpus.queries]), dtype=np.float32)
    tops = exact_top(vectors_for(size, work, embedder), queries, K)
    out = []
    for q, top in zip(corpus.queries, tops):
        named = sorted(p for p in packages if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", q.query))
        out.append({"query_id": q.query_id, "hits": [ids[i] for i in top], "package": named})
    cache.write_text(json.dumps(out))
    return out


def phase_stage2(url: str, size: int, seeded: list[dict[str, Any]], seeds_from: int) -> dict[str, Any]:
    log = PostgresRecordLog(url, schema_of(size))
    sql = SqlAuthorityStore(log)

    variants = {"hits only": lambda s: {}, "hits + named package": lambda s: {"package": s["package"]} if s["package"] else {}}
    times: dict[str, list[float]] = {v: [] for v in variants}
    closure: dict[str, list[int]] = {v: [] for v in variants}
    out: dict[str, Any] = {"load_average": os.getloadavg(), "seeds_from": seeds_from, "queries": len(seeded)}
    for n in range(PASSES):
        for s in seeded:
            for v, named in variants.items():
                tick = time.perf_counter()
                records, edges = sql.closure_by_edges(s["hits"], named(s))
                times[v].append((time.perf_counter() - tick) * 1000)
                if n == 0:
                    closure[v].append(len(records))
    out["latency_ms"] = {v: percentiles(t) for v, t in times.items()}
    out["closure_records"] = {v: {"mean": float(np.mean(c)), "max": int(max(c))} for v, c in closure.items()}
    out["backend_cpu_s"] = sql.backend_cpu_s()
    return out


# --------------------------------------------------------------------------- reports


def merge(path: Path, key: str, size: int, value: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    results = json.loads(path.read_text()) if path.is_file() else {}
    results.setdefault(key, {})[str(size)] = {**head, **value}
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return results


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e7 else f"{n / 1e6:,.1f} MB"


def _head(results: dict[str, Any], key: str) -> list[str]:
    lines = []
    for size, r in sorted(results.get(key, {}).items(), key=lambda x: int(x[0])):
        lines.append(
            f"- {key}, {int(size):,} records: `{r['command']}`, {r['when']}, commit {r['commit']}, load average "
            f"{load_text(r['load_average'])}"
        )
    return lines


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str]) -> list[str]:
    return [_row(header), _row(["---"] * len(header))]


def write_sizing_md(results: dict[str, Any], path: Path) -> None:
    loads = sorted(results.get("load", {}).items(), key=lambda x: int(x[0]))
    lines = ["# PostgreSQL/pgvector sizing for the plan to 100M (issue 36)", "", "Runs:", "", *_head(results, "load")]
    lines += [*_head(results, "index ivfflat"), *_head(results, "index hnsw"), *_head(results, "replica"), ""]
    if loads:
        pg = loads[0][1]["postgres"]
        lines += ["PostgreSQL: " + ", ".join(f"{k} {v}" for k, v in pg.items()), ""]
        lines += ["## Bulk load (COPY, rows as `car-rag ingest` writes them)", ""]
        lines += _table(
            ["records", "vectors", "edges from", "edges", "Python s (validate, scope, rules)", "COPY s", "indexes s (no HNSW)"]
            + ["whole load s", "records/s whole", "records/s COPY", "loader peak RSS"]
        )
        for size, r in loads:
            sec = r["seconds"]
            index_s = sum(v for k, v in sec.items() if k.startswith("index ")) + sec.get("analyze", 0.0)
            per_s = r["records_per_s"]
            lines.append(
                _row(
                    [f"{int(size):,}", "gist" if r["vectors"] else "none", r["edges_from"], f"{r['edges']:,}"]
                    + [f"{sec['records']:.0f}", f"{sec['copy_records'] + sec['copy_edges']:.0f}", f"{index_s:.0f}"]
                    + [f"{sec['total']:.0f}", f"{per_s['whole load']:,.0f}", f"{per_s['COPY alone']:,.0f}"]
                    + [f"{r['loader_peak_rss_mb']:,.0f} MB"]
                )
            )
        lines += ["", "## Sizes on disk", "", *_table(["records", "table", "rows", "heap (with TOAST)", "indexes", "per record"])]
        for size, r in loads:
            n = int(size)
            for table in TABLES:
                t = r["sizes"][table]
                idx = ", ".join(f"{k} {_mb(v)}" for k, v in t["indexes_bytes"].items())
                per = (t["heap_bytes"] + sum(t["indexes_bytes"].values())) / n
                lines.append(_row([f"{n:,}", table, f"{t['rows']:,}", _mb(t["heap_bytes"]), idx, f"{per:,.0f} B"]))
            cols = r["sizes"]["columns_bytes"]
            note = (
                f"({_mb(r['sizes']['total_bytes'])}; of it vector bytea {cols['vector (bytea)'] / n:,.0f} B, "
                f"pgvector column {cols['embedding (pgvector)'] / n:,.0f} B per record; no HNSW)"
            )
            lines.append(_row([f"{n:,}", "**all**", "", "", "", f"**{r['sizes']['per_record_bytes']:,.0f} B** {note}"]))
    replicas = sorted(results.get("replica", {}).items(), key=lambda x: int(x[0]))
    if replicas:
        lines += ["", "## The authority log at 1M and 10M: SQL replicas of a loaded store (no vectors)", ""]
        lines += _table(
            ["records", "built as", "seconds (copy, then indexes)", "table", "rows", "heap (with TOAST)", "indexes", "per record"]
        )
        for size, r in replicas:
            n = int(size)
            total = sum(r["seconds"].values())
            for table in TABLES:
                t = r["sizes"][table]
                idx = ", ".join(f"{k} {_mb(v)}" for k, v in t["indexes_bytes"].items())
                per = (t["heap_bytes"] + sum(t["indexes_bytes"].values())) / n
                lines.append(
                    _row(
                        [
                            f"{n:,}",
                            r["built_as"],
                            f"{total:.0f}",
                            table,
                            f"{t['rows']:,}",
                            _mb(t["heap_bytes"]),
                            idx,
                            f"{per:,.0f} B",
                        ]
                    )
                )
            lines.append(
                _row(
                    [
                        f"{n:,}",
                        "",
                        "",
                        "**all**",
                        "",
                        "",
                        "",
                        f"**{r['sizes']['per_record_bytes']:,.0f} B** ({_mb(r['sizes']['total_bytes'])})",
                    ]
                )
            )
    built = [(int(size), name, b) for name in ("ivfflat", "hnsw") for size, b in results.get(f"index {name}", {}).items()]
    if built:
        lines += ["", "## Vector indexes: build, and recall@50 against exact search", ""]
        lines += _table(
            ["records", "index", "build s", "maintenance_work_mem", "server peak RSS while building", "size", "notices"]
            + ["recall@50 mean (min), p50 ms, per setting"]
        )
        for size, name, b in sorted(built):
            rec = "; ".join(
                f"{x['setting']}: {x['recall_at_50']:.3f} ({x['min']:.2f}), {x['ms']['p50']:.1f} ms" for x in b["recall"]
            )
            lines.append(
                _row(
                    [f"{size:,}", name, f"{b['seconds']:.0f}", b["maintenance_work_mem"], f"{b['peak_rss_mb']:,.0f} MB"]
                    + [_mb(b["bytes"]), "; ".join(b["notices"]) or "none", rec]
                )
            )
        lines += ["", "Statements: " + "; ".join(f"`{b['statement']}`" for size, name, b in sorted(built))]
    path.write_text("\n".join(lines) + "\n")


def write_stage2_md(results: dict[str, Any], path: Path) -> None:
    rows = sorted(results.get("stage2", {}).items(), key=lambda x: int(x[0]))
    lines = [
        "# Stage 2 as one recursive SQL query at 100k, 1M and 10M records (issue 36)",
        "",
        "Runs:",
        "",
        *_head(results, "stage2"),
        "",
    ]
    lines += [
        "The query: `evals/serve/stage2_sql.py`'s `SqlAuthorityStore.closure_by_edges` (seeds, then everything that voids "
        "them through the stored edges, transitively, and the edges among them; one round trip, pipeline mode), over the "
        "stores (`postgres_sizing.py --phases load` or `replica`) with the indexes the schema has (records primary key, "
        "`edges_by_target`, `scope_index` primary key). Seeds per question: its 50 nearest records by exact dense "
        "search over the gist vectors (over a replica: those of the store it copies, whose records are its first copy), "
        "alone, and with the package the question names as a named scope (every record of that package is a seed). "
        f"{PASSES} passes over the questions, the two variants interleaved; the sizes one after another, each under the "
        "load average in its row (2 shared cores; the client and PostgreSQL on the same machine, both nice'd).",
        "",
        *_table(
            ["records", "store", "load average", "seeds from", "questions", "variant", "p50 ms", "p95 ms", "p99 ms"]
            + ["closure records mean (max)"]
        ),
    ]
    for size, r in rows:
        for v, ms in r["latency_ms"].items():
            c = r["closure_records"][v]
            lines.append(
                _row(
                    [
                        f"{int(size):,}",
                        r.get("store", "bulk load of the streamed corpus"),
                        f"{r['load_average'][0]:.1f}",
                        f"{r['seeds_from']:,}",
                        r["queries"],
                        v,
                    ]
                    + [f"{ms[p]:.2f}" for p in ("p50", "p95", "p99")]
                    + [f"{c['mean']:,.0f} ({c['max']:,})"]
                )
            )
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--phases", nargs="+", choices=["load", "replica", "index", "stage2"], default=["load", "index", "stage2"]
    )
    parser.add_argument("--replica-of", type=int, default=100_000, help="phase replica: the loaded store it copies")
    parser.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--vectors-upto", type=int, default=1_000_000, help="larger corpora: the authority log alone")
    parser.add_argument("--maintenance-work-mem", default="4GB")
    parser.add_argument("--indexes", nargs="+", choices=["ivfflat", "hnsw"], default=["ivfflat", "hnsw"])
    parser.add_argument("--work", type=Path, default=ROOT / ".perf-stores" / "scale")
    parser.add_argument("--stop", action="store_true", help="stop the PostgreSQL under --work at the end")
    args = parser.parse_args()
    url = server(args.work)
    embedder = Embedder(DEFAULT_MODEL)
    RESULTS.mkdir(parents=True, exist_ok=True)
    sizing, stage2 = RESULTS / "postgres-sizing.json", RESULTS / "stage2-sql-scale.json"
    with PostgresRecordLog(url).connect() as conn:
        pg = settings(conn)
    for size in args.sizes:
        if "load" in args.phases:
            print(f"{size}: load", flush=True)
            merge(
                sizing,
                "load",
                size,
                phase_load(url, size, args.work, args.vectors_upto, embedder),
                {**run_header(), "postgres": pg},
            )
        if "replica" in args.phases:
            print(f"{size}: replica of {args.replica_of}", flush=True)
            value = phase_replica(url, size, args.replica_of)
            merge(sizing, "replica", size, value, {**run_header(), "postgres": pg})
        if "index" in args.phases and size <= args.vectors_upto:
            hnsw = json.loads(sizing.read_text())["load"][str(size)]["hnsw_definition"]
            for name in args.indexes:  # the store's HNSW index last: it stays, as ingest leaves it
                print(f"{size}: index {name}", flush=True)
                statement = hnsw if name == "hnsw" else ivfflat(size)
                value = phase_index(url, size, args.work, embedder, statement, args.maintenance_work_mem)
                merge(sizing, f"index {name}", size, value, {**run_header(), "postgres": pg})
        if "stage2" in args.phases:
            print(f"{size}: stage2", flush=True)
            replicas = json.loads(sizing.read_text()).get("replica", {}) if sizing.is_file() else {}
            replica = replicas.get(str(size))
            source = replica["source"] if replica else min(size, args.vectors_upto)
            value = phase_stage2(url, size, seeds(source, args.work, embedder), source)
            value["store"] = replica["built_as"] if replica else "bulk load of the streamed corpus"
            merge(stage2, "stage2", size, value, {**run_header(), "postgres": pg})
    for path, write in ((sizing, write_sizing_md), (stage2, write_stage2_md)):
        if path.is_file():
            write(json.loads(path.read_text()), path.with_suffix(".md"))
    if args.stop:
        pg_server.stop(args.work / "pg")


if __name__ == "__main__":
    main()
