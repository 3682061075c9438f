"""Query sets are checked when loaded: each bad line named with its query and field; against the
corpus's authority graph, ids it does not hold and chains not listed oldest first (a reversed
chain used to score silently wrong: TCA@k reads a chain as oldest first). The demo corpus and
its own policy, no model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import car_rag
from car_rag import Record, load_policy, load_records
from car_rag.eval.metrics import score_query
from car_rag.graph import AuthorityGraph
from car_rag.queries import Query, chain_problem, load_queries

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def graph() -> AuthorityGraph:
    built = AuthorityGraph(load_policy(DEMO / "policy.toml"))
    for record in load_records(DEMO / "corpus.jsonl").records:
        built.add(record)
    return built


@pytest.fixture(scope="module")
def demo() -> list[dict]:
    return [json.loads(line) for line in (DEMO / "queries.jsonl").read_text(encoding="utf-8").splitlines()]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def error(path: Path, graph: AuthorityGraph | None = None) -> str:
    with pytest.raises(ValueError) as caught:
        load_queries(path, graph)
    return str(caught.value)


def test_the_packaged_demo_queries_pass_every_check(graph):
    queries = load_queries(DEMO / "queries.jsonl", graph)
    assert len(queries) == 10 and any(len(q.chain_doc_ids) == 3 for q in queries)


def test_a_chain_listed_newest_first_is_an_error_naming_the_query_and_field(tmp_path, graph, demo):
    rows = [demo[0], {**demo[2], "chain_doc_ids": demo[2]["chain_doc_ids"][::-1]}]
    message = error(write(tmp_path / "q.jsonl", rows), graph)
    assert message.startswith(f"{tmp_path / 'q.jsonl'}:2: query 'demo-q03': field 'chain_doc_ids': listed newest first")
    assert "'sec-zipcraft-2.3.4-release' voids 'sec-zipcraft-2.3.1-release'" in message
    assert "docs/bench-queries.md" in message
    load_queries(tmp_path / "q.jsonl")  # without the corpus, the file itself is fine


def test_a_chain_whose_next_record_does_not_void_the_one_before_is_an_error(tmp_path, graph, demo):
    unrelated = {**demo[0], "chain_doc_ids": [demo[0]["chain_doc_ids"][0], demo[1]["chain_doc_ids"][1]]}
    message = error(write(tmp_path / "q.jsonl", [unrelated]), graph)
    assert "field 'chain_doc_ids': 'sec-lodash-4.17.21-release' does not void 'sec-lodash-cve-2099-10001-disclosure'" in message


def test_a_chain_may_skip_records_between():
    """c voids a only through b (explicit edges): [a, c] is oldest first; so is [a, b, c]."""
    edges = AuthorityGraph(load_policy("security-advisory"))
    for doc_id, voids in (("a", []), ("b", ["a"]), ("c", ["b"])):
        edges.add(Record(doc_id=doc_id, text=doc_id, doc_type="note", supersedes=voids))
    assert [e.superseder for e in edges.superseders("a")] == ["b"]
    assert chain_problem(["a", "c"], edges) is None and chain_problem(["a", "b", "c"], edges) is None
    assert "newest first" in (chain_problem(["a", "c", "b"], edges) or "")
    assert "listed twice" in (chain_problem(["a", "a"], edges) or "")


def test_the_check_is_the_reading_tca_makes_of_a_chain(graph, demo):
    """A chain that passes never marks the controlling record ignored; every reversed chain the
    check refuses would have (the gold, listed first, shown without what it voids)."""
    records = {r.doc_id: r for r in load_records(DEMO / "corpus.jsonl").records}
    policy = load_policy(DEMO / "policy.toml")
    for row in demo:
        for chain in (row["chain_doc_ids"], row["chain_doc_ids"][::-1]):
            query = Query.model_validate({**row, "chain_doc_ids": chain})
            score = score_query(query, row["gold_doc_ids"], k=5, records=records, kb=graph, policy=policy, answer_rule=None)
            assert score.tca == (chain_problem(chain, graph) is None), (row["query_id"], chain)


@pytest.mark.parametrize("field", ["gold_doc_ids", "anchor_doc_ids", "chain_doc_ids"])
def test_an_id_the_corpus_does_not_hold_is_an_error(tmp_path, graph, demo, field):
    message = error(write(tmp_path / "q.jsonl", [{**demo[0], field: ["sec-lodash-4.17.99-release"]}]), graph)
    assert f":1: query 'demo-q01': field '{field}': not in the corpus: ['sec-lodash-4.17.99-release']" in message


def test_an_unknown_field_is_an_error_not_a_dropped_label(tmp_path, demo):
    row = {k: v for k, v in demo[0].items() if k != "chain_doc_ids"} | {"chain_ids": demo[0]["chain_doc_ids"]}
    message = error(write(tmp_path / "q.jsonl", [row]))
    assert ":1: query 'demo-q01': unknown field 'chain_ids' (the fields: query_id, query, gold_doc_ids" in message


def test_a_repeated_query_id_and_a_wrong_type_are_errors(tmp_path, demo):
    message = error(write(tmp_path / "q.jsonl", [demo[0], demo[1], demo[0], {**demo[3], "gold_doc_ids": "x"}]))
    assert message.startswith(f"2 problems in {tmp_path / 'q.jsonl'}:")
    assert ":3: query 'demo-q01': field 'query_id': repeats line 1" in message
    assert ":4: query 'demo-q04': field 'gold_doc_ids': Input should be a valid list" in message


def test_every_problem_is_counted_and_the_first_ten_listed(tmp_path, graph, demo):
    rows = [{**row, "chain_doc_ids": row["chain_doc_ids"][::-1]} for row in demo] * 2
    rows = [{**row, "query_id": f"{row['query_id']}-{i}"} for i, row in enumerate(rows)]
    message = error(write(tmp_path / "q.jsonl", rows), graph)
    reversible = sum(len(row["chain_doc_ids"]) > 1 for row in demo) * 2
    assert message.startswith(f"{reversible} problems in ") and f"... and {reversible - 10} more" in message
    assert len(re.findall(r"field 'chain_doc_ids'", message)) == 10


# The format is written down where bench's help and errors point.
def test_the_query_format_doc_names_every_field_and_the_commands_point_to_it():
    doc = (ROOT / "docs" / "bench-queries.md").read_text(encoding="utf-8")
    for name in Query.model_fields:
        assert f"| `{name}` |" in doc, name
    assert "oldest first" in doc
    for command in ("bench", "report"):
        shown = subprocess.run(
            [sys.executable, "-m", "car_rag", command, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert "docs/bench-queries.md" in "".join(shown.stdout.split()), command
