"""as_of and filters in the core: how a date is read, what a filter keeps and refuses, the
graph as of a date (an exception revoked later, a chain through a later record), and the
evidence forms saying the date. Real policies and graphs; Stage 1 from a memory store."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from car_rag import load_policy
from car_rag import retriever as retriever_module
from car_rag.eligibility import CallerContext, Gate, RecordFilter, as_of_label, filter_of, instant
from car_rag.evidence import render_audit, render_plain, render_reader
from car_rag.graph import AuthorityGraph
from car_rag.records import Record
from car_rag.resolution import Anchor, resolve_authority
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag_evals.memory_store import MemoryStore
from helpers_records import day, rec, retrieved

SEC = load_policy("sec-204a1")
TRADE = {"employee": "E1", "ticker": "ACME"}


def test_a_day_means_its_end_and_a_range_starts_at_its_first_instant():
    assert instant("2019-06-01") == datetime(2019, 6, 1, 23, 59, 59, 999999, tzinfo=UTC)
    assert instant(date(2019, 6, 1)) == instant("2019-06-01")
    assert instant("2019-06-01T09:00:00") == datetime(2019, 6, 1, 9, tzinfo=UTC)  # a time without a zone is UTC
    assert RecordFilter(since="2019-06-01").since == datetime(2019, 6, 1, tzinfo=UTC)
    assert as_of_label(instant("2019-06-01")) == "2019-06-01"
    assert as_of_label(instant("2019-06-01T09:00:00+00:00")) == "2019-06-01T09:00:00+00:00"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (lambda: instant("2019-02-30"), "as_of: cannot read '2019-02-30' as a date"),
        (lambda: instant("next tuesday"), "as_of: cannot read 'next tuesday'"),
        (lambda: RecordFilter(since="2020-01-01", until="2019-01-01"), "date_range: from 2020-01-01 is after to 2019-01-01"),
        (lambda: filter_of({"courts": ["ca9"]}, ["case"]), "filters.courts: unknown filter field"),
        (lambda: filter_of({"subjects": {"court": ["ca9"]}}, ["case"]), "filters.subjects.court: not a scope key of the policy"),
        (lambda: filter_of({"sources": "ca9"}, ["case"]), "filters.sources: expected a list of strings"),
        (lambda: filter_of({"date_range": {"from": "soon"}}, ["case"]), "filters.date_range.from: cannot read 'soon'"),
        (lambda: filter_of({"date_range": {"since": "2019-01-01"}}, ["case"]), "filters.date_range: expected"),
        (lambda: filter_of({"metadata": {"k": [1]}}, ["case"]), "filters.metadata.k: expected a string, number or boolean"),
    ],
)
def test_bad_dates_and_filters_are_refused_naming_the_field(bad, says):
    with pytest.raises(ValueError, match=None) as raised:
        bad()
    assert says in str(raised.value)


def test_a_filter_keeps_what_every_part_allows():
    ruling = rec("r", "ruling", at=10, source="ca9", scope={"case": "c1"}, metadata={"panel": 3, "en_banc": True})
    assert RecordFilter(sources=["ca9"], doc_types=["ruling"], subjects={"case": ["c1", "c2"]}).matches(ruling)
    assert not RecordFilter(sources=["ca2"]).matches(ruling)
    assert not RecordFilter(subjects={"case": ["c2"]}).matches(ruling)
    assert RecordFilter(metadata={"panel": 3, "en_banc": True}).matches(ruling)
    assert not RecordFilter(metadata={"en_banc": 1}).matches(ruling)  # true is not 1
    assert not RecordFilter(metadata={"panel": "3"}).matches(ruling)
    assert not RecordFilter(since="2000-01-01").matches(rec("undated"))  # no date: in no range
    assert Gate(as_of=instant("2000-01-01")).can_read(rec("undated"))  # but exists at every date


def test_the_gate_compiles_to_one_chroma_where_and_leaves_a_caller_alone_as_it_was():
    caller = CallerContext("acme", {"analyst"})
    assert Gate(caller).chroma_where() == caller.chroma_where()
    where = Gate(caller, instant("2019-06-01"), RecordFilter(doc_types=["ruling"], metadata={"k": "v"})).chroma_where()
    assert where == {
        "$and": [
            caller.chroma_where(),
            {"car_time": {"$lte": instant("2019-06-01").timestamp()}},
            {"doc_type": {"$in": ["ruling"]}},
            {"k": "v"},
        ]
    }


def day_of(n: int) -> datetime:
    """The end of day ``n`` of helpers_records' calendar (what a query as of that day means)."""
    return instant(day(n).date())


