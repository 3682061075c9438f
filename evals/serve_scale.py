"""Load test of `car-rag serve` over a store shared through PostgreSQL (a command, not a timed
test): issue 19's goals, measured on one machine over loopback.

    python evals/serve_scale.py --size 100000 --out evals/results/serve/scale-100000
    python evals/serve_scale.py --size 10000 --out /tmp/scale-10000 --requests 300     # a quicker look

Builds (once; kept under ``--stores``) the scale benchmark's seeded security-advisory corpus
(car_rag_evals/perf/corpus.py: precomputed gist vectors, 200 questions) into a shared store: records
in a `car-rag postgres` server, vectors in a `chroma run` server. Then, each in its own
server process started with the real CLI:

* latency: the same questions in process (``retriever.retrieve`` on the shared store opened
  here) and over HTTP (``POST /retrieve``, format json) at concurrency 1, then at 8;
* throughput: ``--workers 1`` against ``--workers 2`` at concurrency 8, BM25 anchors and hybrid;
* propagation: two servers (as on two machines); a patch release posted to one voids an
  unpatched disclosure; the time from the POST's return until the other reports the
  disclosure superseded (polled with the disclosure's own words, every 5 ms).

Writes ``<out>.md`` and ``<out>.json``, with the machine's load average at each phase's start.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import httpx  # noqa: E402

from car_rag import CARStore, ControllingAuthorityRetriever  # noqa: E402
from car_rag.postgres import server as pg_server  # noqa: E402
from car_rag_evals.perf.corpus import generate, gist_vectors  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402
from car_rag_evals.servers import ChromaServer, free_port  # noqa: E402

POLICY = "security-advisory"
SEED = 7


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ms), "p50": statistics.median(ms), "p95": at(0.95), "p99": at(0.99)}


def build(args: argparse.Namespace, url: str, chroma: str, schema: str) -> dict:
    """The shared store, built when its schema is new; returns what building it took."""
    corpus = generate(args.size, seed=SEED)
    folder = args.stores / f"serve-cache-{args.size}"
    store = CARStore.open(folder, POLICY, authority_url=url, authority_schema=schema, chroma_url=chroma, follow=False)
    if len(store) >= args.size:  # built before (and written to by the propagation phase since)
        store.close()
        return {"reused": True}
    vectors = gist_vectors(corpus, store.embedder, seed=SEED)
    tick = time.perf_counter()
    for start in range(0, args.size, 5000):
        chunk = corpus.records[start : start + 5000]
        report = store.ingest(chunk, progress=False, embeddings={r["doc_id"]: vectors[start + i] for i, r in enumerate(chunk)})
        assert not report.errors, report.errors[:3]
        print(f"  {start + len(chunk):,} records", flush=True)
    seconds = time.perf_counter() - tick
    store.close()
    return {"reused": False, "ingest_s": seconds, "records_per_s": args.size / seconds}


@contextmanager
def serve(args: argparse.Namespace, url: str, schema: str, *options: str):
    port = free_port()
    log = (args.stores / f"serve-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "car_rag",
            "serve",
            "--store",
            str(args.stores / "serve-worker-cache"),
            "--authority-schema",
            schema,
            "--port",
            str(port),
            *options,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "CAR_RAG_AUTHORITY_URL": url},
    )
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"car-rag serve exited; see {log.name}")
            try:
                if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield base, time.perf_counter() - started, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


WRK_SCRIPT = """
local bodies = {%s}
local i = 0
request = function()
  i = i %% #bodies + 1
  return wrk.format("POST", "/retrieve", {["Content-Type"] = "application/json"}, bodies[i])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"p50": %%f, "p95": %%f, "p99": %%f, "requests": %%d, "non2xx": %%d, '
    .. '"errors": %%d, "us": %%d}\\n',
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000, summary.requests,
    e.status, e.connect + e.read + e.write + e.timeout, summary.duration))
