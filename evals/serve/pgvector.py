"""pgvector against a Chroma server as the vector engine of a shared store (a measurement, not a
test): dense search latency and recall against exact search, past the exact-search limit.

    python evals/serve/pgvector.py --size 100000 --out evals/results/serve/pgvector-100k.md

The seeded security-advisory corpus of the scale benchmark (:mod:`car_rag_evals.perf.corpus`), its vectors
each record's gist embedded once with MiniLM plus seeded noise (``gist_vectors``: templated, near
duplicate, what lost Chroma's default HNSW up to 9 of the exact top 10), and its questions embedded
for real. Two shared stores on one PostgreSQL (``car_rag.postgres.fixture``, two databases): one with
``vector_store="pgvector"``, one whose vectors reach a ``chroma run`` server through the outbox,
each ingested in chunks of 10,000 with the vectors given. Then, query by query and engine by engine
in turn (who goes first alternates), ``store.dense.search(vector, 50)`` (the retriever's depth),
without and with a caller gate that admits every record (the filter's own cost); recall@10 and
@50 against exact search over the same vectors (numpy, ties by id); for pgvector, ef_search swept
on the same index (and, with ``--default-build``, pgvector's default index, m 16 and
ef_construction 64, built afterwards by CREATE INDEX over the same rows).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from car_rag import CARStore, Embedder  # noqa: E402
from car_rag.channels import VectorChannel  # noqa: E402
from car_rag.eligibility import CallerContext  # noqa: E402
from car_rag.postgres import PgVectorChannel  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag.store import DEFAULT_HNSW, DEFAULT_PGVECTOR_HNSW  # noqa: E402
from car_rag_evals.perf.corpus import generate, gist_vectors  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402
from car_rag_evals.servers import ChromaServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

POLICY = "security-advisory"
DEPTH, K = 50, 10
CHUNK = 10_000
GATE = CallerContext("acme", ["analyst"]).chroma_where()
"""A caller gate every record of the corpus passes (none has governance fields): what filtering costs."""


def exact_top(vectors: np.ndarray, ids: list[str], query: np.ndarray, k: int) -> list[str]:
    scores = vectors @ (query / np.linalg.norm(query))
    cut = np.partition(scores, -k)[-k]
    return [ids[i] for i in sorted(np.flatnonzero(scores >= cut), key=lambda i: (-scores[i], ids[i]))[:k]]


def build(store: CARStore, corpus, vectors: np.ndarray) -> dict[str, float]:
    steps: dict[str, float] = {}
    tick = time.perf_counter()
    for start in range(0, len(corpus), CHUNK):
        chunk = corpus.records[start : start + CHUNK]
        report = store.ingest(chunk, progress=False, embeddings={r["doc_id"]: vectors[start + i] for i, r in enumerate(chunk)})
        if report.errors or report.warnings:
            raise SystemExit(f"ingest: {report.errors[:3]} {report.warnings}")
        for step, seconds in report.timings_s.items():
            steps[step] = steps.get(step, 0.0) + seconds
        done = start + len(chunk)
        print(f"  {store.config['vector_store']}: {done} records, {time.perf_counter() - tick:.0f} s", flush=True)
    steps["total"] = time.perf_counter() - tick
    return steps


def timed(search: Callable[..., list], times: list[float], *args, **kwargs) -> list:
    tick = time.perf_counter()
    hits = search(*args, **kwargs)
    times.append((time.perf_counter() - tick) * 1000)
    return hits


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000, help="records")
    parser.add_argument("--queries", type=int, default=200, help="questions")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over the questions (after one untimed)")
    parser.add_argument("--ef", type=int, nargs="+", default=[100, 200, 400, 800], help="pgvector ef_search values swept")
    parser.add_argument(
        "--default-build",
        action="store_true",
        help="also pgvector's default index (m 16, ef_construction 64), built by CREATE INDEX afterwards",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    header = results_header(__file__)
    embedder = Embedder()
    corpus = generate(args.size, queries=args.queries)
    ids = [r["doc_id"] for r in corpus.records]
    vectors = gist_vectors(corpus, embedder)
    questions = embedder.encode([q.query for q in corpus.queries])
    truth = [exact_top(vectors, ids, q, DEPTH) for q in questions]
    work = Path(tempfile.mkdtemp(prefix="car-rag-pgvector-"))
    work.chmod(0o755)  # under root the server runs as the pgserver user, which must enter it
    with throwaway_postgres(work / "pg") as server, ChromaServer(work / "chroma-data") as chroma:
        urls = [server.new_database() for _ in range(2)]
        pg = CARStore.open(
            work / "pg-cache", POLICY, embedder=embedder, authority_url=urls[0], vector_store="pgvector", follow=False
        )
        assert pg.replica is not None  # its records are in PostgreSQL: the log the pgvector channels read
        ch = CARStore.open(
            work / "ch-cache", POLICY, embedder=embedder, authority_url=urls[1], chroma_url=chroma.url, follow=False
        )
        builds = {"pgvector": build(pg, corpus, vectors), "Chroma server": build(ch, corpus, vectors)}
        for store in (pg, ch):
            store.dense.exact_limit = 0  # below the limit (20k) exact search would answer: measure the engine
        chroma_name = f"Chroma server (ef {DEFAULT_HNSW['ef_search']}, M {DEFAULT_HNSW['max_neighbors']})"
        channels: dict[str, VectorChannel] = {chroma_name: ch.dense}
        m, efc = DEFAULT_PGVECTOR_HNSW["max_neighbors"], DEFAULT_PGVECTOR_HNSW["ef_construction"]
        for ef in args.ef:
            channels[f"pgvector (ef {ef}, m {m}, ef_construction {efc})"] = PgVectorChannel(
                pg.replica.log, ef_search=ef, exact_limit=0
            )
        rows = measure(channels, questions, truth, args.rounds)
        default_build = None
        if args.default_build:
            with pg.replica.log.connect() as conn:
                conn.execute("DROP INDEX car_rag.records_embedding")
                tick = time.perf_counter()
                conn.execute(
                    "CREATE INDEX records_embedding ON car_rag.records USING hnsw (embedding vector_cosine_ops) "
                    "WITH (m = 16, ef_construction = 64)"
                )
                default_build = time.perf_counter() - tick
            for channel in channels.values():
                channel.close()
            channels = {
                f"pgvector (ef {ef}, m 16, ef_construction 64: CREATE INDEX)": PgVectorChannel(
                    pg.replica.log, ef_search=ef, exact_limit=0
                )
                for ef in args.ef
            }
            rows += measure(channels, questions, truth, args.rounds)
        for channel in channels.values():
            channel.close()
        sizes = {}
        for name, url in zip(("pgvector", "Chroma server"), urls):
            with pg.replica.log.psycopg.connect(url) as conn:
                sizes[name] = conn.execute("SELECT pg_total_relation_size('car_rag.records')").fetchone()[0]
                buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
        pg.close()
        ch.close()
    chroma_mb = _du(work / "chroma-data") / 2**20
    shutil.rmtree(work, ignore_errors=True)
    write(args, header, builds, rows, default_build, sizes, chroma_mb, buffers)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(channels: dict[str, VectorChannel], questions: np.ndarray, truth: list[list[str]], rounds: int) -> list[dict]:
    names = list(channels)
    plain: dict[str, list[float]] = {n: [] for n in names}
    gated: dict[str, list[float]] = {n: [] for n in names}
    recall: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for round_ in range(rounds + 1):
        for i, question in enumerate(questions):
            order = names if (i + round_) % 2 == 0 else names[::-1]
            for name in order:
                channel = channels[name]
                sink_plain: list[float] = plain[name] if round_ else []
                sink_gated: list[float] = gated[name] if round_ else []
                hits = [h.doc_id for h in timed(channel.search, sink_plain, question, DEPTH)]
                timed(channel.search, sink_gated, question, DEPTH, where=GATE)
                if round_ == 0:
                    recall[name].append((len(set(hits[:K]) & set(truth[i][:K])) / K, len(set(hits) & set(truth[i])) / DEPTH))
    return [
        {
            "engine": n,
            "p50": statistics.median(plain[n]),
            "p99": pct(plain[n], 0.99),
            "gated_p50": statistics.median(gated[n]),
            "gated_p99": pct(gated[n], 0.99),
            "recall10": statistics.fmean(r for r, _ in recall[n]),
            "min10": min(r for r, _ in recall[n]),
            "below10": sum(r < 1 for r, _ in recall[n]),
            "recall50": statistics.fmean(r for _, r in recall[n]),
            "exact_scans": getattr(channels[n], "exact_scans", None),
        }
        for n in names
    ]


def write(args, header, builds, rows, default_build, sizes, chroma_mb, buffers) -> None:
    lines = [
        f"# Vector engine of a shared store: pgvector vs a Chroma server ({args.size:,} records)",
        "",
        f"`python evals/serve/pgvector.py --size {args.size}{' --default-build' * args.default_build} --out {args.out}`; "
        f"{args.queries} questions, {args.rounds} timed rounds; load average before: {header.load_text} "
        f"on {header.cpus} CPUs; commit {header.commit}; PostgreSQL (car_rag.postgres.server) with shared_buffers {buffers}",
        "",
        f"`store.dense.search(vector, {DEPTH})`, the query already embedded; gated: with a caller gate every record passes. "
        f"Recall against exact search over the same vectors.",
        "",
        "| engine | p50 ms | p99 ms | gated p50 ms | gated p99 ms | recall@10 | min recall@10 | questions < 1 | recall@50 "
        "| exact scans |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        scans = "" if r["exact_scans"] is None else str(r["exact_scans"])
        lines.append(
            f"| {r['engine']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['gated_p50']:.2f} | {r['gated_p99']:.2f} | "
            f"{r['recall10']:.3f} | {r['min10']:.1f} | {r['below10']} | {r['recall50']:.3f} | {scans} |"
        )
    lines += [
        "",
        "Building (ingest in chunks of 10,000, vectors given; seconds by the store's own report):",
        "",
        "| engine | total s | records/s | records (PostgreSQL; pgvector: with the HNSW inserts) s "
        "| chroma (outbox drain) s | bm25 s |",
        "|---|---|---|---|---|---|",
    ]
    for name, steps in builds.items():
        lines.append(
            f"| {name} | {steps['total']:.0f} | {args.size / steps['total']:.0f} | {steps.get('records', 0):.0f} | "
            f"{steps.get('chroma', 0):.0f} | {steps.get('bm25', 0):.0f} |"
        )
    lines += [
        "",
        f"On disk: the records table with its indexes {sizes['pgvector'] / 2**20:.0f} MB (pgvector) and "
        f"{sizes['Chroma server'] / 2**20:.0f} MB (Chroma store), the Chroma server's folder {chroma_mb:.0f} MB.",
    ]
    if default_build is not None:
        lines += [
            "",
            f"pgvector's default index (m 16, ef_construction 64) built by CREATE INDEX over the {args.size:,} rows "
            f"in {default_build:.0f} s.",
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