def trading(doc_id: str, doc_type: str, day: int) -> Record:
    return rec(doc_id, doc_type, at=day, scope=TRADE)


def test_an_exception_revoked_later_suspends_its_target_until_the_revocation():
    graph = AuthorityGraph(SEC)
    for record in (
        trading("blackout", "blackout_announced", 0),
        trading("exception", "trading_exception_granted", 10),
        trading("revocation", "trading_exception_revoked", 20),
    ):
        graph.add(record)

    def status(day: int) -> dict[str, str]:
        view = graph.as_of(day_of(day))
        hits = [Anchor(d, rank) for rank, d in enumerate(("blackout", "exception", "revocation"), 1) if d in view]
        return {r.doc_id: r.status for r in resolve_authority(view, SEC, "blackout", hits)}

    assert status(5) == {"blackout": "active"}
    assert status(15) == {"blackout": "superseded", "exception": "active"}
    assert status(25) == {"blackout": "active", "exception": "superseded", "revocation": "active"}


def test_supersession_does_not_pass_through_a_record_that_did_not_exist_yet():
    legal = load_policy("legal-precedent")
    graph = AuthorityGraph(legal)
    graph.add(rec("c", "ruling_issued", at=0, scope={"case": "x"}))
    graph.add(rec("b", "ruling_issued", at=20, scope={"case": "y"}, supersedes=["c"]))
    graph.add(rec("a", "ruling_issued", at=10, scope={"case": "z"}, supersedes=["b"]))
    assert graph.ancestors("c") == {"a", "b"}
    assert graph.as_of(day_of(15)).ancestors("c") == set()
    with pytest.raises(TypeError, match="read-only"):
        graph.as_of(instant("2030-01-01")).add(rec("e"))


def test_every_evidence_form_says_the_date():
    store = MemoryStore(SEC, [trading("blackout", "blackout_announced", 0), trading("lifted", "blackout_lifted", 30)])
    result = ControllingAuthorityRetriever(store, anchors="bm25").retrieve("blackout ACME E1", as_of="2024-01-11")  # type: ignore[arg-type]
    assert result.get("lifted") is None and retrieved(result, "blackout").status == "active"
    assert result.to_dict()["as_of"] == "2024-01-11"
    assert render_plain(result).startswith("As of 2024-01-11: these records are the authority as it stood then")
    for form in (render_reader(result), render_audit(result)):
        assert '<as-of date="2024-01-11">As of 2024-01-11:' in form
    now = ControllingAuthorityRetriever(store, anchors="bm25").retrieve("blackout ACME E1")  # type: ignore[arg-type]
    assert "as_of" not in now.to_dict() and "As of" not in render_plain(now) + render_reader(now) + render_audit(now)


def test_the_mask_cache_keeps_within_its_bytes_and_answers_as_a_fresh_retriever(monkeypatch):
    """A mask is a byte per record (64 of them would hold 640 MB at 10M records): the cache keeps
    as many as MASK_BYTES allows, here two, and dropping one changes no answer."""
    store = MemoryStore(SEC, [trading("blackout", "blackout_announced", 0), trading("lifted", "blackout_lifted", 30)])
    monkeypatch.setattr(retriever_module, "MASK_BYTES", 2 * len(store.lexical.doc_ids))
    kept = ControllingAuthorityRetriever(store, anchors="bm25")  # type: ignore[arg-type]
    for n in (5, 10, 40, 45, 10, 5):
        as_of = day_of(n)
        got = kept.retrieve("blackout ACME E1", as_of=as_of)
        fresh = ControllingAuthorityRetriever(store, anchors="bm25").retrieve("blackout ACME E1", as_of=as_of)  # type: ignore[arg-type]
        assert {**got.to_dict(), "timings_ms": None} == {**fresh.to_dict(), "timings_ms": None}
        assert len(kept._masks) <= 2
