"""Stage 2 as indexed SQL, measured beside the in-memory graph that main chose (issue 19).

Issue 19 asked to measure both ways for several workers to share one truth, and then choose:
Stage-2 lookups as indexed queries against PostgreSQL, or the authority graph kept in memory by
every worker and followed through a change feed. Main implements the second (``car_rag.postgres.log``,
``car_rag.postgres.feed``); this script builds the first through the project's own adapter contract
(:class:`SqlAuthorityStore`, an :class:`~car_rag.lookup.AuthorityStore` whose ``fetch`` answers
one round of a closure's ``ScopeQuery`` values with one indexed SQL statement over pg_log's
tables) and measures, on the same stores and the same Stage-1 anchors:

* Stage 2+3 per query: the in-memory path (``ControllingAuthorityRetriever.resolve``) against
  ``AuthorityClosure`` rounds over SQL, the same without the closure's scope-bucket query
  (:class:`NamingClosure`), and, outside the contract, one recursive query over pg_log's stored
  edges; with the SQL round trips per query, the client's and the PostgreSQL backend's CPU, and
  whether each gives the in-memory result (records, statuses, ranking);
* what the in-memory choice costs instead: a worker's start (open at 100k records: records and
  edges read from PostgreSQL, graph and BM25 built) in time and memory, and the change-feed
  delay (commit in this process, applied in a second process) for single inserts and batches.

Corpora: the packaged demo corpus, ghsa-freeform (``../shared/data/car-benchmarks/corpora``) and
100k records of :mod:`car_rag_evals.perf.corpus` (seed 7, gist vectors). Run from the repository root::

    python evals/serve/stage2_sql.py                      # everything, ~20 min on 2 cores
    python evals/serve/stage2_sql.py --corpora demo --phases stage23 --out /tmp/s2   # a quick look
    python evals/serve/stage2_sql.py --reuse              # keep the stores built under --work

It starts PostgreSQL (``car_rag.postgres.server``) and ``chroma run`` on free loopback ports with their
data under ``--work`` (default ``.perf-stores/stage2``) and stops both at the end. Results:
``evals/results/serve/stage2.json`` and ``stage2.md``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CARStore, ControllingAuthorityRetriever, load_policy  # noqa: E402
from car_rag.channels import make_lexical_index  # noqa: E402
from car_rag.channels.fusion import FusedHit  # noqa: E402
from car_rag.graph import AuthorityGraph, Edge  # noqa: E402
from car_rag.latent_scope import QuestionScope  # noqa: E402
from car_rag.layout import RecordLayout  # noqa: E402
from car_rag.lookup import AuthorityClosure, AuthorityStore, ScopeQuery, StoredItem, resolve_closure  # noqa: E402
from car_rag.postgres import PostgresRecordLog  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.record_log import parse_stored  # noqa: E402
from car_rag.records import Record  # noqa: E402
from car_rag.resolution import Anchor, RetrievalResult, resolve_authority  # noqa: E402
from car_rag_evals.perf.corpus import arrivals, generate, gist_vectors  # noqa: E402
from car_rag_evals.perf.stats import percentiles, proc_status_mb  # noqa: E402
from car_rag_evals.results_header import load_text, results_header  # noqa: E402
from car_rag_evals.servers import ChromaServer, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = Path(car_rag.__file__).parent / "data" / "demo"
PERF_SIZE, PERF_SEED = 100_000, 7
SINGLES, BATCHES, BATCH = 200, 20, 100
"""Change-feed phase: single inserts, then batches of ``BATCH`` records."""
TICK = os.sysconf("SC_CLK_TCK")
IN_MEMORY, CONTRACT, LEAN, EDGES, WHOLE = (
    "in memory",
    "SQL, adapter contract",
    "SQL, contract without bucket query",
    "SQL, one recursive query",
    "whole retriever (in memory)",
)


# --------------------------------------------------------------------------- the SQL adapter


class SqlAuthorityStore(AuthorityStore):
    """Stage 2 without the graph in memory: each round of a closure's queries is one SQL statement
    over the shared store's tables, so a process holds no records and pays a round trip per round
    instead. Queries of one shape (the same scope keys and types) go in one ``unnest`` join on
    ``scope_index``, and every "records naming this id" of the round in one probe of a GIN index,
    so a statement has a handful of shapes and PostgreSQL plans each once (psycopg prepares a
    statement from its fifth use). Counts its round trips and the time in them and in decoding rows."""

    SETUP = (
        # The ids a record's supersedes names (plain ids and uncertain edges' {"id": ...}): pg_log keeps
        # the list inside the body only, so an index on this is what finds explicit edges across scopes.
        "CREATE OR REPLACE FUNCTION {ids}(body text) RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ "
        "SELECT coalesce(array_agg(coalesce(e ->> 'id', e #>> ARRAY[]::text[])), ARRAY[]::text[]) "
        "FROM jsonb_array_elements(coalesce(body::jsonb -> 'supersedes', '[]'::jsonb)) AS e $$",
        "CREATE INDEX IF NOT EXISTS records_supersedes ON {records} USING gin ({ids}(body))",
        "ANALYZE {records}",
        "ANALYZE {scope_index}",
        "ANALYZE {edges}",
    )

    def __init__(self, log: PostgresRecordLog, layout: RecordLayout | None = None):
        self.log, self.layout = log, layout or RecordLayout()
        self.conn = log.connect()
        self.round_trips, self.sql_s, self.decode_s = 0, 0.0, 0.0
        self._composed: dict[str, Any] = {}

    def _sql(self, text: str) -> Any:
        if text not in self._composed:
            sql = self.log.psycopg.sql
            names = {
                "records": self.log._table("records"),
                "scope_index": self.log._table("scope_index"),
                "edges": self.log._table("edges"),
                "ids": sql.Identifier(self.log.schema, "car_supersedes_ids"),
            }
            self._composed[text] = sql.SQL(text).format(**{k: v for k, v in names.items() if "{" + k + "}" in text})
        return self._composed[text]

    def setup(self) -> None:
        """The index this adapter needs beyond pg_log's (made once, kept with the schema)."""
        for statement in self.SETUP:
            self.conn.execute(self._sql(statement))

    def backend_cpu_s(self) -> float:
        """CPU seconds the PostgreSQL backend serving this connection has used (same machine)."""
        pid = self.conn.info.backend_pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    def _shape(self, keys: tuple[str, ...], types: tuple[str, ...] | None, rows: list[tuple[str, ...]]) -> tuple[str, list[Any]]:
        """One ``SELECT doc_id`` for every query with these scope keys and types: the values come in
        as arrays, one per key, each key's match is a lookup in the (key, value, doc_id) btree."""
        if not keys:  # a global rule of some types: a scan, as no index holds doc_type
            return "SELECT doc_id FROM {records} WHERE body::jsonb ->> 'doc_type' = ANY(%s)", [list(types or ())]
        columns = ", ".join(f"v{i}" for i in range(len(keys)))
        text = [
            f"SELECT s0.doc_id FROM unnest({', '.join(['%s::text[]'] * len(keys))}) AS q({columns})",
            "JOIN {scope_index} s0 ON s0.key = %s AND s0.value = q.v0",
        ]
        text += [
            f"JOIN {{scope_index}} s{i} ON s{i}.key = %s AND s{i}.value = q.v{i} AND s{i}.doc_id = s0.doc_id"
            for i in range(1, len(keys))
        ]
        params: list[Any] = [list(column) for column in zip(*rows)] + list(keys)
        if types is not None:
            text.append("JOIN {records} t ON t.doc_id = s0.doc_id AND t.body::jsonb ->> 'doc_type' = ANY(%s)")
            params.append(list(types))
        return " ".join(text), params

    def fetch(self, queries: Sequence[ScopeQuery]) -> list[StoredItem]:
        """A round in one statement (one round trip): the union of its shapes' doc ids, then their bodies."""
        shapes: dict[tuple[tuple[str, ...], tuple[str, ...] | None], list[tuple[str, ...]]] = {}
        naming = []
        for q in queries:
            if q.naming is not None:
                naming.append(q.naming)
            else:
                shapes.setdefault((tuple(k for k, _ in q.scope), q.doc_types), []).append(tuple(v for _, v in q.scope))
        parts = [self._shape(keys, types, rows) for (keys, types), rows in sorted(shapes.items(), key=str)]
        if naming:
            parts.append(("SELECT doc_id FROM {records} WHERE {ids}(body) && %s::text[]", [naming]))
        union = " UNION ALL ".join(text for text, _ in parts)
        return self._items(
            f"SELECT doc_id, body FROM {{records}} WHERE doc_id IN ({union})", [p for _, params in parts for p in params]
        )

    def by_id(self, doc_ids: Sequence[str]) -> list[StoredItem]:
        """The anchors' records (a framework's Stage 1 hands them over with its hits; car-rag's reads them)."""
        return self._items("SELECT doc_id, body FROM {records} WHERE doc_id = ANY(%s)", [list(doc_ids)])

    def closure_by_edges(self, doc_ids: Sequence[str], named: dict[str, list[str]]) -> tuple[list[Record], list[Edge]]:
        """Outside the contract, the fewest round trips SQL allows: the records and everything that
        voids them, transitively, followed through pg_log's stored edges by one recursive query, and
        the edges among them, sent together (one round trip, psycopg's pipeline mode). The seeds are
        ``doc_ids`` and the records in the scopes ``named`` (every combination, as resolve_authority)."""
        keys = list(named)
        scopes = [tuple(v) for v in itertools.product(*(named[k] for k in keys))] if keys else []
        seeds, params = ["SELECT unnest(%s::text[])"], [list(doc_ids)]
        if scopes:
            text, more = self._shape(tuple(keys), None, scopes)
            seeds.append(text)
            params += more
        # Each step carries the edge it followed: the edges among the members are those (a join of the
        # members with the edges table afterwards is planned as a scan of every edge).
        members = (
            "WITH RECURSIVE up(doc_id, superseder, target, rule, confidence) AS ("
            "SELECT doc_id, NULL::text, NULL::text, NULL::text, NULL::float8 FROM ("
            + " UNION ".join(seeds)
            + ") AS seeds(doc_id) UNION SELECT e.superseder, e.superseder, e.target, e.rule, e.confidence "
            "FROM {edges} e JOIN up ON e.target = up.doc_id) "
        )
        tick = time.perf_counter()
        with self.conn.pipeline():
            bodies = self.conn.execute(
                self._sql(members + "SELECT body FROM {records} WHERE doc_id IN (SELECT doc_id FROM up)"), params
            )
            edges = self.conn.execute(
                self._sql(members + "SELECT DISTINCT superseder, target, rule, confidence FROM up WHERE rule IS NOT NULL"), params
            )
        rows, linked = bodies.fetchall(), [Edge(*row) for row in edges.fetchall()]
        tock = time.perf_counter()
        self.round_trips += 1
        records = [parse_stored(body, self.log.location) for (body,) in rows]
        self.sql_s += tock - tick
        self.decode_s += time.perf_counter() - tock
        return records, linked

    def _items(self, statement: str, params: Sequence[Any]) -> list[StoredItem]:
        tick = time.perf_counter()
        rows = self.conn.execute(self._sql(statement), params).fetchall()
        tock = time.perf_counter()
        self.round_trips += 1
        records = [parse_stored(body, self.log.location) for _, body in rows]
        items = [StoredItem(self.layout.metadata(r), r.text, r.doc_id, source=r.doc_id) for r in records]
        self.sql_s += tock - tick
        self.decode_s += time.perf_counter() - tock
        return items


