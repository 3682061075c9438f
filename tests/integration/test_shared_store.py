"""A store shared by several processes through PostgreSQL (car_rag.postgres: its log and feed): a real
PostgreSQL + pgvector (`car-rag postgres`) and a real `chroma run` on loopback, the real MiniLM.

Every store instance here has its own connections, change feed and memory, as a worker
process does; the kill tests use real processes. Each test uses a schema of its own."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import numpy as np
import psycopg
import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, StoreError
from car_rag.graph import AuthorityGraph
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag.records import Record
from car_rag.store import DEFAULT_CHUNK
from car_rag_evals.servers import HOST, chroma_cli
from helpers_records import MDRENDER_PATCH, MDRENDER_VOIDED, chroma_collection, day, edge_set, retrieved, shared_log
from servers import chroma_run, fetch_one, wait_for

PATCH, VOIDED = MDRENDER_PATCH, MDRENDER_VOIDED


@pytest.fixture(scope="module")
def pg(postgres: ThrowawayPostgres) -> str:
    """A database of the module's own on the session's PostgreSQL (its URL)."""
    return postgres.new_database()


@pytest.fixture(scope="module")
def chroma(tmp_path_factory):
    with chroma_run(tmp_path_factory.mktemp("chroma")) as (url, _, _):
        yield url


@pytest.fixture
def schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def vectors_for(records: list[dict], dimension: int = 384, seed: int = 0) -> dict[str, list[float]]:
    """Seeded unit vectors: tests about authority need no encoder."""
    rng = np.random.default_rng(seed)
    out = {}
    for r in records:
        v = rng.normal(size=dimension)
        out[r["doc_id"]] = (v / np.linalg.norm(v)).tolist()
    return out


def test_processes_share_one_truth(tmp_path, pg, chroma, schema, demo_policy, embedder, demo_corpus_path, demo_queries):
    shared = {"authority_url": pg, "authority_schema": schema, "embedder": embedder}
    with (
        CARStore.open(tmp_path / "a", demo_policy, chroma_url=chroma, **shared) as a,
        CARStore.open(tmp_path / "b", **shared) as b,
    ):
        report = a.ingest(demo_corpus_path, progress=False)
        assert len(report.added) == 45 and not report.warnings
        wait_for(lambda: b.head == a.head == 45, "the second store follows the first's commit")
        assert b.records == a.records
        assert edge_set(b.graph) == edge_set(a.graph) and len(edge_set(a.graph)) == 18
        assert b.lexical.doc_ids == a.lexical.doc_ids == [r["doc_id"] for r in map(json.loads, demo_corpus_path.open())]
        assert chroma_collection(a).count() == 45  # the outbox drained into the Chroma server
        ask_a, ask_b = ControllingAuthorityRetriever(a), ControllingAuthorityRetriever(b)
        for q in demo_queries:
            tops = [[(x.doc_id, x.status, x.rank) for x in ask.retrieve(q["query"]).top(5)] for ask in (ask_a, ask_b)]
            assert tops[0] == tops[1], q["query"]

        inserted = b.ingest([PATCH], progress=False)  # the other process writes
        assert inserted.newly_superseded == [VOIDED]
        wait_for(lambda: a.graph.is_superseded(VOIDED), "the first store sees the second's insert void the disclosure", 60)
        assert a.feed is not None and a.feed.delays  # it came through the change feed
        answer = ask_a.retrieve("Is mdrender still vulnerable to CVE-2099-10009?")
        assert retrieved(answer, VOIDED).superseded_by == [PATCH["doc_id"]]
    with CARStore.open(tmp_path / "c", follow=False, **shared) as fresh:  # a worker started later
        assert len(fresh) == 46 and edge_set(fresh.graph) == edge_set(a.graph)


def test_writers_in_two_processes_agree_with_a_rebuild(tmp_path, pg, chroma, schema, security_policy):
    """Two stores write at once (threads, each its own connections): every change is applied
    everywhere in one order, and the graph equals one built from scratch on the final records."""
    rng = random.Random(19)
    records = []
    for p in range(6):
        package, cve = f"pkg{p}", f"CVE-2099-{p:05d}"
        records.append(
            {
                "doc_id": f"{package}-disclosure",
                "doc_type": "vulnerability_disclosure",
                "text": f"{cve}: heap overflow in {package}",
                "published_at": day(p).isoformat(),
                "scope": {"package": package, "cve_id": cve},
            }
        )
        for v in range(4):
            records.append(
                {
                    "doc_id": f"{package}-{v}",
                    "doc_type": "patch_release",
                    "text": f"{package} release {v}",
                    "published_at": day(10 + 5 * v + p).isoformat(),
                    "scope": {"package": package, "cve_id": cve},
                }
            )
    rng.shuffle(records)
    vectors = vectors_for(records)
    shared = {"authority_url": pg, "authority_schema": schema}
    with (
        CARStore.open(tmp_path / "a", security_policy, chroma_url=chroma, **shared) as a,
        CARStore.open(tmp_path / "b", **shared) as b,
    ):

        def write(store: CARStore, part: list[dict]) -> None:
            for i in range(0, len(part), 3):
                store.ingest(part[i : i + 3], progress=False, embeddings=vectors)

        threads = [threading.Thread(target=write, args=(s, records[i::2])) for i, s in enumerate((a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        wait_for(lambda: a.head == b.head and len(a) == len(b) == len(records), "both stores hold every record")
        rebuilt = AuthorityGraph(security_policy)
        for r in records:
            rebuilt.add(Record.model_validate(r))
        assert edge_set(a.graph) == edge_set(b.graph) == edge_set(rebuilt)
        assert set(a.lexical.doc_ids) == {r["doc_id"] for r in records} and a.lexical.doc_ids == b.lexical.doc_ids
        with psycopg.connect(pg) as conn:
            changes = [n for (n,) in conn.execute(f"SELECT change FROM {schema}.records ORDER BY change")]
        assert changes == list(range(1, len(records) + 1))  # one order, no gap


def test_vectors_wait_in_the_outbox_while_chroma_is_down(tmp_path, pg, schema, security_policy):
    folder = tmp_path / "chroma"
    folder.mkdir()
    with chroma_run(folder) as (url, port, proc):
        store = CARStore.open(
            tmp_path / "a", security_policy, chroma_url=url, authority_url=pg, authority_schema=schema, chroma_timeout_s=5
        )
        first = [
            {
                "doc_id": "d1",
                "doc_type": "vulnerability_disclosure",
                "text": "CVE-2099-1: overflow in zlibx",
                "scope": {"package": "zlibx", "cve_id": "CVE-2099-1"},
                "published_at": "2025-01-01",
            }
        ]
        store.ingest(first, progress=False, embeddings=vectors_for(first))
        proc.terminate()
        proc.wait(timeout=30)
    later = [
        {
            "doc_id": "p1",
            "doc_type": "patch_release",
            "text": "zlibx 1.2.14",
            "scope": {"package": "zlibx", "cve_id": "CVE-2099-1"},
            "published_at": "2025-02-01",
        }
    ]
    try:
        report = store.ingest(later, progress=False, embeddings=vectors_for(later, seed=1))
        assert report.added == ["p1"] and report.newly_superseded == ["d1"]  # authority does not wait for vectors
        assert any("1 vectors wait in the outbox" in w for w in report.warnings), report.warnings
        assert shared_log(store).count_pending() == 1
        assert sorted(h.doc_id for h in store.lexical.search("zlibx", 5)) == ["d1", "p1"]
        # The Chroma server comes back (same data, same port): the feed drains the outbox.
        log = (folder / "server2.log").open("wb")
        again = subprocess.Popen(
            [chroma_cli(), "run", "--host", HOST, "--port", str(port), "--path", str(folder / "data")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: shared_log(store).count_pending() == 0, "the outbox drains once Chroma answers", 60, 0.2)
            assert sorted(chroma_collection(store).get()["ids"]) == ["d1", "p1"]
        finally:
            again.terminate()
            again.wait(timeout=30)
            log.close()
    finally:
        store.close()


_WRITER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from car_rag import CARStore
    url, schema, folder, batch = sys.argv[1:5]
    records = json.loads(open(batch).read())
    rng = np.random.default_rng(0)
    vectors = {r["doc_id"]: (v / np.linalg.norm(v)).tolist() for r in records for v in [rng.normal(size=384)]}
    with CARStore.open(folder, authority_url=url, authority_schema=schema, follow=False) as store:
        print("writing", flush=True)
        store.ingest(records, progress=False, embeddings=vectors, atomic=True)
        print("written", flush=True)
""")


