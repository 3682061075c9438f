"""Slow and large unauthenticated bodies against ``car-rag serve --api-keys`` (issue 32): the
server's memory while many clients each declare a large body, send nearly all of it and hold
the connection open, without a key; then slow clients with a key. Run against two checkouts
(``--tree``, e.g. one before the hardening and one after) so the figures compare.

For each tree: the demo corpus in a temporary store, ``car-rag serve`` from that tree in its own
process (BM25 anchors, a keys file); the server's resident memory (RSS) is sampled every 0.1 s.
Phase 1: ``--clients`` connections each POST /records with ``Content-Length`` of ``--body-mb``
MB and no key, send all but the last byte in 1 MB writes and hold; the peak RSS over the phase
less the RSS before it is the figure, with how many were answered before their body was sent.
Phase 2: ``--slow`` clients with a writer's key send a byte a second for ``--hold-s`` seconds:
how many were answered (and with what status) by then.

    python evals/serve/slow_bodies.py --tree /work/main --tree . --out evals/results/serve/slow-bodies.md
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import httpx  # noqa: E402
import psutil  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CARStore, load_policy  # noqa: E402
from car_rag.serve.keys import hash_key  # noqa: E402
from car_rag_evals.servers import HOST, free_port  # noqa: E402

DEMO = Path(car_rag.__file__).parent / "data" / "demo"
WRITER = "slow-bodies-writer-key"


def start(tree: Path, store: Path, keys: Path, port: int) -> subprocess.Popen:
    """``car-rag serve`` from ``tree``'s code, ready (the code it runs is checked: its file is under ``tree``)."""
    paths = [tree, tree / "integrations" / "langchain-car", tree / "integrations" / "llama-index-retrievers-car"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p.resolve()) for p in paths)}
    command = [sys.executable, "-m", "car_rag", "serve", "--store", str(store), "--api-keys", str(keys)]
    where = subprocess.run(
        [sys.executable, "-c", "import car_rag; print(car_rag.__file__)"], env=env, cwd=tree, capture_output=True, text=True
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"car_rag imports from {where}, not from {tree}")
    proc = subprocess.Popen(  # cwd: python -m puts it first on the path
        [*command, "--anchors", "bm25", "--port", str(port)],
        env=env,
        cwd=tree,
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{HOST}:{port}/readyz", timeout=5).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"car-rag serve from {tree} did not get ready")


class Sampler(threading.Thread):
    """The server's RSS every 0.1 s; ``peak`` since the last :meth:`reset`."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process, self.peak, self.stop = psutil.Process(pid), 0, threading.Event()

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def reset(self) -> int:
        self.peak = now = self.rss()
        return now

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.peak = max(self.peak, self.rss())


def head(port: int, length: int, key: str | None) -> bytes:
    lines = ["POST /records HTTP/1.1", f"Host: {HOST}:{port}", "Content-Type: application/json", f"Content-Length: {length}"]
    lines += [f"Authorization: Bearer {key}"] if key else []
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answered(conn: socket.socket) -> str | None:
    """The status line the server sent, if it sent one yet."""
    conn.setblocking(False)
    try:
        data = conn.recv(4096)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return "reset"
    finally:
        conn.setblocking(True)
    return data.split(b"\r\n", 1)[0].decode("latin-1") if data else "closed"


def large_unauthenticated(port: int, clients: int, body_mb: int, sampler: Sampler) -> dict[str, object]:
    size, chunk = body_mb * 2**20, b" " * 2**20
    conns: list[socket.socket] = []
    refused_early = [0]
    lock = threading.Lock()

    def client() -> None:
        conn = socket.create_connection((HOST, port), timeout=60)
        conns.append(conn)
        conn.sendall(head(port, size, None))
        sent = 0
        try:
            while sent < size - 1:
                piece = chunk[: min(len(chunk), size - 1 - sent)]
                conn.sendall(piece)
                sent += len(piece)
        except OSError:  # the server answered and closed: the rest is not read
            with lock:
                refused_early[0] += 1

    before = sampler.reset()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    time.sleep(2)  # held open, all but the last byte sent
    statuses = [answered(c) for c in conns]
    peak = sampler.peak
    for c in conns:
        c.close()
    return {
        "rss_before_mb": before / 2**20,
        "rss_peak_mb": peak / 2**20,
        "growth_mb": (peak - before) / 2**20,
        "refused_before_body_sent": refused_early[0],
        "statuses": sorted({s or "no answer yet" for s in statuses}),
    }


def slow_with_key(port: int, clients: int, hold_s: float) -> dict[str, object]:
    conns = []
    for _ in range(clients):
        conn = socket.create_connection((HOST, port), timeout=60)
        conn.sendall(head(port, 10_000, WRITER))
        conns.append(conn)
    statuses: dict[int, str] = {}
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline:
        for n, conn in enumerate(conns):
            if n in statuses:
                continue
            got = answered(conn)
            if got is not None:
                statuses[n] = got
                continue
            try:
                conn.sendall(b" ")
            except OSError:
                statuses[n] = "reset"
        time.sleep(1)
    for conn in conns:
        conn.close()
    return {"answered": len(statuses), "of": clients, "statuses": sorted(set(statuses.values()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, action="append", required=True, help="a checkout whose car-rag serve to run")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--body-mb", type=int, default=15)
    parser.add_argument("--slow", type=int, default=8)
    parser.add_argument("--hold-s", type=float, default=45.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "store"
        with CARStore.open(store, load_policy(DEMO / "policy.toml")) as built:
            built.ingest(DEMO / "corpus.jsonl", progress=False)
        keys = Path(folder) / "keys.json"
        keys.write_text(json.dumps({"keys": [{"name": "writer", "sha256": hash_key(WRITER), "write": True}]}))
        keys.chmod(0o600)
        for tree in args.tree:
            port = free_port()
            proc = start(tree, store, keys, port)
            sampler = Sampler(proc.pid)
            sampler.start()
            try:
                big = large_unauthenticated(port, args.clients, args.body_mb, sampler)
                slow = slow_with_key(port, args.slow, args.hold_s)
            finally:
                sampler.stop.set()
                proc.terminate()
                proc.wait(timeout=60)
            revision = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
            rows.append((str(tree), revision.stdout.strip(), big, slow))
            print(tree, big, slow, flush=True)
    lines = [
        "# Slow and large bodies against `car-rag serve --api-keys`",
        "",
        f"`python evals/serve/slow_bodies.py {' '.join(f'--tree {t}' for t in args.tree)} --clients {args.clients} "
        f"--body-mb {args.body_mb} --slow {args.slow} --hold-s {args.hold_s:g} --out {args.out}`",
        "",
        f"{args.clients} connections without a key each declare {args.body_mb} MB, send all but its last byte and hold; "
        f"then {args.slow} clients with a writer's key send one byte a second for {args.hold_s:g} s. RSS of the server "
        "process (demo store, BM25 anchors), sampled every 0.1 s.",
        "",
        "| tree (commit) | RSS before (MB) | peak (MB) | growth (MB) | unauthenticated: refused before the body was sent "
        "| their answers | slow keyed clients answered | their answers |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for tree, commit, big, slow in rows:
        lines.append(
            f"| {tree} ({commit}) | {big['rss_before_mb']:.0f} | {big['rss_peak_mb']:.0f} | {big['growth_mb']:+.0f} "
            f"| {big['refused_before_body_sent']}/{args.clients} | {', '.join(map(str, big['statuses']))} "  # type: ignore[call-overload]
            f"| {slow['answered']}/{slow['of']} | {', '.join(map(str, slow['statuses']))} |"  # type: ignore[call-overload]
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