class NamingClosure(AuthorityClosure):
    """The closure without its scope-bucket query, which exists only to find within-scope explicit
    edges in stores that cannot answer "records naming this id"; a store that can (this one, Chroma,
    LangChain's stores) finds them by ``naming``. A record whose scope lacks a key (a maintenance
    release has a package, no CVE) otherwise pulls in its whole package. What a capability flag on
    :class:`AuthorityStore` would let the closure skip (measured here, not in the library)."""

    def _voider_queries(self, record: Record) -> list[ScopeQuery]:
        queries = super()._voider_queries(record)  # [naming] + the bucket's spellings + each rule's
        bucket = {k: record.scope[k] for k in self.policy.scope_keys if k in record.scope}
        return queries[:1] + queries[1 + (len(self._spelled(bucket)) if bucket else 0) :]


def resolve_sql(
    store: SqlAuthorityStore,
    retriever: ControllingAuthorityRetriever,
    query: str,
    hits: Sequence[FusedHit],
    closure_type: type[AuthorityClosure] = AuthorityClosure,
) -> tuple[RetrievalResult, AuthorityClosure]:
    """Stages 2+3 for Stage-1 hits through the adapter contract, as an integration runs them."""
    closure = closure_type(
        retriever.store.policy, query, scope_lookup_limit=retriever.scope_lookup_limit, min_confidence=retriever.min_confidence
    )
    found = {item.store_id: item for item in store.by_id([h.doc_id for h in hits])}
    for hit in hits:
        if hit.doc_id in found:
            closure.add_anchor(closure.read(found[hit.doc_id]), Anchor(hit.doc_id, hit.rank, hit.score, "fused"), hit.doc_id)
    return resolve_closure(closure, store), closure