BATCH = 600
"""The records a killed writer's batch adds: more than an ingest's default chunk, which an atomic
batch ignores (one transaction)."""


@pytest.mark.timeout(1200)  # two writers of 601 records, a follower applying them
def test_a_writer_killed_mid_batch_leaves_the_batch_absent(tmp_path, pg, chroma, schema, security_policy):
    """kill -9 of the writing process while its batch's transaction is open: nothing of the batch
    is stored, and the same batch written again goes in whole. The kill is made certain to land
    mid-transaction by holding a row lock the batch's last record needs."""
    assert BATCH > DEFAULT_CHUNK
    existing: dict[str, Any] = {
        "doc_id": "r-last",
        "doc_type": "patch_release",
        "text": "release notes",
        "published_at": "2025-01-01",
        "scope": {"package": "p", "cve_id": "CVE-2099-9"},
    }
    with CARStore.open(tmp_path / "a", security_policy, chroma_url=chroma, authority_url=pg, authority_schema=schema) as a:
        a.ingest([existing], progress=False, embeddings=vectors_for([existing]))
        batch = [
            {
                "doc_id": f"r{i}",
                "doc_type": "patch_release",
                "text": f"release {i}",
                "published_at": "2025-02-01",
                "scope": {"package": "p", "cve_id": "CVE-2099-9"},
            }
            for i in range(BATCH)
        ]
        batch.append({**existing, "text": "release notes, corrected"})  # replaces the row the test locks
        (tmp_path / "batch.json").write_text(json.dumps(batch))
        with psycopg.connect(pg) as blocker, psycopg.connect(pg, autocommit=True) as look:
            blocker.execute(f"SELECT 1 FROM {schema}.records WHERE doc_id = 'r-last' FOR UPDATE")
            child = subprocess.Popen(
                [sys.executable, "-c", _WRITER, pg, schema, str(tmp_path / "w"), str(tmp_path / "batch.json")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            stderr = child.stderr
            assert stderr is not None  # a pipe
            try:

                def blocked():  # asked outside the blocker's transaction, whose statistics are a snapshot
                    rows = fetch_one(
                        look.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                            (f"car-rag {child.pid} write",),
                        )
                    )
                    assert child.poll() is None, stderr.read()
                    return rows[0] == 1

                wait_for(blocked, "the writer's transaction waits on the locked row", 120, 0.05)
                # the batch's other rows are inserted inside its open transaction: invisible to others
                assert fetch_one(look.execute(f"SELECT count(*) FROM {schema}.records"))[0] == 1
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
            finally:
                if child.poll() is None:
                    child.kill()
            blocker.rollback()
        with psycopg.connect(pg) as conn:
            assert conn.execute(f"SELECT count(*), max(change) FROM {schema}.records").fetchone() == (1, 1)
            assert fetch_one(conn.execute(f"SELECT body FROM {schema}.records"))[0] == Record(**existing).model_dump_json()
        assert len(a) == 1 and a.head == 1
        rerun = subprocess.run(
            [sys.executable, "-c", _WRITER, pg, schema, str(tmp_path / "w"), str(tmp_path / "batch.json")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert rerun.returncode == 0, rerun.stderr
        wait_for(lambda: len(a) == BATCH + 1, "the follower applies the batch written again", 600)
        assert a.records["r-last"].text == "release notes, corrected"


def test_a_writer_whose_turn_never_comes_fails_within_its_bound(tmp_path, pg, chroma, schema, security_policy):
    """A write waits for its turn among the writers, but not for ever: a stalled database (here
    another session holding the writers' lock) fails it at the statement timeout, nothing stored."""
    record = {"doc_id": "r1", "doc_type": "patch_release", "text": "release notes", "scope": {"package": "p"}}
    with CARStore.open(tmp_path / "a", security_policy, chroma_url=chroma, authority_url=pg, authority_schema=schema) as a:
        shared_log(a).statement_timeout_s = 2  # its connections are made at its first write
        with psycopg.connect(pg) as holder:
            holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", shared_log(a)._lock_key)  # held until rollback
            tick = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
                a.ingest([record], progress=False, embeddings=vectors_for([record]))
            assert time.monotonic() - tick >= 2 and len(a) == 0  # it waited for its turn until the bound, then gave up
            holder.rollback()
        assert a.ingest([record], progress=False, embeddings=vectors_for([record])).added == ["r1"]


def test_opening_a_shared_store_says_what_is_wrong(tmp_path, pg, chroma, schema, security_policy, legal_policy):
    with pytest.raises(StoreError, match="no car-rag store at .*schema .*pass a policy"):
        CARStore.open(tmp_path / "x", authority_url=pg, authority_schema=schema)
    with pytest.raises(StoreError, match="Chroma server"):
        CARStore.open(tmp_path / "x", security_policy, authority_url=pg, authority_schema=schema)
    with pytest.raises(ValueError, match="schema must be"):
        CARStore.open(tmp_path / "x", security_policy, authority_url=pg, authority_schema="Robert'); DROP", chroma_url=chroma)
    with pytest.raises(ValueError, match="authority_url"):
        CARStore.open(tmp_path / "x", security_policy, authority_schema=schema)
    CARStore.open(tmp_path / "x", security_policy, authority_url=pg, authority_schema=schema, chroma_url=chroma).close()
    with pytest.raises(StoreError, match="resolves differently"):
        CARStore.open(tmp_path / "y", legal_policy, authority_url=pg, authority_schema=schema)
    wrong = pg.replace("@", "x@", 1) if ":" in pg.split("@")[0][len("postgresql://") :] else pg
    with pytest.raises(psycopg.OperationalError, match=r"cannot reach PostgreSQL at postgresql://postgres:\*\*\*@") as caught:
        CARStore.open(tmp_path / "z", authority_url=wrong, authority_schema=schema)
    assert wrong.split("@")[0].split(":")[-1] not in str(caught.value)  # the password is never shown
