"""as_of and filters on a real store (Chroma, MiniLM): compiled into every channel, never a
top k filtered afterwards, whether the vectors are searched exactly from memory or by Chroma's
own HNSW index under a ``where``; and through ``/retrieve``."""

from __future__ import annotations

import json

import httpx
import pytest

from car_rag import CARStore, ControllingAuthorityRetriever
from car_rag.cli import main
from car_rag.demo import demo_files
from car_rag.eligibility import RecordFilter
from car_rag.evidence import render_audit, render_plain, render_reader
from car_rag.serve.service import Service
from car_rag_evals.servers import serving
from helpers_records import retrieved

QUESTION = "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?"
DISCLOSURE, PATCH = "sec-lodash-cve-2099-10001-disclosure", "sec-lodash-4.17.12-release"
K = 5


@pytest.fixture(scope="module")
def shelved(tmp_path_factory, demo_policy, embedder):
    """The demo corpus with a metadata ``shelf``: "top" on the records an unfiltered question's
    top k and every channel's first ``K`` hits hold, "rest" on the others."""
    store = CARStore.open(tmp_path_factory.mktemp("shelved"), demo_policy, embedder=embedder)
    records = [json.loads(line) for line in demo_files()[0].read_text(encoding="utf-8").splitlines() if line.strip()]
    assert store.ingest(records, progress=False).errors == []
    retriever = ControllingAuthorityRetriever(store, k1=3, depth=K)
    runs = retriever.channel_runs(QUESTION)
    top = set(retriever.retrieve(QUESTION).doc_ids(K)) | {h.doc_id for hits in runs.values() for h in hits}
    shelves = [{**r, "metadata": {"shelf": "top" if r["doc_id"] in top else "rest"}} for r in records]
    assert store.ingest(shelves, progress=False).errors == []
    yield store, top
    store.close()


@pytest.mark.parametrize("engine", ["exact", "chroma-hnsw"])
def test_a_filter_excluding_every_top_hit_still_returns_k_records_from_every_channel(shelved, engine):
    store, top = shelved
    if engine == "chroma-hnsw":
        store.dense.exact_limit = 0  # Chroma's HNSW index answers, under the gate's where
    try:
        retriever = ControllingAuthorityRetriever(store, k1=K, depth=K)
        rest = RecordFilter(metadata={"shelf": "rest"})
        runs = retriever.channel_runs(QUESTION, filters=rest)
        assert store.dense.exact == (engine == "exact")
        for channel, hits in runs.items():
            assert len(hits) == K, channel  # pre-filtered: never a top k with the excluded removed
            assert not {h.doc_id for h in hits} & top, channel
        result = retriever.retrieve(QUESTION, filters=rest)
        assert len(result.top(K)) == K and not set(result.doc_ids()) & top
        assert all(r.record.metadata["shelf"] == "rest" for r in result)
        assert result.to_dict()["filters"] == {"metadata": {"shelf": "rest"}}
    finally:
        store.dense.exact_limit = 20_000
        store.dense.load(list(store.records))


@pytest.mark.parametrize("engine", ["exact", "chroma-hnsw"])
def test_as_of_before_the_patch_finds_the_disclosure_in_force(shelved, engine):
    store, _ = shelved
    if engine == "chroma-hnsw":
        store.dense.exact_limit = 0
    try:
        retriever = ControllingAuthorityRetriever(store, k1=3, depth=10)
        now = retriever.retrieve(QUESTION)
        assert retrieved(now, DISCLOSURE).status == "superseded" and retrieved(now, PATCH).status == "active"
        then = retriever.retrieve(QUESTION, as_of="2024-03-18")  # the patch came out on 2024-03-19
        assert then.get(PATCH) is None and retrieved(then, DISCLOSURE).status == "active"
        assert then.to_dict()["as_of"] == "2024-03-18"
        assert all(r.record.time is None or r.record.time.date().isoformat() <= "2024-03-18" for r in then)
        assert all(h.doc_id != PATCH for hits in retriever.channel_runs(QUESTION, as_of="2024-03-18").values() for h in hits)
        on_the_day = retriever.retrieve(QUESTION, as_of="2024-03-19")  # a day counts to its end
        assert retrieved(on_the_day, DISCLOSURE).status == "superseded"
    finally:
        store.dense.exact_limit = 20_000
        store.dense.load(list(store.records))