def resolve_sql_edges(
    store: SqlAuthorityStore,
    retriever: ControllingAuthorityRetriever,
    query: str,
    stage1: tuple[Sequence[FusedHit], dict[str, list[str]], Any],
) -> RetrievalResult:
    """Stages 2+3 from one recursive query over the stored edges: the rules are not re-applied per
    query, the graph is the store's own, restricted to the closure (no disputed pairs in these corpora)."""
    hits, named, posterior = stage1
    records, edges = store.closure_by_edges([h.doc_id for h in hits], named)
    graph = AuthorityGraph(retriever.store.policy)
    graph.load_edges(records, edges)
    return resolve_authority(
        graph,
        retriever.store.policy,
        query,
        hits,
        scope_ids=named,
        posterior=posterior,
        scope_lookup_limit=retriever.scope_lookup_limit,
        min_confidence=retriever.min_confidence,
    )


def signature(result: RetrievalResult) -> list[tuple[Any, ...]]:
    """What must agree: the records in rank order, each with status, role, chain and controllers."""
    return [(r.doc_id, r.status, r.role, r.anchor_id, tuple(r.superseded_by)) for r in result]


# --------------------------------------------------------------------------- servers and stores


@contextmanager
def servers(work: Path):
    """PostgreSQL (car_rag.postgres.server) and ``chroma run`` with their data under ``work``, stopped at the end:
    yields the PostgreSQL URL and the running ``ChromaServer`` (``.url``, ``.proc``)."""
    from car_rag.postgres import server as pg_server

    url = pg_server.start(work / "pg", port=free_port())
    pinned = work / "chroma-port"  # a store remembers its Chroma URL: the stores under work keep this port
    chroma = ChromaServer(work / "chroma", port=int(pinned.read_text()) if pinned.is_file() else None)
    pinned.write_text(str(chroma.port))
    try:
        with chroma:
            yield url, chroma
    finally:
        pg_server.stop(work / "pg")


def _corpus(name: str) -> tuple[Any, Any, list[tuple[str, str]], bool]:
    """(policy, JSONL path or perf corpus, [(query_id, query)], whether vectors are precomputed) of a corpus."""
    if name == "demo":
        return load_policy(DEMO / "policy.toml"), DEMO / "corpus.jsonl", _questions(DEMO / "queries.jsonl"), False
    if name == "ghsa-freeform":
        from car_rag_evals.suites import load_suite

        suite = load_suite(name)
        return suite.policy, suite.corpus, _questions(suite.queries), False
    corpus = generate(PERF_SIZE, seed=PERF_SEED)
    return load_policy("security-advisory"), corpus, [(q.query_id, q.query) for q in corpus.queries], True


def _questions(path: Path) -> list[tuple[str, str]]:
    return [(q.query_id, q.query) for q in load_queries(path)]


def _schema(name: str) -> str:
    return name.replace("-", "_")


def _drop(log: PostgresRecordLog, chroma_url: str) -> None:
    """Remove a store that is not whole (or was streamed into): its schema and its Chroma collection."""
    config = log.setup(None)
    with log.connect() as conn:
        conn.execute(log.psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(log.psycopg.sql.Identifier(log.schema)))
    if config is not None:
        import chromadb
        from chromadb.config import Settings

        parsed = urlparse(chroma_url)
        assert parsed.hostname is not None and parsed.port is not None, chroma_url
        client = chromadb.HttpClient(host=parsed.hostname, port=parsed.port, settings=Settings(anonymized_telemetry=False))
        if config["collection"] in {c.name for c in client.list_collections()}:
            client.delete_collection(config["collection"])


def open_store(name: str, work: Path, url: str, chroma_url: str, reuse: bool) -> tuple[CARStore, list[tuple[str, str]], dict]:
    """The corpus's shared store, built afresh unless ``reuse`` finds exactly the corpus in it, then
    opened as a worker opens it (records and edges from PostgreSQL)."""
    policy, source, questions, precomputed = _corpus(name)
    expected = len(source) if precomputed else sum(1 for line in Path(source).open() if line.strip())
    log = PostgresRecordLog(url, _schema(name))
    with log.connect() as conn:
        config = log.setup(None)
        held = conn.execute(log._sql("SELECT count(*) FROM {records}")).fetchone()[0]
    whole = config is not None and config["chroma_url"] == chroma_url and held == expected
    built: dict[str, Any] = {"records": expected, "reused": reuse and whole}
    if not built["reused"]:
        _drop(log, chroma_url)
        built["load_at_start"] = os.getloadavg()
        tick = time.perf_counter()
        with CARStore.open(
            work / name, policy, authority_url=url, authority_schema=_schema(name), chroma_url=chroma_url, follow=False
        ) as store:
            if not precomputed:
                assert not store.ingest(source, progress=False).errors
            else:
                cache = work / f"gist-{PERF_SIZE}-{PERF_SEED}.npy"
                if not cache.is_file():
                    np.save(cache, gist_vectors(source, store.embedder, seed=PERF_SEED))
                vectors = np.load(cache)
                for start in range(0, len(source), 10_000):
                    chunk = source.records[start : start + 10_000]
                    given = {r["doc_id"]: vectors[start + i] for i, r in enumerate(chunk)}
                    assert not store.ingest(chunk, progress=False, embeddings=given).errors
        built["build_s"] = time.perf_counter() - tick
    log.close()
    store = CARStore.open(work / name, authority_url=url, authority_schema=_schema(name), chroma_url=chroma_url, follow=False)
    assert len(store) == expected, (len(store), expected)
    built["edges"] = len(store.graph.edges())
    return store, questions, built


