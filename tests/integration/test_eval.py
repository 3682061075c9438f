"""Eval library: Wilson intervals, TCA semantics, the answer reader, the audit, the runner."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from car_rag import load_policy
from car_rag.adapters import AuthorityGraph
from car_rag.eval import audit_retriever, audit_set, doc_ids_of, score_query, summarise, wilson
from car_rag.queries import Query
from car_rag.records import Record
from car_rag_evals.bench import run_suite, write_results
from car_rag_evals.suites import CVE_ANSWER, FINSUPERQA_ANSWER, custom_suite, load_suite

DEMO = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"


def test_wilson_matches_known_values():
    lo, hi = wilson(155, 159)
    assert (round(lo, 3), round(hi, 3)) == (0.937, 0.990)
    assert wilson(0, 10)[0] == 0.0 and 0.0 < wilson(0, 10)[1] < 0.35
    assert wilson(10, 10)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)


# --------------------------------------------------------------------------- FinSuperQA-like chain


def _fin(doc_id, doc_type, day, employee="EMP1-A", ticker="XYZ"):
    return Record.model_validate(
        dict(
            doc_id=doc_id,
            text=doc_id,
            doc_type=doc_type,
            scope={"employee": employee, "ticker": ticker},
            published_at=f"2024-01-{day:02d}T09:00:00",
        )
    )


@pytest.fixture(scope="module")
def fin():
    policy = load_policy(str(resources.files("car_rag_evals") / "policies" / "finsuperqa.toml"))
    records = {
        r.doc_id: r
        for r in [
            _fin("pc", "pre_clearance_approved", 1),
            _fin("ba", "blackout_announced", 3),
            _fin("ee", "emergency_exception", 5),
            _fin("pc-late", "pre_clearance_approved", 4),
            _fin("other", "policy_acknowledged", 2, ticker="ABC"),
            _fin("bl", "blackout_lifted", 6),
        ]
    }
    graph = AuthorityGraph(policy)
    for record in records.values():
        graph.add(record)
    query = Query(
        query_id="q",
        query="Can EMP1-A trade XYZ?",
        gold_doc_ids=["ee"],
        anchor_doc_ids=["pc"],
        chain_doc_ids=["pc", "ba", "ee"],
        hop_type="T2",
        answer="compliant",
    )
    return policy, records, graph, query


def _score(fin, ranked, anchors=None):
    policy, records, graph, query = fin
    return score_query(
        query, ranked, k=3, records=records, kb=graph, policy=policy, answer_rule=FINSUPERQA_ANSWER, anchors=anchors
    )


def test_full_chain_in_top_k_is_tca(fin):
    score = _score(fin, ["ee", "ba", "pc", "other"])
    assert score.tca and score.tca_answer and score.answer == "compliant" and score.no_ignored_superseder
    assert score.provenance_recall == 1.0 and score.gold_rank == 1 and score.reciprocal_rank == 1.0


def test_superseded_record_without_its_superseder_is_an_ignored_superseder(fin):
    score = _score(fin, ["pc", "other", "x"])
    assert not score.tca and not score.tca_answer and score.ignored == ["pc"] and score.answer == "active"


def test_supersession_is_transitive_for_no_ignored_superseder(fin):
    # pc is voided by ba, and transitively by ee: ee in the top k covers it (Definition 7).
    score = _score(fin, ["ee", "pc", "other"])
    assert score.no_ignored_superseder and score.tca and score.tca_answer and score.answer == "compliant"


def test_right_answer_with_an_ignored_superseder_is_not_tca(fin):
    # ba shown without ee: the reader still says non_compliant (wrong) and ba is ignored.
    score = _score(fin, ["ba", "pc", "other"])
    assert score.answer == "non_compliant" and score.ignored == ["ba"] and not score.tca and not score.tca_answer


def test_an_active_same_scope_record_can_make_the_answer_wrong_while_tca_holds(fin):
    # The contaminated-T3 pattern: the chain pc < ba < bl is complete in the top k, but a
    # second pre-clearance granted after the blackout is active under R1-R10, so a
    # rule-following reader answers 'active' where the label says 'non_compliant'.
    policy, records, graph, query = fin
    t3 = query.model_copy(update={"gold_doc_ids": ["bl"], "chain_doc_ids": ["pc", "ba", "bl"], "answer": "non_compliant"})
    score = score_query(
        t3, ["bl", "ba", "pc", "pc-late"], k=4, records=records, kb=graph, policy=policy, answer_rule=FINSUPERQA_ANSWER
    )
    assert score.tca and score.answer == "active" and score.tca_answer is False


def test_reader_applies_rules_among_what_it_sees(fin):
    # A later pre-clearance (after the blackout) is not voided by it: the reader says 'active'.
    score = _score(fin, ["ba", "ee", "pc-late"])
    assert score.answer == "compliant"  # the exception outranks an active clearance
    policy, records, graph, query = fin
    t1 = query.model_copy(update={"gold_doc_ids": ["ba"], "chain_doc_ids": ["pc", "ba"], "answer": "non_compliant"})
    seen = score_query(t1, ["ba", "pc-late", "pc"], k=3, records=records, kb=graph, policy=policy, answer_rule=FINSUPERQA_ANSWER)
    assert seen.answer == "non_compliant" and seen.tca
    out_of_scope = score_query(t1, ["other", "pc"], k=2, records=records, kb=graph, policy=policy, answer_rule=FINSUPERQA_ANSWER)
    assert out_of_scope.answer == "active"  # 'other' is another ticker: not read


def test_kb_metrics(fin):
    score = _score(fin, ["pc", "ba", "other"])
    # pc and ba are both superseded in the corpus graph; their latest (ee) is not shown.
    assert score.orr == pytest.approx(2 / 3)
    assert score.lvr == pytest.approx(1 / 3)  # only 'other' (active) has its latest shown
    assert score.crr == pytest.approx(2 / 3) and score.cd == pytest.approx(1 / 3)


def test_summary_breaks_down_by_hop_type(fin):
    policy, records, graph, query = fin
    t0 = query.model_copy(update={"query_id": "t0", "hop_type": "T0", "chain_doc_ids": ["other"], "gold_doc_ids": ["other"]})
    scores = [
        _score(fin, ["ee", "ba", "pc"]),
        score_query(t0, ["pc"], k=3, records=records, kb=graph, policy=policy, answer_rule=None),
    ]
    summary = summarise(scores)
    assert summary["n"] == 2 and summary["tca"]["successes"] == 1 and summary["tca_answer"]["n"] == 1
    assert set(summary["by_hop"]) == {"T0", "T2"} and summary["by_hop"]["T2"]["tca"]["value"] == 1.0


def test_cve_answer_rule():
    rec = lambda i, t: Record(doc_id=i, text=i, doc_type=t)  # noqa: E731
    assert CVE_ANSWER.answer([rec("d", "cve_disclosed"), rec("p", "patch_released")]) == "patched"
    assert CVE_ANSWER.answer([rec("d", "cve_disclosed")]) == "vulnerable"
    assert CVE_ANSWER.answer([]) == "no_active_record"


# --------------------------------------------------------------------------- audit


def test_audit_set_reports_closure_violations(fin):
    _, _, graph, _ = fin
    report = audit_set(["pc", "other", "ghost"], graph, anchor="pc")
    assert report.superseded == ["pc"] and report.unknown == ["ghost"]
    assert [(v.doc_id, v.controlling) for v in report.violations] == [("pc", ("bl", "ee"))]
    assert report.frontier_included is False and report.theorem4 is False
    assert audit_set(["ee", "pc"], graph, anchor="pc").theorem4 is True


def test_doc_ids_of_reads_framework_objects():
    schema = pytest.importorskip("llama_index.core.schema")
    documents = pytest.importorskip("langchain_core.documents")
    nodes = [schema.NodeWithScore(node=schema.TextNode(text="t", metadata={"doc_id": "a"}), score=1.0)]
    docs = [documents.Document(page_content="t", metadata={"doc_id": "b"})]
    assert doc_ids_of(nodes) == ["a"] and doc_ids_of(docs) == ["b"] and doc_ids_of(["c"]) == ["c"]
    with pytest.raises(ValueError, match="doc_id"):
        doc_ids_of([documents.Document(page_content="t")])


def test_audit_retriever_wraps_any_callable(fin):
    _, _, graph, _ = fin
    answers = {"q1": ["pc", "other"], "q2": ["ee", "ba", "pc"]}
    audit = audit_retriever(lambda q: answers[q], [("q1", "pc"), ("q2", "pc")], graph, k=3)
    assert audit.queries == 2 and audit.sets_with_superseded == 2 and audit.sets_with_violations == 1
    assert audit.theorem4 is not None and audit.theorem4.successes == 1 and audit.examples[0]["question"] == "q1"


# --------------------------------------------------------------------------- runner, end to end on the demo


def test_bench_on_a_user_corpus_writes_tables_and_plots(tmp_path, demo_store):
    suite = custom_suite(DEMO / "corpus.jsonl", DEMO / "queries.jsonl", str(DEMO / "policy.toml"), name="demo")
    results = run_suite(suite, k=5, systems=("bm25", "dense", "car-hybrid"), stores_dir=tmp_path / "stores", progress=False)
    systems = results["systems"]
    assert systems["car-hybrid"]["summary"]["tca"]["value"] == 1.0
    assert systems["bm25"]["summary"]["tca"]["value"] < systems["car-hybrid"]["summary"]["tca"]["value"]
    written = write_results(results, tmp_path / "out", "car-rag bench --corpus ...")
    assert {p.suffix for p in written} == {".json", ".md", ".png"} and all(p.stat().st_size > 0 for p in written)
    table = (tmp_path / "out" / "demo.md").read_text()
    assert "car-rag, hybrid RRF anchors" in table and "TCA@5 (Definition 7) by hop type" in table
    data = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert len(data["systems"]["dense"]["per_query"]) == 10


def test_unknown_suite_and_missing_files_are_clear(tmp_path):
    with pytest.raises(ValueError, match="unknown suite"):
        load_suite("nope")
    with pytest.raises(FileNotFoundError, match="--corpora"):
        load_suite("finsuperqa", tmp_path)