def test_a_filtered_out_superseder_still_voids(shelved):
    store, _ = shelved
    retriever = ControllingAuthorityRetriever(store, k1=3, depth=10)
    disclosures = RecordFilter(doc_types=["vulnerability_disclosure"])
    got = retriever.retrieve(QUESTION, filters=disclosures)
    assert got.get(PATCH) is None
    voided = retrieved(got, DISCLOSURE)
    assert voided.status == "superseded" and voided.filtered_superseder and not voided.hidden_superseder
    assert not voided.displaced  # nothing shown stands in for it: it keeps its place
    assert "replaced by a record this query's filters leave out" in render_plain(got)
    assert "not permitted" not in render_plain(got) + render_reader(got) + render_audit(got)
    assert "superseded by a record this query's filters leave out" in render_audit(got)
    assert next(r for r in got.to_dict()["records"] if r["doc_id"] == DISCLOSURE)["filtered_superseder"] is True


@pytest.fixture(scope="module")
def url(shelved):
    store, _ = shelved
    with serving(Service(store, timeout_ms=20_000)) as base:
        yield base


def test_retrieve_takes_as_of_and_filters_in_the_rfc_shape(url, shelved):
    store, _ = shelved
    body = {
        "query": QUESTION,
        "k": K,
        "format": "reader",
        "as_of": "2024-03-18",
        "filters": {
            "date_range": {"from": "2024-01-01"},
            "metadata": {"shelf": "rest"},
            "doc_types": ["vulnerability_disclosure"],
        },
    }
    got = httpx.post(f"{url}/retrieve", json=body, timeout=60)
    assert got.status_code == 200, got.text
    answer = got.json()
    assert answer["as_of"] == "2024-03-18"
    assert answer["filters"] == {
        "date_range": {"from": "2024-01-01", "to": None},
        "doc_types": ["vulnerability_disclosure"],
        "metadata": {"shelf": "rest"},
    }
    eligible = {
        r.doc_id
        for r in store.records.values()
        if r.doc_type == "vulnerability_disclosure"
        and "2024-01-01" <= r.published_at.date().isoformat() <= "2024-03-18"
        and r.metadata["shelf"] == "rest"
    }
    assert eligible and {r["doc_id"] for r in answer["reranked"]} <= eligible
    assert len(answer["reranked"]) == min(K, len(eligible))
    assert '<as-of date="2024-03-18">As of 2024-03-18' in answer["evidence_pack"]["text"]
    plain = httpx.post(f"{url}/retrieve", json={"query": QUESTION}, timeout=60).json()
    assert "as_of" not in plain and "filters" not in plain


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        ({"as_of": "yesterday"}, "as_of: cannot read 'yesterday' as a date"),
        ({"filters": {"date_range": {"from": "2024-05-01", "to": "2024-04-01"}}}, "filters.date_range: from 2024-05-01 is after"),
        ({"filters": {"courts": ["ca9"]}}, "filters.courts: unknown filter field"),
        ({"filters": {"subjects": {"court": ["ca9"]}}}, "filters.subjects.court: not a scope key"),
    ],
)
def test_retrieve_refuses_a_bad_date_or_filter_with_a_400_naming_it(url, shelved, asked, says):
    store, _ = shelved
    before = json.dumps(sorted(r.model_dump_json() for r in store.records.values()))
    got = httpx.post(f"{url}/retrieve", json={"query": QUESTION, **asked}, timeout=60)
    assert got.status_code == 400 and says in got.json()["detail"], got.text
    assert json.dumps(sorted(r.model_dump_json() for r in store.records.values())) == before


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--as-of", "2024-13-01"], "--as-of: cannot read '2024-13-01' as a date"),
        (["--since", "2024-05-01", "--until", "2024-04-01"], "--since/--until: from 2024-05-01 is after to 2024-04-01"),
        (["--until", "someday"], "--until: cannot read 'someday'"),
        (["--filter", "court=ca9"], "--filter court=ca9: unknown filter field 'court'"),
        (["--filter", "doc_type"], "--filter doc_type: expected KEY=VALUE"),
    ],
)
def test_query_refuses_a_bad_date_or_filter_with_a_usage_error_naming_it(shelved, capsys, argv, says):
    store, _ = shelved
    assert main(["query", "--store", str(store.path), QUESTION, *argv]) == 2
    assert says in capsys.readouterr().err


def test_query_as_of_and_filters_on_the_command_line(shelved, capsys):
    store, _ = shelved
    argv = [
        "query",
        "--store",
        str(store.path),
        QUESTION,
        "--as-of",
        "2024-03-18",
        "--filter",
        "package=lodash",
        "--format",
        "json",
    ]
    assert main(argv) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["as_of"] == "2024-03-18" and answer["filters"] == {"subjects": {"package": ["lodash"]}}
    assert [r["doc_id"] for r in answer["records"]] == [DISCLOSURE]  # the only lodash record dated by then
    assert main(["query", "--store", str(store.path), QUESTION, "--as-of", "2024-03-18", "--k", "2"]) == 0
    assert capsys.readouterr().out.startswith("as of 2024-03-18\n")