# --------------------------------------------------------------------------- Stage 2+3, both ways


def measure_stage23(store: CARStore, questions: list[tuple[str, str]], samples: int) -> dict:
    """Every path from the same Stage-1 anchors (computed once, untimed), interleaved query by query
    with the first rotating; the whole retriever beside them for scale."""
    retriever = ControllingAuthorityRetriever(store)  # the defaults: hybrid anchors, k1 10, depth 50, latent scope
    sql = SqlAuthorityStore(store.log)  # type: ignore[arg-type]
    sql.setup()
    stage1 = {}
    for _, q in questions:  # anchors, the scope ids the query names and the posterior, as retrieve() makes them
        first = retriever.resolve_runs(q, retriever.channel_runs(q))
        stage1[q] = (first.anchors, first.scope_ids, first.scope_posterior)

    def memory(q: str) -> RetrievalResult:  # the scope as retrieve() read it (with its default latent scope, always)
        hits, named, posterior = stage1[q]
        return retriever.resolve(q, hits, scope=None if posterior is None else QuestionScope(named, posterior))

    def through_sql(closure: type[AuthorityClosure], q: str) -> RetrievalResult:
        return resolve_sql(sql, retriever, q, stage1[q][0], closure)[0]

    closures: dict[str, type[AuthorityClosure]] = {CONTRACT: AuthorityClosure, LEAN: NamingClosure}
    systems: dict[str, Callable[[str], RetrievalResult]] = {IN_MEMORY: memory}
    systems.update({n: functools.partial(through_sql, c) for n, c in closures.items()})
    systems.update({EDGES: lambda q: resolve_sql_edges(sql, retriever, q, stage1[q]), WHOLE: retriever.retrieve})

    shape: dict[str, dict[str, list[int]]] = {n: {"rounds": [], "lookups": [], "closure_records": []} for n in closures}
    differences: dict[str, list[dict]] = {n: [] for n in (CONTRACT, LEAN, EDGES)}
    for qid, q in questions:  # agreement, and the shape of each closure over SQL (deterministic)
        want = signature(memory(q))
        got = {EDGES: resolve_sql_edges(sql, retriever, q, stage1[q])}
        for name, closure_type in closures.items():
            got[name], closure = resolve_sql(sql, retriever, q, stage1[q][0], closure_type)
            for key, value in (("rounds", closure.rounds), ("lookups", closure.lookups), ("closure_records", len(closure.graph))):
                shape[name][key].append(value)
        for name, result in got.items():
            if signature(result) != want:
                differences[name].append({"query_id": qid, "in_memory": want, "sql": signature(result)})

    passes = max(1, math.ceil(samples / len(questions)))
    load = os.getloadavg()
    names = list(systems)
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu = dict.fromkeys(names, 0.0)
    over_sql: dict[str, dict[str, Any]] = {
        n: {"round_trips": [], "sql_ms": [], "decode_ms": [], "backend_cpu_s": 0.0} for n in differences
    }
    for i in range(passes * len(questions)):
        q = questions[i % len(questions)][1]
        for name in names[i % len(names) :] + names[: i % len(names)]:
            before = (sql.round_trips, sql.sql_s, sql.decode_s, sql.backend_cpu_s()) if name in over_sql else None
            cpu[name] -= time.process_time()
            tick = time.perf_counter()
            systems[name](q)
            times[name].append((time.perf_counter() - tick) * 1000)
            cpu[name] += time.process_time()
            if before is not None:
                spent = over_sql[name]
                spent["round_trips"].append(sql.round_trips - before[0])
                spent["sql_ms"].append((sql.sql_s - before[1]) * 1000)
                spent["decode_ms"].append((sql.decode_s - before[2]) * 1000)
                spent["backend_cpu_s"] += sql.backend_cpu_s() - before[3]
    timed = passes * len(questions)
    summary = lambda v: {"mean": float(np.mean(v)), "max": int(max(v)), "counts": dict(sorted(Counter(v).items()))}  # noqa: E731
    return {
        "queries": len(questions),
        "passes": passes,
        "load_at_start": load,
        "latency_ms": {n: percentiles(v) for n, v in times.items()},
        "cpu_ms_per_query": {n: cpu[n] * 1000 / timed for n in names},
        "over_sql": {
            n: {
                "round_trips": percentiles(v["round_trips"]),
                "sql_ms": percentiles(v["sql_ms"]),
                "decode_ms": percentiles(v["decode_ms"]),
                "backend_cpu_ms_per_query": v["backend_cpu_s"] * 1000 / timed,
            }
            for n, v in over_sql.items()
        },
        "closure_shape": {n: {k: summary(v) for k, v in kinds.items()} for n, kinds in shape.items()},
        "agreement": {
            n: {"same": len(questions) - len(d), "different": len(d), "differences": d[:5]} for n, d in differences.items()
        },
    }


# --------------------------------------------------------------------------- what the in-memory choice costs


def _open_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"authority_url": args.url, "authority_schema": args.schema, "chroma_url": args.chroma_url}


def child_open(args: argparse.Namespace) -> dict:
    """A worker's start, in a fresh process: the store opened from PostgreSQL, then the model;
    then the parts of the open re-done one by one in the same (now warm) process."""
    rss = {"process_start": proc_status_mb("VmRSS")}
    tick = time.perf_counter()
    store = CARStore.open(args.folder, follow=False, **_open_args(args))
    seconds = {"open": time.perf_counter() - tick}
    rss["after_open"] = proc_status_mb("VmRSS")
    tick = time.perf_counter()
    ControllingAuthorityRetriever(store)  # loads MiniLM
    seconds["model"] = time.perf_counter() - tick
    rss["after_model"] = proc_status_mb("VmRSS")
    parts = _parts(store.log, store.policy, store.config["bm25_backend"])  # type: ignore[arg-type]
    store.close()
    return {
        "records": parts.pop("records"),
        "seconds": seconds,
        "parts_s": parts,
        "rss_mb": rss,
        "peak_rss_mb": proc_status_mb("VmHWM"),
    }


