"""The perf store's copies (``car_rag_evals.perf.copies``) on a real PostgreSQL with pgvector and real
MiniLM: copy 0 is the source, every other copy is a store's worth of its own records (ids, chains,
scope values, vectors near the source's) under the source's indexes, and a package a question names
reaches the records of every ``variants``-th copy through a sql-mode worker's closure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psycopg

from car_rag import Embedder, Policy
from car_rag.postgres.fixture import throwaway_postgres
from car_rag.records import Record
from car_rag.store.lean import LeanStore
from car_rag_evals.perf.bulk_load import BulkLoader, create_store, stored_rows
from car_rag_evals.perf.copies import copy_store
from car_rag_evals.perf.corpus import generate, gist_vectors

SIZE, COPIES, VARIANTS = 300, 3, 2


def _indexes(url: str, schema: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY indexname", (schema,)).fetchall()
    return [definition.replace(f" {schema}.", " <schema>.") for (definition,) in rows]


def test_copies_make_a_store_of_their_own_records(tmp_path: Path, security_policy: Policy, embedder: Embedder) -> None:
    corpus = generate(SIZE)
    vectors = gist_vectors(corpus, embedder)
    with throwaway_postgres() as pg:
        create_store(pg.url, "source", security_policy, tmp_path / "source", embedder)
        BulkLoader(pg.url, "source", security_policy).load(corpus.records, vectors)
        made = copy_store(pg.url, "source", "copies", COPIES, variants=VARIANTS)
        source, copies = stored_rows(pg.url, "source"), stored_rows(pg.url, "copies")
        assert made["records"] == len(copies["records"]) == COPIES * SIZE
        assert [row for row in copies["records"] if "#" not in row[0]] == source["records"]
        assert copies["store"] == source["store"] and _indexes(pg.url, "copies") == _indexes(pg.url, "source")
        assert len({row[1] for row in copies["records"]}) == len({row[2] for row in copies["records"]}) == COPIES * SIZE
        first = {row[0]: row for row in source["records"]}
        for k in range(1, COPIES):
            suffix = f"#{k}"
            assert sorted(e for e in copies["edges"] if e[1].endswith(suffix)) == sorted(
                (s + suffix, t + suffix, rule, c) for s, t, rule, c in source["edges"]
            )
            for doc_id, _, _, fingerprint, body, vector, *_ in (r for r in copies["records"] if r[0].endswith(suffix)):
                record, original = Record.model_validate_json(body), Record.model_validate_json(first[doc_id[: -len(suffix)]][4])
                assert record.fingerprint() == fingerprint and record.text == original.text
                assert record.supersedes == [d + suffix for d in original.supersedes]
                package = original.scope["package"] + (f"~{k % VARIANTS}" if k % VARIANTS else "")
                assert record.scope["package"] == package
                mine, theirs = np.frombuffer(vector, "<f4"), np.frombuffer(first[original.doc_id][5], "<f4")
                assert abs(float(np.linalg.norm(mine)) - 1) < 1e-5 and 0.8 < float(mine @ theirs) < 1
        package = Record.model_validate_json(source["records"][0][4]).scope["package"]
        holding = {row[2] for row in source["scope_index"] if row[:2] == ("package", package)}
        with LeanStore.open(pg.url, "copies", embedder=embedder, follow=False) as lean, lean._connection() as conn:
            reached = set(lean.closure.graph(conn, [], [("package", package)]).records)
        assert holding | {d + "#2" for d in holding} <= reached and not any(d.endswith("#1") for d in reached)
