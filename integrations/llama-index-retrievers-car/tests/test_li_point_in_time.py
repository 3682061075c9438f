"""``as_of`` and ``filters`` on ``CARRetriever.from_index`` (car-rag's own Stage 1): translated once
at construction, compiled into every channel and Stage 2 by the core. Real MiniLM, the in-memory
default ``VectorStoreIndex`` over the packaged demo corpus."""

from __future__ import annotations

from pathlib import Path

import car_rag
import pytest
from car_rag import Policy, load_policy, load_records
from car_rag.eligibility import RecordFilter
from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index.retrievers.car import CAR_STATUS, CARIndexRetriever, CARRetriever, records_to_nodes

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
QUESTION = "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?"
DISCLOSURE, PATCH = "sec-lodash-cve-2099-10001-disclosure", "sec-lodash-4.17.12-release"  # the patch: 2024-03-19
K = 5


@pytest.fixture(scope="module")
def demo_policy() -> Policy:
    return load_policy(DEMO / "policy.toml")


@pytest.fixture(scope="module")
def demo_records():
    report = load_records(DEMO / "corpus.jsonl")
    assert report.errors == []
    return report.records


@pytest.fixture(scope="module")
def demo_index(demo_records, embed_model) -> VectorStoreIndex:
    return VectorStoreIndex(records_to_nodes(demo_records), embed_model=embed_model)


def _status(retriever: CARIndexRetriever, doc_id: str) -> str | None:
    found = retriever.retrieve_result(QUESTION).get(doc_id)
    return None if found is None else found.status


def test_as_of_before_the_patch_finds_the_disclosure_in_force(demo_index, demo_policy):
    now = CARRetriever.from_index(demo_index, demo_policy, k=K)
    assert (_status(now, DISCLOSURE), _status(now, PATCH)) == ("superseded", "active")
    then = CARRetriever.from_index(demo_index, demo_policy, k=K, as_of="2024-03-18")
    assert (_status(then, DISCLOSURE), _status(then, PATCH)) == ("active", None)
    nodes = then.retrieve(QUESTION)
    assert (nodes[0].node.metadata["doc_id"], nodes[0].node.metadata[CAR_STATUS]) == (DISCLOSURE, "active")
    result = then.retrieve_result(QUESTION)
    assert result.to_dict()["as_of"] == "2024-03-18"
    assert all(r.record.time is None or r.record.time.date().isoformat() <= "2024-03-18" for r in result)
    assert all(h.doc_id != PATCH for hits in then.core.channel_runs(QUESTION, as_of=then.as_of).values() for h in hits)
    on_the_day = CARRetriever.from_index(demo_index, demo_policy, k=K, as_of="2024-03-19")  # a day counts to its end
    assert _status(on_the_day, DISCLOSURE) == "superseded"


def test_a_doc_types_filter_excluding_every_top_hit_still_returns_k_records(demo_index, demo_policy, demo_records):
    unfiltered = CARRetriever.from_index(demo_index, demo_policy, k=K)
    top = set(unfiltered.retrieve_result(QUESTION).doc_ids(K)) | {
        h.doc_id for hits in unfiltered.core.channel_runs(QUESTION).values() for h in hits[:K]
    }
    top_types = {r.doc_type for r in demo_records if r.doc_id in top}
    others = sorted({r.doc_type for r in demo_records} - top_types)
    assert others and sum(r.doc_type in others for r in demo_records) >= K
    as_metadata = MetadataFilters(filters=[MetadataFilter(key="doc_type", value=others, operator=FilterOperator.IN)])
    for filters in (as_metadata, RecordFilter(doc_types=others)):
        retriever = CARRetriever.from_index(demo_index, demo_policy, k=K, filters=filters)
        assert retriever.filters == RecordFilter(doc_types=others)
        runs = retriever.core.channel_runs(QUESTION, filters=retriever.filters)
        assert all(not {h.doc_id for h in hits} & top for hits in runs.values())
        assert len(runs["dense"]) >= K  # pre-filtered, never a top k cut (BM25 finds no word of the question there)
        nodes = retriever.retrieve(QUESTION)
        got = list(dict.fromkeys(n.node.metadata["doc_id"] for n in nodes))
        assert len(got) == K and not set(got) & top
        assert all(n.node.metadata["doc_type"] in others for n in nodes)
        assert retriever.retrieve_result(QUESTION).to_dict()["filters"] == {"doc_types": others}


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        (
            {"filters": MetadataFilters(filters=[MetadataFilter(key="source", value="nvd", operator=FilterOperator.NE)])},
            "MetadataFilter on 'source': operator '!=' cannot be compiled",
        ),
        (
            {
                "filters": MetadataFilters(
                    filters=[MetadataFilter(key="published_at", value="2024-13-01", operator=FilterOperator.GTE)]
                )
            },
            "date_range.from: cannot read '2024-13-01' as a date",
        ),
        ({"as_of": "someday"}, "as_of: cannot read 'someday' as a date"),
    ],
)
def test_a_filter_or_date_that_cannot_be_compiled_is_refused_at_construction(demo_index, demo_policy, asked, says):
    with pytest.raises(ValueError) as raised:
        CARIndexRetriever(demo_index, demo_policy, **asked)
    assert says in str(raised.value)


def test_a_record_voided_only_by_a_filtered_out_one_says_so_in_its_metadata(demo_index, demo_policy):
    only = MetadataFilters(filters=[MetadataFilter(key="doc_type", value="vulnerability_disclosure", operator=FilterOperator.EQ)])
    disclosures = CARRetriever.from_index(demo_index, demo_policy, k=K, filters=only)
    meta = next(n.node.metadata for n in disclosures.retrieve(QUESTION) if n.node.metadata["doc_id"] == DISCLOSURE)
    assert (meta[CAR_STATUS], meta["car_superseded_by"], meta["car_filtered_superseder"]) == ("superseded", [], True)
    unfiltered = CARRetriever.from_index(demo_index, demo_policy, k=K).retrieve(QUESTION)
    assert all(n.node.metadata["car_filtered_superseder"] is False for n in unfiltered)
