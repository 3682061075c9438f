"""Stage 2 in SQL (``stage2="sql"``, :class:`~car_rag.store.lean.LeanStore`) against the graph in
memory, on one real PostgreSQL + pgvector store (``car_rag.postgres.fixture``), real MiniLM: the
demo corpus plus tenants' records, so that callers, ``as_of`` and filters are exercised too.

Both sides search the same pgvector store with the same BM25 tokens, so everything a result
says must be the same: records, statuses, roles, chains, controllers, order, posterior, links."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, Embedder, Policy
from car_rag.channels.mapped_bm25 import MappedIncrementalBM25Index
from car_rag.cli import main
from car_rag.eligibility import CallerContext, RecordFilter
from car_rag.postgres.fixture import ThrowawayPostgres
from car_rag.retriever import AnchorMode
from car_rag.scope_linking import MappedVocabulary
from car_rag.store import StoreError
from car_rag.store.lean import LeanStore, open_for_queries, stage2_for
from car_rag_evals.stage2_sql import answer_of

CALLERS = (None, CallerContext(tenant="acme", principals={"sec"}), CallerContext(tenant="acme"), CallerContext(tenant="globex"))


def tenant_records(demo: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An acme fix visible to its sec team only, voiding a public disclosure, and a globex copy of it."""
    disclosure = next(r for r in demo if r["doc_type"] == "vulnerability_disclosure")
    fix = {
        "doc_id": "acme-internal-fix",
        "text": f"Internal hotfix for {disclosure['scope']}: backported patch, rolled out to every service.",
        "doc_type": "patch_release",
        "scope": disclosure["scope"],
        "published_at": "2100-01-05",
        "tenant": "acme",
        "allowed_principals": ["sec"],
        "supersedes": [disclosure["doc_id"]],
    }
    return [fix, {**fix, "tenant": "globex", "allowed_principals": []}]


@pytest.fixture(scope="module")
def pg_store(
    postgres: ThrowawayPostgres,
    tmp_path_factory,
    demo_policy: Policy,
    embedder: Embedder,
    demo_corpus_path: Path,
    demo_records: list[dict[str, Any]],
) -> Iterator[str]:
    url = postgres.new_database()
    with CARStore.open(
        tmp_path_factory.mktemp("writer"), demo_policy, embedder=embedder, authority_url=url, vector_store="pgvector"
    ) as store:
        assert store.ingest(demo_corpus_path, progress=False).errors == []
        report = store.ingest(tenant_records(demo_records), progress=False)
        assert report.errors == [] and len(report.added) == 2
    yield url


@pytest.fixture(scope="module")
def both(pg_store, tmp_path_factory, embedder) -> Iterator[tuple[CARStore, LeanStore]]:
    memory = CARStore.open(tmp_path_factory.mktemp("memory"), authority_url=pg_store, embedder=embedder, follow=False)
    lean = LeanStore.open(pg_store, embedder=embedder, follow=False)
    yield memory, lean
    memory.close()
    lean.close()


@pytest.mark.parametrize("anchors", ["hybrid", "bm25", "dense"])
def test_every_demo_query_and_caller_gets_the_in_memory_answer(both, demo_queries, anchors: AnchorMode) -> None:
    memory, lean = both
    assert len(lean) == len(memory) == 47
    in_memory, in_sql = (ControllingAuthorityRetriever(s, anchors=anchors) for s in both)
    for query in demo_queries:
        for caller in CALLERS:
            expected = answer_of(in_memory.retrieve(query["query"], caller))
            assert answer_of(in_sql.retrieve(query["query"], caller)) == expected, (query["query_id"], caller)


def test_the_hidden_fix_is_applied_for_its_readers_only(both, demo_queries) -> None:
    """Not vacuous: the tenants' records change answers, the same way in both modes."""
    _, lean = both
    retriever = ControllingAuthorityRetriever(lean)
    changed = 0
    for query in demo_queries:
        shown = {caller: answer_of(retriever.retrieve(query["query"], caller))["records"] for caller in CALLERS[:2]}
        ids = [[r["doc_id"] for r in records] for records in shown.values()]
        changed += ids[0] != ids[1]
        assert "acme::acme-internal-fix" not in str(ids[0])  # the public reader never sees acme's record
    assert changed > 0