def _rows(log: PostgresRecordLog) -> tuple[list[tuple[str, str]], list[Edge]]:
    """What an open reads: every record's body in ingest order, and the edges."""
    with log.connect() as conn:
        rows = conn.execute(log._sql("SELECT doc_id, body FROM {records} ORDER BY seq")).fetchall()
        edges = [Edge(*e) for e in conn.execute(log._sql("SELECT superseder, target, rule, confidence FROM {edges}"))]
    return rows, edges


def _parts(log: PostgresRecordLog, policy: Any, backend: str, trace: bool = False) -> dict[str, Any]:
    """Seconds (or, with ``trace``, bytes held) of each part of an open: reading the rows, parsing
    the records, the graph (entity index and edges), BM25."""
    out: dict[str, Any] = {}
    tick = time.perf_counter()
    rows, edges = _rows(log)
    out["read_rows"] = time.perf_counter() - tick
    if trace:
        tracemalloc.start()
    tick = time.perf_counter()
    records = [parse_stored(body, log.location) for _, body in rows]
    out["parse_records"] = tracemalloc.get_traced_memory()[0] if trace else time.perf_counter() - tick
    tick = time.perf_counter()
    graph = AuthorityGraph(policy)
    graph.load_edges(records, edges)
    out["graph"] = tracemalloc.get_traced_memory()[0] - out["parse_records"] if trace else time.perf_counter() - tick
    tick = time.perf_counter()
    index = make_lexical_index(backend)
    index.build([r.doc_id for r in records], [r.text for r in records])
    before = out["parse_records"] + out["graph"]
    out["bm25"] = tracemalloc.get_traced_memory()[0] - before if trace else time.perf_counter() - tick
    if trace:
        tracemalloc.stop()
        del out["read_rows"]
    out["records"] = len(records)
    return out


def child_trace(args: argparse.Namespace) -> dict:
    """Bytes each part of an open holds (tracemalloc, in a process of its own: it slows everything)."""
    log = PostgresRecordLog(args.url, args.schema)
    config = log.setup(None)
    assert config is not None, f"no store in {args.schema}"
    from car_rag.policy import Policy

    held = _parts(log, Policy.model_validate(config["policy"]), config["bm25_backend"], trace=True)
    return {"records": held.pop("records"), "bytes": held}


def child_follow(args: argparse.Namespace) -> None:
    """The second process: opens the store, follows its change feed, and at each ``N`` on stdin waits
    until change N is applied and prints when each change was applied (and the feed's own delays)."""
    store = CARStore.open(args.folder, follow=False, **_open_args(args))
    applied: list[tuple[int, float, int]] = []
    drains: list[tuple[float, float, int]] = []  # (start, end, vectors handed over): the feed thread drains the outbox too
    drain = store.drain_outbox

    def timed_drain(*a: Any, **k: Any) -> int:
        start = time.time()
        handed = drain(*a, **k)
        if handed:
            drains.append((start, time.time(), handed))
        return handed

    store.drain_outbox = timed_drain  # type: ignore[method-assign]
    store.follow(poll_s=1.0)
    assert store.feed is not None
    store.feed.listeners.append(lambda changes: applied.extend((c.number, time.time(), len(changes)) for c in changes))
    while not store.feed.connected:
        time.sleep(0.01)
    print(json.dumps({"head": store.head, "rss_mb": proc_status_mb("VmRSS")}), flush=True)
    for line in sys.stdin:
        target, deadline = int(line), time.monotonic() + 120
        while (not applied or applied[-1][0] < target) and time.monotonic() < deadline:
            time.sleep(0.002)
        print(json.dumps({"applied": applied, "feed_delays_s": list(store.feed.delays), "drains": drains}), flush=True)
        applied.clear()
        drains.clear()
        store.feed.delays.clear()
    store.close()


def _child(role: str, args: argparse.Namespace, name: str, **popen: Any) -> Any:
    command = [
        sys.executable,
        __file__,
        "--child",
        role,
        "--folder",
        str(args.work / f"{name}-{role}"),
        "--url",
        args.url,
        "--schema",
        _schema(name),
        "--chroma-url",
        args.chroma_url,
    ]
    if popen:
        return subprocess.Popen(command, text=True, **popen)
    done = subprocess.run(command, check=True, text=True, stdout=subprocess.PIPE)
    return json.loads(done.stdout.splitlines()[-1])


def measure_start(args: argparse.Namespace, name: str, runs: int) -> dict:
    """``runs`` worker starts, each in a fresh process, then one traced for memory."""
    starts = []
    for _ in range(runs):
        load = os.getloadavg()
        starts.append({**_child("open", args, name), "load_at_start": load})
    load = os.getloadavg()
    return {"runs": starts, "held": {**_child("trace", args, name), "load_at_start": load}}


@contextmanager
def _stamped(transaction: Any, commits: list[float]):
    """pg_log's write transaction, noting when each commit returned: the writer's side of the delay."""
    with transaction() as tx:
        commit = tx.commit

        def stamped() -> None:
            commit()
            commits.append(time.time())

        tx.commit = stamped
        yield tx