end
"""


def cpu_seconds(server: subprocess.Popen) -> dict[str, float]:
    """CPU seconds so far of the server (with its workers), PostgreSQL and the Chroma server."""
    import psutil

    def used(procs: list) -> float:
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    root = psutil.Process(server.pid)
    every = list(psutil.process_iter(["name", "cmdline"]))
    return {
        "server": used([root, *root.children(recursive=True)]),
        "postgres": used([p for p in every if (p.info["name"] or "").startswith("postgres")]),
        "chroma": used([p for p in every if "chroma" in " ".join(cmd := p.info["cmdline"] or []) and "run" in cmd]),
    }


def over_http(base: str, server: subprocess.Popen, questions: list[str], concurrency: int, seconds: int) -> dict:
    """``wrk`` (C, so the load generator takes little of the two cores) asking the questions in turn
    at ``concurrency`` for ``seconds``; latency percentiles, requests/s, and the CPU each part used."""
    import resource

    bodies = ", ".join(json.dumps(json.dumps({"query": q, "k": 5})) for q in questions)
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(WRK_SCRIPT % bodies)

    def wrk(duration: int) -> str:
        command = ["wrk", "-t", str(min(2, concurrency)), "-c", str(concurrency), "-d", f"{duration}s", "-s", str(script), base]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout

    wrk(3)  # warm every connection and worker
    before, client_before, tick = cpu_seconds(server), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = wrk(seconds)
    wall, after, client_after = time.perf_counter() - tick, cpu_seconds(server), resource.getrusage(resource.RUSAGE_CHILDREN)
    script.unlink()
    got = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])
    client = (client_after.ru_utime + client_after.ru_stime) - (client_before.ru_utime + client_before.ru_stime)
    cores = {part: (after[part] - before[part]) / wall for part in after}
    return {
        "p50": got["p50"],
        "p95": got["p95"],
        "p99": got["p99"],
        "n": got["requests"],
        "rps": got["requests"] / (got["us"] / 1e6),
        "errors": got["non2xx"] + got["errors"],
        "load": load(),
        "cores": {**cores, "wrk": client / wall},
    }


def in_process(url: str, schema: str, args: argparse.Namespace, questions: list[str], anchors: str) -> dict:
    store = CARStore.open(args.stores / "serve-inprocess-cache", authority_url=url, authority_schema=schema, follow=False)
    try:
        retriever = ControllingAuthorityRetriever(store, anchors=anchors)  # type: ignore[arg-type]
        for q in questions[:20]:
            retriever.retrieve(q)
        ms = []
        for i in range(args.requests):
            tick = time.perf_counter()
            retriever.retrieve(questions[i % len(questions)])
            ms.append((time.perf_counter() - tick) * 1000)
        return {**summary(ms), "load": load()}
    finally:
        store.close()


def propagation(args: argparse.Namespace, url: str, schema: str, corpus_records: list[dict]) -> dict:
    """Delays from a POST's return on one server until another reports the voided record superseded."""
    rng = random.Random(SEED)
    store = CARStore.open(args.stores / "serve-inprocess-cache", authority_url=url, authority_schema=schema, follow=False)
    try:
        unpatched = [
            r
            for r in corpus_records
            if r["doc_type"] == "vulnerability_disclosure"
            and not store.graph.is_superseded(r["doc_id"])
            and r["doc_id"] in store.records
        ]
    finally:
        store.close()
    picked = rng.sample(unpatched, args.writes)
    delays: list[float] = []
    with (
        serve(args, url, schema, "--anchors", "bm25") as (a, _, _),
        serve(args, url, schema, "--anchors", "bm25") as (b, _, _),
        httpx.Client(timeout=60) as client,
    ):
        for n, disclosure in enumerate(picked):
            patch = {
                "doc_id": f"serve-scale-patch-{n}-{time.time_ns()}",
                "doc_type": "patch_release",
                "text": f"Release {n}.0.1: maintenance and fixes.",
                "scope": dict(disclosure["scope"]),
                "published_at": "2031-01-01",
            }
            posted = client.post(f"{a}/records", json=patch)
            returned = time.perf_counter()
            assert posted.status_code == 200 and disclosure["doc_id"] in posted.json()["newly_superseded"], posted.text
            while True:
                got = client.post(f"{b}/retrieve", json={"query": disclosure["text"], "k": 10}).json()
                # the disclosure listed as superseded, or (ranked below the top 10 once voided) named as
                # voided by the patch that now stands in its place
                voided = {r["doc_id"] for r in got["reranked"] if r["status"] == "superseded"}
                voided |= {link["doc_id"] for r in got["reranked"] for link in r["voids"]}
                if disclosure["doc_id"] in voided:
                    delays.append((time.perf_counter() - returned) * 1000)
                    break
                if time.perf_counter() - returned > 10:
                    delays.append(float("inf"))
                    break
                time.sleep(0.005)
    return {**summary(delays), "max": max(delays), "within_1s": sum(d <= 1000 for d in delays), "load": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=1000, help="requests in process per condition")
    parser.add_argument("--seconds", type=int, default=20, help="seconds of load over HTTP per condition (wrk)")
    parser.add_argument("--writes", type=int, default=50, help="propagation: patch releases posted")
    parser.add_argument("--stores", type=Path, default=Path(".perf-stores"))
    parser.add_argument("--only", choices=["latency", "propagation"], help="run one part (default: both)")
    parser.add_argument("--out", type=Path, required=True, help="results path without suffix (.md and .json are written)")
    args = parser.parse_args()
    args.stores = args.stores.resolve()
    args.stores.mkdir(parents=True, exist_ok=True)
    schema = f"serve_{args.size}"
    pgdir = args.stores / "serve-pg"
    url = pg_server.start(pgdir, port=55432 + args.size % 97)
    results: dict = {
        "size": args.size,
        "requests": args.requests,
        "seconds": args.seconds,
        "command": results_header(__file__).command,
        "load_at_start": load(),
    }
    try:
        with ChromaServer(args.stores / f"serve-chroma-{args.size}") as chroma:
            _repoint_chroma(url, schema, chroma.url)
            results["build"] = build(args, url, chroma.url, schema)
            questions = [q.query for q in generate(args.size, seed=SEED).queries]
            records = generate(args.size, seed=SEED).records
            for anchors in ("hybrid", "bm25") if args.only != "propagation" else ():
                results[f"in_process_{anchors}"] = in_process(url, schema, args, questions, anchors)
                print(anchors, "in process", results[f"in_process_{anchors}"], flush=True)
                for workers in (1, 2):
                    with serve(args, url, schema, "--anchors", anchors, "--workers", str(workers)) as (base, ready_s, proc):
                        for concurrency in (1, 8) if workers == 1 else (8,):
                            key = f"http_{anchors}_w{workers}_c{concurrency}"
                            results[key] = {**over_http(base, proc, questions, concurrency, args.seconds), "ready_s": ready_s}
                            print(key, results[key], flush=True)
            if args.only != "latency":
                results["propagation"] = propagation(args, url, schema, records)
                print("propagation", results["propagation"], flush=True)
    finally:
        pg_server.stop(pgdir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    args.out.with_suffix(".md").write_text(report(results))
    print(report(results))


def _repoint_chroma(url: str, schema: str, chroma: str) -> None:
    """The Chroma server runs on a new port each time: a store built before follows it (its data
    folder is the same); nothing to do before the first build."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.store",)).fetchone()
        if found is not None and found[0] is not None:
            conn.execute(f"UPDATE {schema}.store SET config = jsonb_set(config, '{{chroma_url}}', to_jsonb(%s::text))", (chroma,))


def report(r: dict) -> str:
    def row(name: str, key: str, baseline: str | None = None) -> str:
        m = r[key]
        ratio = f"{m['p50'] / r[baseline]['p50']:.2f}x" if baseline else ""
        rps = f"{m['rps']:.1f}" if "rps" in m else ""
        cores = m.get("cores")
        used = "" if cores is None else " / ".join(f"{cores[p]:.2f}" for p in ("server", "wrk", "postgres", "chroma"))
        cells = [
            name,
            f"{m['p50']:.1f}",
            f"{m['p95']:.1f}",
            f"{m['p99']:.1f}",
            rps,
            ratio,
            str(m.get("errors", "")),
            used,
            f"{m['load']:.1f}",
        ]
        return "| " + " | ".join(cells) + " |"

    lines = [
        f"# car-rag serve over a shared store: {r['size']:,} records",
        "",
        f"`{r['command']}`; in process {r['requests']} questions in turn, over HTTP `wrk` for {r.get('seconds', 20)} s "
        f"per row (the scale benchmark's 200 questions in turn, JSON, k 5, no API key); load average at start "
        f"{r['load_at_start']:.1f} (two shared cores; the load generator and both servers run on the same two). "
        "Cores used: CPU seconds per second of wall time, per process group.",
        "",
        "| condition | p50 ms | p95 ms | p99 ms | requests/s | p50 vs in process | errors | cores used: server / wrk / "
        "PostgreSQL / Chroma | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for anchors in ("hybrid", "bm25") if "in_process_bm25" in r else ():
        base = f"in_process_{anchors}"
        lines.append(row(f"{anchors}: in process", base))
        lines.append(row(f"{anchors}: HTTP, 1 worker, concurrency 1", f"http_{anchors}_w1_c1", base))
        lines.append(row(f"{anchors}: HTTP, 1 worker, concurrency 8", f"http_{anchors}_w1_c8", base))
        lines.append(row(f"{anchors}: HTTP, 2 workers, concurrency 8", f"http_{anchors}_w2_c8", base))
        one, two = r[f"http_{anchors}_w1_c8"]["rps"], r[f"http_{anchors}_w2_c8"]["rps"]
        lines.append(f"| {anchors}: 2 workers / 1 worker, requests/s | | | | {two / one:.2f}x | | | | |")
    p = r.get("propagation")
    lines += (
        []
        if p is None
        else [
            "",
            f"Propagation ({p['n']} patch releases posted to one server, polled on another): "
            f"p50 {p['p50']:.0f} ms, p95 {p['p95']:.0f} ms, max {p['max']:.0f} ms; {p['within_1s']}/{p['n']} within 1 s "
            f"(load {p['load']:.1f}).",
        ]
    )
    if "build" in r and not r["build"].get("reused"):
        lines.append(
            f"\nBuilt in {r['build']['ingest_s']:.0f} s ({r['build']['records_per_s']:.0f} records/s, precomputed "
            "vectors, chunks of 5,000 into PostgreSQL and the Chroma server)."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