def test_as_of_and_filters_go_through_the_sql_mode(both, demo_queries) -> None:
    in_memory, in_sql = (ControllingAuthorityRetriever(s) for s in both)
    asked: list[dict[str, Any]] = [
        {"as_of": "2099-06-01"},
        {"as_of": "2100-01-01"},
        {"filters": RecordFilter(doc_types=["vulnerability_disclosure"])},
        {"filters": RecordFilter(subjects={"package": ["lodash"]}, since="2099-01-01")},
    ]
    for query in demo_queries:
        for options in asked:
            for caller in CALLERS[:2]:
                expected = answer_of(in_memory.retrieve(query["query"], caller, **options))
                assert answer_of(in_sql.retrieve(query["query"], caller, **options)) == expected, (query["query_id"], options)


def test_a_lean_worker_holds_no_records_and_refuses_what_needs_them(both) -> None:
    _, lean = both
    with pytest.raises(StoreError, match="holds no records"):
        _ = lean.records
    with pytest.raises(StoreError, match="holds no graph"):
        _ = lean.graph
    with pytest.raises(ValueError, match="stage2='memory'"):
        ControllingAuthorityRetriever(lean, resolution="timestamp")


def test_an_insert_is_in_stage_2_at_once_and_in_bm25_after_the_feed(pg_store, tmp_path, demo_policy, embedder) -> None:
    with LeanStore.open(pg_store, embedder=embedder, follow=False) as lean:
        retriever = ControllingAuthorityRetriever(lean)
        query = "Is lodash still vulnerable to CVE-2099-10001?"
        before = retriever.retrieve(query)
        with CARStore.open(tmp_path, authority_url=pg_store, embedder=embedder, follow=False) as writer:
            current = next(r.record for r in before.active if r.record.tenant is None)
            newer = {**current.model_dump(mode="json"), "doc_id": "later-fix"}
            newer.update(published_at="2101-01-01", effective_at=None, supersedes=[current.doc_id])
            assert writer.ingest([newer], progress=False).errors == []
            expected = answer_of(ControllingAuthorityRetriever(writer).retrieve(query))
        after = retriever.retrieve(query)  # before the feed: Stage 2 reads the commit
        assert "later-fix" in [r.doc_id for r in after] and "later-fix" not in lean.lexical.doc_ids
        assert [c.record.doc_id for c in lean.catch_up()] == ["later-fix"]
        assert "later-fix" in lean.lexical.doc_ids and answer_of(retriever.retrieve(query)) == expected


def test_auto_picks_sql_above_the_threshold_only(pg_store, tmp_path, embedder) -> None:
    assert stage2_for(pg_store, None, sql_above=10) == "sql"
    assert stage2_for(pg_store, None, sql_above=10_000) == "memory"
    with open_for_queries(tmp_path, stage2="auto", sql_above=10, authority_url=pg_store, embedder=embedder, follow=False) as s:
        assert isinstance(s, LeanStore)
    with open_for_queries(tmp_path, authority_url=pg_store, embedder=embedder, follow=False) as s:
        assert isinstance(s, CARStore)  # the default threshold is far above 47 records
    with pytest.raises(ValueError, match="stage2 must be one of memory, sql, auto"):
        open_for_queries(tmp_path, stage2="disk", authority_url=pg_store)
    with pytest.raises(StoreError, match="store on PostgreSQL"):
        open_for_queries(tmp_path, stage2="sql")


def test_the_cli_query_answers_the_same_in_both_modes(pg_store, tmp_path, capsys) -> None:
    outputs = []
    mapped = ["--stage2-bm25-folder", str(tmp_path / "bm25")]
    for mode in (["memory"], ["sql"], ["sql", *mapped]):
        code = main(
            ["query", "--store", str(tmp_path), "--authority-url", pg_store, "--stage2", *mode, "--format", "json",
             "Is lodash still vulnerable to CVE-2099-10001?"]
        )  # fmt: skip
        assert code == 0
        said = capsys.readouterr().out
        outputs.append(said[: said.index('"timings_ms"')])
    assert outputs[0] == outputs[1] == outputs[2] and "sec-lodash" in outputs[0]
    assert (tmp_path / "bm25" / "current" / "index.json").is_file()


def test_a_bad_stage2_value_is_refused_by_name(pg_store, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["query", "--store", str(tmp_path), "--authority-url", pg_store, "--stage2", "disk", "lodash"])
    assert exited.value.code == 2 and "--stage2: invalid choice: 'disk'" in capsys.readouterr().err
    code = main(["query", "--store", str(tmp_path), "--authority-url", pg_store, "--stage2-sql-above", "-1", "lodash"])
    assert code == 2 and "--stage2-sql-above must be 0 or more, got -1" in capsys.readouterr().err