def measure_feed(args: argparse.Namespace, name: str, store: CARStore) -> dict:
    """Commits here, applied in a second process: single inserts, then batches (vectors computed before, untimed)."""
    follower = _child("follow", args, name, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ready = json.loads(follower.stdout.readline())
    commits: list[float] = []
    transaction = store.log.transaction
    store.log.transaction = lambda: _stamped(transaction, commits)  # type: ignore[method-assign]
    out: dict[str, Any] = {"follower_rss_mb": ready["rss_mb"]}
    for label, count, size, pause in (("single", SINGLES, 1, 0.05), (f"batch of {BATCH}", BATCHES * BATCH, BATCH, 0.2)):
        arriving = [r for r, _ in arrivals(store, count, seed=store.head)]  # ids new to the store, run after run
        vectors = dict(zip([r["doc_id"] for r in arriving], store.embedder.encode([r["text"] for r in arriving])))
        load, heads, ingest_ms = os.getloadavg(), [], []
        commits.clear()
        for start in range(0, count, size):
            batch = arriving[start : start + size]
            tick = time.perf_counter()
            store.ingest(batch, progress=False, embeddings={r["doc_id"]: vectors[r["doc_id"]] for r in batch})
            ingest_ms.append((time.perf_counter() - tick) * 1000)
            heads.append(store.head)
            time.sleep(pause)
        assert len(commits) == len(heads), (len(commits), len(heads))
        follower.stdin.write(f"{store.head}\n")
        follower.stdin.flush()
        seen = json.loads(follower.stdout.readline())
        committed = dict(zip(heads, commits))
        ends = sorted(committed)
        per_change = [(t - committed[ends[np.searchsorted(ends, n)]]) * 1000 for n, t, _ in seen["applied"]]
        last = {}
        for n, t, _ in seen["applied"]:
            last[ends[np.searchsorted(ends, n)]] = t
        per_commit = [(t - committed[head]) * 1000 for head, t in last.items()]
        # A commit whose application came after one of the follower's outbox drains began: the feed
        # thread hands vectors to Chroma between applying changes, so it applied this one late.
        behind = [
            (t - committed[head]) * 1000
            for head, t in last.items()
            if any(committed[head] < end and start < t for start, end, _ in seen["drains"])
        ]
        out[label] = {
            "records": count,
            "commits": len(heads),
            "pause_s": pause,
            "load_at_start": load,
            "commit_to_applied_ms": percentiles(per_commit),
            "per_record_ms": percentiles(per_change),
            "feed_metric_ms": percentiles([d * 1000 for d in seen["feed_delays_s"]]),
            "changes_per_step": percentiles([n for *_, n in seen["applied"]]),
            "writer_ingest_ms": percentiles(ingest_ms),
            "follower_drains": {
                "count": len(seen["drains"]),
                "vectors": sum(n for *_, n in seen["drains"]),
                "ms": percentiles([(end - start) * 1000 for start, end, _ in seen["drains"]] or [0.0]),
                "commits_waiting_on_a_drain": len(behind),
                "their_commit_to_applied_ms": percentiles(behind or [0.0]),
            },
        }
    store.log.transaction = transaction  # type: ignore[method-assign]
    follower.stdin.close()
    follower.wait(60)
    return out


# --------------------------------------------------------------------------- report


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _pct(p: dict[str, float], digits: int = 2) -> str:
    return " / ".join(f"{p[k]:.{digits}f}" for k in ("p50", "p95", "p99"))


def write_md(results: dict, out: Path) -> None:
    lines = [
        "# Stage 2 as indexed SQL, or the graph in memory with a change feed (issue 19)",
        "",
        f"`{results['command']}`; {results['when']}; commit {results['commit']}; {results['machine']['cpus']} shared CPUs, "
        f"OMP_NUM_THREADS={results['machine']['omp_num_threads']}; PostgreSQL and `chroma run` on loopback on the same "
        "machine. Load averages (1, 5, 15 min) are those at the start of each measurement.",
        "",
    ]
    stage = results.get("stage23", {})
    if stage:
        lines += [
            "## Stage 2+3 per query, from the same anchors",
            "",
            f"*{IN_MEMORY}*: `ControllingAuthorityRetriever.resolve` over the store's graph (what `retrieve` runs after "
            f"Stage 1). *{CONTRACT}*: `AuthorityClosure` rounds over `SqlAuthorityStore` (one statement per round "
            "against pg_log's tables, plus one for the anchors' records), then the same resolution. "
            f"*{LEAN}*: the same without the closure's scope-bucket query (`NamingClosure`: the store answers "
            f'"records naming this id", which is all that query is for). *{EDGES}*: outside the contract, the closure '
            "followed through pg_log's stored edges by one recursive query (one round trip), then `resolve_authority` "
            "over the records it returned. All are given the real retriever's Stage-1 anchors (hybrid, latent scope, "
            "k1 10), scope ids and posterior; the paths alternate query by query, the first rotating.",
            "",
            _row(
                [
                    "corpus",
                    "records",
                    "timed queries",
                    "load",
                    *(f"{n} p50 / p95 / p99 ms" for n in (IN_MEMORY, CONTRACT, LEAN, EDGES, WHOLE)),
                ]
            ),
            _row(["---"] * 9),
        ]
        for name, r in stage.items():
            lines.append(
                _row(
                    [
                        name,
                        f"{r['build']['records']:,}",
                        f"{r['queries']} × {r['passes']}",
                        load_text(r["load_at_start"]),
                        *(_pct(r["latency_ms"][n]) for n in (IN_MEMORY, CONTRACT, LEAN, EDGES)),
                        _pct(r["latency_ms"][WHOLE], 1),
                    ]
                )
            )
        lines += [
            "",
            "Over SQL: round trips per query, where the time goes, whether the result is the in-memory one (the "
            "same records, statuses, roles, chains and controllers, in the same order), and CPU per query (the "
            "client's by `time.process_time`; the PostgreSQL backend's from `/proc/<backend pid>/stat`, whose 10 ms "
            "tick makes only the mean over all timed queries meaningful):",
            "",
            _row(
                [
                    "corpus",
                    "path",
                    "round trips (mean, max)",
                    "waiting on PostgreSQL p50 / p95 ms",
                    "decoding rows p50 / p95 ms",
                    "same result",
                    "client CPU ms",
                    "PostgreSQL CPU ms",
                ]
            ),
            _row(["---"] * 8),
        ]
        for name, r in stage.items():
            cpu = r["cpu_ms_per_query"]
            lines.append(_row([name, IN_MEMORY, "0", "–", "–", "–", f"{cpu[IN_MEMORY]:.2f}", "–"]))
            for path, o in r["over_sql"].items():
                agree = r["agreement"][path]
                lines.append(
                    _row(
                        [
                            name,
                            path,
                            f"{o['round_trips']['mean']:.2f}, {o['round_trips']['p99']:.0f}",
                            f"{o['sql_ms']['p50']:.2f} / {o['sql_ms']['p95']:.2f}",
                            f"{o['decode_ms']['p50']:.2f} / {o['decode_ms']['p95']:.2f}",
                            f"{agree['same']} of {agree['same'] + agree['different']}",
                            f"{cpu[path]:.2f}",
                            f"{o['backend_cpu_ms_per_query']:.2f}",
                        ]
                    )
                )
        lines += [
            "",
            "The closures over the adapter contract (means; max in brackets):",
            "",
            _row(["corpus", "path", "lookup rounds", "ScopeQuery values", "records fetched"]),
            _row(["---"] * 5),
        ]
        for name, r in stage.items():
            for path, shape in r["closure_shape"].items():
                lines.append(
                    _row(
                        [
                            name,
                            path,
                            *(f"{shape[k]['mean']:.1f} ({shape[k]['max']})" for k in ("rounds", "lookups", "closure_records")),
                        ]
                    )
                )
        for name, r in stage.items():
            for path, agree in r["agreement"].items():
                for diff in agree["differences"]:
                    lines += [
                        "",
                        f"Difference on {name} `{diff['query_id']}` ({path}):",
                        "",
                        "```",
                        "in memory: " + json.dumps(diff["in_memory"]),
                        "SQL:       " + json.dumps(diff["sql"]),
                        "```",
                    ]
    start = results.get("start")
    if start:
        runs, held = start["runs"], start["held"]
        mib = 1024 * 1024
        lines += [
            "",
            f"## What the in-memory choice costs: a worker's start at {held['records']:,} records",
            "",
            "Each run a fresh process: `CARStore.open(folder, authority_url=…, chroma_url=…)` (records and edges read "
            "from PostgreSQL, graph and BM25 built; vectors stay in Chroma past 20k records), then MiniLM loaded "
            "(`ControllingAuthorityRetriever`); then the parts of the open re-done one by one in the same, warm, process.",
            "",
            _row(
                [
                    "run",
                    "load",
                    "open s",
                    "model s",
                    "RSS after open MB",
                    "after model MB",
                    "peak MB",
                    "read rows s",
                    "parse records s",
                    "graph s",
                    "BM25 s",
                ]
            ),
            _row(["---"] * 11),
        ]
        for i, r in enumerate(runs, 1):
            s, p, m = r["seconds"], r["parts_s"], r["rss_mb"]
            lines.append(
                _row(
                    [
                        i,
                        load_text(r["load_at_start"]),
                        f"{s['open']:.1f}",
                        f"{s['model']:.1f}",
                        f"{m['after_open']:.0f}",
                        f"{m['after_model']:.0f}",
                        f"{r['peak_rss_mb']:.0f}",
                        f"{p['read_rows']:.1f}",
                        f"{p['parse_records']:.1f}",
                        f"{p['graph']:.1f}",
                        f"{p['bm25']:.1f}",
                    ]
                )
            )
        b = held["bytes"]
        lines += [
            "",
            f"Memory held by each part (tracemalloc, own process, load {load_text(held['load_at_start'])}): records "
            f"{b['parse_records'] / mib:.0f} MiB ({b['parse_records'] / held['records']:.0f} B each), graph (entity "
            f"index and edges) {b['graph'] / mib:.0f} MiB ({b['graph'] / held['records']:.0f} B each), BM25 "
            f"{b['bm25'] / mib:.0f} MiB. A worker doing Stage 2 in SQL still needs BM25 (or another lexical channel) "
            "and the model; it would not hold the records or the graph.",
        ]
    feed = results.get("feed")
    if feed:
        lines += [
            "",
            "## What the in-memory choice costs: the change-feed delay",
            "",
            f"This process commits (`store.ingest`, precomputed vectors) into the {feed['records']:,}-record store; a second "
            "process (a subprocess that opened it from PostgreSQL and follows it, `ChangeFeed`, NOTIFY, poll 1 s) applies "
            "each change. *commit → applied*: from the writer's commit returning to the follower having applied the "
            "commit's last record (both clocks this machine's). *feed metric*: what the feed records itself (from the "
            "row's `committed_at`, written inside the transaction before the commit). The follower's feed thread also "
            "hands the outbox's vectors to Chroma (`ChangeFeed._step` → `drain_outbox`), taking some of the writer's "
            "from under it; *waiting on a drain*: the commits during whose wait the follower was in such a drain.",
            "",
            _row(
                [
                    "arrivals",
                    "load",
                    "commits",
                    "commit → applied p50 / p95 / p99 ms",
                    "feed metric p50 / p95 / p99 ms",
                    "writer's ingest p50 / p95 ms",
                    "follower's drains (vectors), p50 ms",
                    "waiting on a drain: commits, p50 ms",
                ]
            ),
            _row(["---"] * 8),
        ]
        for label, r in feed.items():
            if not isinstance(r, dict) or "commits" not in r:
                continue
            c, d = r["commit_to_applied_ms"], r["follower_drains"]
            lines.append(
                _row(
                    [
                        f"{label} (pause {r['pause_s']} s)",
                        load_text(r["load_at_start"]),
                        r["commits"],
                        _pct(c, 1),
                        _pct(r["feed_metric_ms"], 1),
                        f"{r['writer_ingest_ms']['p50']:.1f} / {r['writer_ingest_ms']['p95']:.1f}",
                        f"{d['count']} ({d['vectors']}), {d['ms']['p50']:.0f}",
                        f"{d['commits_waiting_on_a_drain']}, {d['their_commit_to_applied_ms']['p50']:.0f}",
                    ]
                )
            )
    if text := conclusion(results):
        lines += ["", "## Conclusion", "", text]
    out.write_text("\n".join(lines) + "\n")


HOUR_AT_10_QPS = 36_000
"""The rule the conclusion applies: memory wins when SQL is slower per query and its extra CPU per
query repays the graph's share of a worker's start within an hour of 10 queries/s."""


def conclusion(results: dict) -> str | None:
    """The paragraph the figures support, computed from them (so a re-run cannot leave it stale)."""
    r, start, feed = results.get("stage23", {}).get("perf-100k"), results.get("start"), results.get("feed")
    if not (r and start and feed):
        return None
    p50 = {n: v["p50"] for n, v in r["latency_ms"].items()}
    cpu = {
        n: r["cpu_ms_per_query"][n] + (r["over_sql"][n]["backend_cpu_ms_per_query"] if n in r["over_sql"] else 0.0)
        for n in (IN_MEMORY, CONTRACT, EDGES)
    }
    extra = cpu[EDGES] - cpu[IN_MEMORY]  # the cheaper SQL path
    median = lambda values: float(np.median(values))  # noqa: E731
    graph_s = median([x["parts_s"]["parse_records"] + x["parts_s"]["graph"] for x in start["runs"]])
    open_s = median([x["seconds"]["open"] for x in start["runs"]])
    peak = median([x["peak_rss_mb"] for x in start["runs"]])
    held = start["held"]["bytes"]
    graph_mb = (held["parse_records"] + held["graph"]) / 1e6
    repaid = graph_s * 1000 / extra if extra > 0 else float("inf")
    single, batch = feed["single"]["commit_to_applied_ms"], feed[f"batch of {BATCH}"]["commit_to_applied_ms"]
    waited = feed["single"]["follower_drains"]
    records = r["build"]["records"]
    agree = all(a["different"] == 0 for x in results["stage23"].values() for a in x["agreement"].values())
    if not (p50[EDGES] > p50[IN_MEMORY] and repaid < HOUR_AT_10_QPS):
        return (
            f"By the rule above ({HOUR_AT_10_QPS:,} queries) the figures do not favour the graph in memory: Stage 2+3 "
            f"takes {p50[IN_MEMORY]:.2f} ms p50 in memory, {p50[EDGES]:.1f} ms as one recursive query over SQL, and "
            f"the SQL path's extra CPU repays the graph's {graph_s:.1f} s of start after {repaid:,.0f} queries."
        )
    return (
        f"The numbers favour keeping the graph in memory, as main does. At {records:,} records Stage 2+3 takes "
        f"{p50[IN_MEMORY]:.2f} ms p50 in memory against {p50[CONTRACT]:.1f} ms through the adapter contract over SQL "
        f"({r['over_sql'][CONTRACT]['round_trips']['mean']:.1f} round trips) and {p50[EDGES]:.1f} ms as one recursive "
        f"query over pg_log's edges (one round trip), "
        f"{'with the same results on every query of every corpus' if agree else 'with differences (see above)'}: "
        f"{(p50[EDGES] - p50[IN_MEMORY]) / p50[WHOLE]:.0%} to {(p50[CONTRACT] - p50[IN_MEMORY]) / p50[WHOLE]:.0%} of the "
        f"whole query's {p50[WHOLE]:.1f} ms added to every query, and at least {extra:.1f} ms more CPU per query (client "
        f"and PostgreSQL together; {cpu[CONTRACT] - cpu[IN_MEMORY]:.1f} ms through the contract), so a worker answering "
        f"q queries/s gives q × {extra:.1f} ms of every second to Stage 2, part of it on the one PostgreSQL every worker "
        f"shares. What memory costs instead: {graph_s:.1f} s of a worker's {open_s:.1f} s start (parsing the records "
        f"and building the graph; reading the rows, BM25 and the model are needed either way), {graph_mb:.0f} MB held "
        f"per worker per {records:,} records (a peak of {peak:.0f} MB while opening), and a change reaches another "
        f"worker {single['p50']:.0f} ms after its commit at p50 ({single['p99']:.0f} ms p99, the tail being the "
        f"follower's feed thread busy handing vectors to Chroma: {waited['commits_waiting_on_a_drain']} of "
        f"{feed['single']['commits']} commits waited "
        f"on such a drain) one insert at a time, {batch['p50']:.0f} ms ({batch['p99']:.0f} ms p99) in batches of {BATCH}. "
        f"The cheaper SQL path's extra CPU repays the graph's share of a start after {repaid:,.0f} queries "
        f"({repaid / 600:.0f} min of a worker at 10 queries/s): past that, every query a worker answers makes memory the "
        f"cheaper design. SQL would pay for a process that cannot hold {graph_mb:.0f} MB per {records:,} records, or "
        "answers fewer queries than that between starts (a short job); for it the recursive query over the stored "
        "edges, not the contract's rounds, is the form to offer."
    )


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpora", nargs="+", default=["demo", "ghsa-freeform", "perf-100k"], choices=["demo", "ghsa-freeform", "perf-100k"]
    )
    parser.add_argument(
        "--phases",
        nargs="+",
        default=["stage23", "start", "feed"],
        choices=["stage23", "start", "feed"],
        help="start and feed run on perf-100k",
    )
    parser.add_argument("--samples", type=int, default=600, help="timed queries per corpus and path (whole passes)")
    parser.add_argument("--starts", type=int, default=3, help="worker starts timed")
    parser.add_argument("--work", type=Path, default=ROOT / ".perf-stores" / "stage2")
    parser.add_argument("--reuse", action="store_true", help="keep a store under --work that holds exactly its corpus")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "serve")
    parser.add_argument("--child", choices=["open", "trace", "follow"], help=argparse.SUPPRESS)
    for name in ("--folder", "--url", "--schema", "--chroma-url"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "follow":
            return child_follow(args)
        print(json.dumps({"open": child_open, "trace": child_trace}[args.child](args)))
        return
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    header = results_header(__file__)
    results: dict[str, Any] = {
        "command": header.command,
        "commit": header.commit,
        "when": header.when,
        "machine": header.machine_fields(),
        "stage23": {},
    }
    with servers(args.work) as (args.url, chroma):
        args.chroma_url = chroma.url
        for name in args.corpora:
            store, questions, built = open_store(name, args.work, args.url, args.chroma_url, args.reuse)
            try:
                if "stage23" in args.phases:
                    print(f"{name}: Stage 2+3, both ways", flush=True)
                    results["stage23"][name] = {"build": built, **measure_stage23(store, questions, args.samples)}
                if name == "perf-100k" and "start" in args.phases:
                    print(f"{name}: worker start", flush=True)
                    results["start"] = measure_start(args, name, args.starts)
                if name == "perf-100k" and "feed" in args.phases:
                    print(f"{name}: change feed", flush=True)
                    results["feed"] = {"records": len(store), **measure_feed(args, name, store)}
            finally:
                store.close()
    (args.out / "stage2.json").write_text(json.dumps(results, indent=1) + "\n")
    write_md(results, args.out / "stage2.md")
    print("wrote", args.out / "stage2.json", args.out / "stage2.md")


if __name__ == "__main__":
    main()
