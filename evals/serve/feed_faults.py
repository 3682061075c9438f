"""Two faults of the change feed found while measuring it (``stage2_sql.py``), on a real PostgreSQL
and ``chroma run``. Both are fixed (the outbox is drained on a thread of its own; BM25 is rebuilt
over the records the graph holds): this script shows how each case goes now. As found:

1. **A stalled Chroma stops the feed.** ``ChangeFeed._step`` hands the outbox's vectors to Chroma on
   the feed thread, after applying changes; while that call hangs, no later commit is applied, and
   the feed still reports itself connected (so ``/readyz`` says ready). chromadb's HTTP client has no
   timeout of its own: a follower opened without ``chroma_timeout_s`` (``CARStore.open``'s default)
   waits for as long as Chroma is stopped. Here Chroma is stopped with SIGSTOP, the writer (its own
   calls bounded at 2 s) commits two records, and the follower's application of each is timed.
2. **A replacement applied while another process commits fails the feed step.** Applying a change
   that replaces a record rebuilds BM25 from ``log.ordered()``, read from PostgreSQL *now*, over
   ``graph.records``, which holds only the changes applied so far: a record committed by a third
   writer in between is in the one and not the other (``KeyError``). Here the commit is made to land
   in that window by running it when the follower has read its changes.

    python evals/serve/feed_faults.py        # writes evals/results/serve/feed-faults.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from stage2_sql import DEMO, servers  # the Stage 2 measurement beside this script: its servers and stores

from car_rag import CARStore, IngestReport, load_policy
from car_rag.postgres.log import PostgresRecordLog
from car_rag_evals.results_header import results_header
from car_rag_evals.servers import ChromaServer

STALL_S = 8.0


def _applied(store: CARStore, doc_id: str, timeout_s: float) -> float | None:
    """Seconds until ``doc_id`` is in the follower's graph, None if not within ``timeout_s``."""
    tick = time.perf_counter()
    while time.perf_counter() - tick < timeout_s:
        if doc_id in store.records:
            return time.perf_counter() - tick
        time.sleep(0.01)
    return None


def _record(doc_id: str, text: str) -> dict:
    return {
        "doc_id": doc_id,
        "doc_type": "patch_release",
        "text": text,
        "published_at": "2031-01-01T00:00:00Z",
        "scope": {"package": "lodash", "cve_id": "CVE-2099-10001"},
    }


def stalled_chroma(url: str, chroma: ChromaServer, work: Path) -> list[str]:
    opened: dict[str, Any] = {"authority_url": url, "authority_schema": "faults_stall", "chroma_url": chroma.url}
    writer = CARStore.open(work / "writer", load_policy(DEMO / "policy.toml"), chroma_timeout_s=2, follow=False, **opened)
    writer.ingest(DEMO / "corpus.jsonl", progress=False)
    follower = CARStore.open(work / "follower", **opened)  # as a worker opens it: following, no Chroma timeout
    assert follower.feed is not None
    while not follower.feed.connected:
        time.sleep(0.01)
    vector = writer.embedder.encode(["a release"])[0]
    lines = []
    os.kill(chroma.proc.pid, signal.SIGSTOP)
    stopped = time.perf_counter()
    try:
        for name in ("stall-a", "stall-b"):
            report = writer.ingest([_record(name, f"lodash {name} release notes")], progress=False, embeddings={name: vector})
            when, pending = time.perf_counter() - stopped, writer.log.count_pending()  # type: ignore[attr-defined]
            seen = _applied(follower, name, STALL_S)
            lines.append(
                f"* `{name}`: the writer's ingest returned {when:.1f} s into the stall, warnings "
                f"{report.warnings or 'none'}, {pending} vectors pending in the outbox; "
                + (
                    f"applied by the follower {seen * 1000:.0f} ms after the ingest returned"
                    if seen is not None
                    else f"**not applied by the follower within {STALL_S:.0f} s**"
                )
                + f"; the follower's feed says connected: {follower.feed.connected}, error: {follower.feed.error}"
            )
    finally:
        os.kill(chroma.proc.pid, signal.SIGCONT)
    resumed = time.perf_counter()
    seen = _applied(follower, "stall-b", 60)
    lines.append(
        f"* Chroma resumed after {resumed - stopped:.1f} s: `stall-b` applied "
        + (f"{seen * 1000:.0f} ms later" if seen is not None else "not within 60 s")
    )
    follower.close()
    writer.close()
    return lines


def replaced_while_committing(url: str, chroma_url: str, work: Path) -> list[str]:
    opened: dict[str, Any] = {
        "authority_url": url,
        "authority_schema": "faults_replace",
        "chroma_url": chroma_url,
        "follow": False,
    }
    first = CARStore.open(work / "first", load_policy(DEMO / "policy.toml"), **opened)
    first.ingest(DEMO / "corpus.jsonl", progress=False)
    second, follower = CARStore.open(work / "second", **opened), CARStore.open(work / "third", **opened)
    replaced = dict(follower.records["sec-lodash-4.17.12-release"].model_dump(mode="json"), text="lodash 4.17.12, corrected")
    first.ingest([replaced], progress=False)  # a replacement, waiting in the log for the follower
    log = follower.log
    assert isinstance(log, PostgresRecordLog)  # opened on PostgreSQL
    read = log.changes
    late: list[IngestReport] = []

    def read_then_commit(after: int, **options: Any) -> list:
        changes = read(after, **options)
        if not late:  # another process commits right after the follower has read its changes
            late.append(second.ingest([_record("late", "lodash late release notes")], progress=False))
        return changes

    log.changes = read_then_commit  # type: ignore[method-assign]  # a commit injected between read and apply
    try:
        applied = follower.catch_up()
        outcome = f"catch_up applied {[c.record.doc_id for c in applied]}"
    except Exception as exc:
        outcome = f"catch_up raised {type(exc).__name__}: {exc} (at {traceback.extract_tb(exc.__traceback__)[-1].name})"
    log.changes = read  # type: ignore[method-assign]
    lines = [
        f"* the follower applies the replacement of `sec-lodash-4.17.12-release` while `late` is committed: {outcome}",
        f"* its head after: {follower.head}, the log's: {log.head()}; `late` in its graph: {'late' in follower.records}",
        f"* the next catch_up (the feed retries after marking itself disconnected): applied "
        f"{[c.record.doc_id for c in follower.catch_up()]}, head {follower.head}",
    ]
    for store in (first, second, follower):
        store.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "serve" / "feed-faults.md")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(__file__).resolve().parents[2] / ".perf-stores" / "feed-faults",
        help="PostgreSQL's and Chroma's folders (made afresh; PostgreSQL's user must be able to enter it)",
    )
    args = parser.parse_args()
    header = results_header(__file__)  # the load at the start, as the results say
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    with servers(args.work) as (url, chroma):
        stall = stalled_chroma(url, chroma, args.work)
        replace = replaced_while_committing(url, chroma.url, args.work)
    text = [
        "# Change-feed faults (`python evals/serve/feed_faults.py`)",
        "",
        f"{header.when}; load average at the start {header.load[0]:.2f}.",
        "",
        "## 1. A stalled Chroma stops the feed (Chroma stopped with SIGSTOP, then resumed)",
        "",
        *stall,
        "",
        "## 2. A replacement applied while another process commits",
        "",
        *replace,
        "",
    ]
    args.out.write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