def test_car_rag_serve_answers_the_same_with_stage2_sql_and_refuses_writes(pg_store, tmp_path) -> None:
    """Real `car-rag serve` processes, one per mode, over the same store: the same /retrieve answers
    (records with their stored supersedes as a caller may see them), and POST /records refused by a
    sql-mode server with the reason, nothing stored; /explain refused by it (501), naming the mode that serves it."""
    import httpx

    from car_rag_evals.servers import car_rag_serve

    asks = [
        {"query": "Is lodash still vulnerable to CVE-2099-10001?", "k": 10, "with_records": True},
        {"query": "Is lodash still vulnerable to CVE-2099-10001?", "k": 10, "with_records": True,
         "caller": {"tenant": "acme", "principals": ["sec"]}},
        {"query": "Can a long string of spaces passed to lodash trim still cause a ReDoS?", "as_of": "2099-06-01"},
    ]  # fmt: skip
    answers = {}
    for mode in ("memory", "sql"):
        options = ("--store", str(tmp_path / mode), "--authority-url", pg_store, "--stage2", mode)
        with car_rag_serve(tmp_path, *options) as url:
            said = [httpx.post(f"{url}/retrieve", json=ask, timeout=60).json() for ask in asks]
            for answer in said:
                answer["diagnostics"].pop("timings_ms")
            answers[mode] = said
            if mode == "sql":
                refused = httpx.post(f"{url}/records", json=[{"doc_id": "x", "text": "t", "doc_type": "patch_release"}])
                assert refused.status_code == 503 and "Stage 2 in SQL" in refused.json()["detail"]
                unexplained = httpx.post(f"{url}/explain", json={"doc_id": "GHSA-demo-0001"})
                assert unexplained.status_code == 501 and "--stage2 memory" in unexplained.json()["detail"]
    for sql, memory in zip(answers["sql"], answers["memory"]):
        assert [key for key in memory if sql.get(key) != memory[key]] == [] and memory["reranked"]


def test_bm25_mapped_from_a_folder_answers_as_in_memory_and_follows_inserts(pg_store, demo_queries, tmp_path, embedder) -> None:
    """``bm25_folder``: BM25 memory-mapped (the store's backend, :mod:`car_rag.channels.mapped_bm25`),
    the same answers; a second worker maps the saved index without rebuilding it; the feed adds an
    insert, and loads again for a replaced record."""
    folder = tmp_path / "bm25"
    with (
        CARStore.open(tmp_path / "memory", authority_url=pg_store, embedder=embedder, follow=False) as memory,
        LeanStore.open(pg_store, embedder=embedder, follow=False, bm25_folder=folder) as mapped,
    ):
        assert isinstance(mapped.lexical, MappedIncrementalBM25Index) and isinstance(mapped.lexical._docs, np.memmap)
        assert isinstance(mapped.vocabulary, MappedVocabulary) and len(mapped.vocabulary) > 0
        assert len(mapped) == len(memory)
        in_memory, in_sql = ControllingAuthorityRetriever(memory), ControllingAuthorityRetriever(mapped)
        for query in demo_queries:
            for caller in CALLERS:
                expected = answer_of(in_memory.retrieve(query["query"], caller))
                assert answer_of(in_sql.retrieve(query["query"], caller)) == expected, (query["query_id"], caller)
            for options in ({"as_of": "2099-06-01"}, {"filters": RecordFilter(doc_types=["vulnerability_disclosure"])}):
                expected = answer_of(in_memory.retrieve(query["query"], CALLERS[1], **options))
                assert answer_of(in_sql.retrieve(query["query"], CALLERS[1], **options)) == expected, (query["query_id"], options)
        built = (folder / "current").resolve()
        with LeanStore.open(pg_store, embedder=embedder, follow=False, bm25_folder=folder) as second:
            assert (folder / "current").resolve() == built and second.lexical.doc_ids == mapped.lexical.doc_ids
        with CARStore.open(tmp_path / "writer", authority_url=pg_store, embedder=embedder, follow=False) as writer:
            extra = {
                "doc_id": "mapped-extra",
                "text": "Quokka advisory: no other record names them.",
                "doc_type": "patch_release",
            }
            assert writer.ingest([extra], progress=False).errors == []
            assert [c.record.doc_id for c in mapped.catch_up()] == ["mapped-extra"]
            assert [h.doc_id for h in mapped.lexical.search("quokka", 5)] == ["mapped-extra"]  # added (in the heap)
            assert (
                writer.ingest([{**extra, "doc_id": "mapped-scoped", "scope": {"package": "wallaby-kit"}}], progress=False).errors
                == []
            )
            mapped.catch_up()
            assert mapped.vocabulary.named_by("is wallaby-kit fixed?") == {("package", "wallaby-kit")}
            expected = answer_of(ControllingAuthorityRetriever(writer).retrieve("quokka advisory"))
            assert answer_of(in_sql.retrieve("quokka advisory")) == expected
            assert writer.ingest([{**extra, "text": "Quokka advisory, revised: wombats too."}], progress=False).errors == []
            mapped.catch_up()  # a record replaced: loaded again, from the build (which never held it) caught up
            assert [h.doc_id for h in mapped.lexical.search("wombat", 5)] == ["mapped-extra"]
            assert (folder / "current").resolve() == built


def test_bm25_folder_is_refused_for_a_backend_it_cannot_map(pg_store, tmp_path) -> None:
    from car_rag.postgres import PostgresRecordLog
    from car_rag.store.config import checked

    shared = PostgresRecordLog(pg_store)
    stored = shared.setup(None)
    assert stored is not None
    config, _ = checked(stored, shared.location, None, vector_store=None, chroma_url=None)
    with pytest.raises(StoreError, match="rank-bm25 BM25 backend, which cannot be memory-mapped"):
        LeanStore(shared, {**config, "bm25_backend": "rank-bm25"}, bm25_folder=tmp_path)
    shared.close()


def test_workers_build_a_folder_once_and_a_build_behind_the_log_is_caught_up_from_it(pg_store, tmp_path, embedder) -> None:
    """Workers opening together on an empty ``bm25_folder`` build it once (its build lock); a build
    stamped with an older change is caught up with the records committed after it (not rebuilt),
    BM25 and the vocabulary; a record written again since makes the next worker rebuild BM25."""
    folder = tmp_path / "bm25"
    early = {"doc_id": "in-the-build", "text": "Bilby pre-advisory, in the build.", "doc_type": "vulnerability_disclosure"}
    with CARStore.open(tmp_path / "writer", authority_url=pg_store, embedder=embedder, follow=False) as writer:
        assert writer.ingest([early], progress=False).errors == []
    opened: list[LeanStore] = []
    workers = [
        threading.Thread(
            target=lambda: opened.append(LeanStore.open(pg_store, embedder=embedder, follow=False, bm25_folder=folder))
        )
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(opened) == 2 and opened[0].lexical.doc_ids == opened[1].lexical.doc_ids
    assert len(list(folder.glob("index-*"))) == 1 and len(list((folder / "vocabulary").glob("index-*"))) == 1
    for store in opened:
        store.close()
    built, vocabulary = (folder / "current").resolve(), (folder / "vocabulary" / "current").resolve()
    with CARStore.open(tmp_path / "writer", authority_url=pg_store, embedder=embedder, follow=False) as writer:
        late = {
            "doc_id": "behind-the-build",
            "text": "Numbat advisory, committed after the build.",
            "doc_type": "patch_release",
            "scope": {"package": "numbat-kit"},
        }
        assert writer.ingest([late], progress=False).errors == []
        in_memory = ControllingAuthorityRetriever(writer)
        with LeanStore.open(pg_store, embedder=embedder, follow=False, bm25_folder=folder) as caught:
            assert (folder / "current").resolve() == built and (folder / "vocabulary" / "current").resolve() == vocabulary
            assert len(caught) == len(writer) and [h.doc_id for h in caught.lexical.search("numbat", 5)] == ["behind-the-build"]
            assert caught.vocabulary.named_by("is numbat-kit fixed?") == {("package", "numbat-kit")}
            for query in ("numbat advisory", "is numbat-kit fixed?"):
                assert answer_of(ControllingAuthorityRetriever(caught).retrieve(query)) == answer_of(in_memory.retrieve(query))
        assert writer.ingest([{**early, "text": "Bilby pre-advisory, revised: echidnas too."}], progress=False).errors == []
        with LeanStore.open(pg_store, embedder=embedder, follow=False, bm25_folder=folder) as rebuilt:
            assert (folder / "current").resolve() != built
            assert [h.doc_id for h in rebuilt.lexical.search("echidna", 5)] == ["in-the-build"]
            query = "bilby echidnas advisory"
            assert answer_of(ControllingAuthorityRetriever(rebuilt).retrieve(query)) == answer_of(in_memory.retrieve(query))
