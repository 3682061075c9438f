"""LlamaIndex MetadataFilters translated into the core's RecordFilter (compiled into every
channel), or refused naming what cannot be compiled."""

from __future__ import annotations

import pytest
from car_rag import load_policy
from car_rag.eligibility import RecordFilter
from car_rag.layout import RecordLayout
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index.retrievers.car.filters import record_filter

LEGAL = load_policy("legal-precedent")


def test_metadata_filters_become_the_record_filter_they_mean():
    filters = MetadataFilters(
        filters=[
            MetadataFilter(key="kind", value="ruling_issued"),
            MetadataFilter(key="case", value=["a_v_b", "c_v_d"], operator=FilterOperator.IN),
            MetadataFilters(
                filters=[
                    MetadataFilter(key="published_at", value="2019-01-01", operator=FilterOperator.GTE),
                    MetadataFilter(key="published_at", value="2020-12-31", operator=FilterOperator.LTE),
                ]
            ),
            MetadataFilter(key="source", value="ca9"),
            MetadataFilter(key="panel", value=3),
        ],
        condition=FilterCondition.AND,
    )
    got = record_filter(filters, LEGAL, RecordLayout(doc_type_key="kind"))
    assert got == RecordFilter(
        since="2019-01-01",
        until="2020-12-31",
        subjects={"case": ["a_v_b", "c_v_d"]},
        sources=["ca9"],
        doc_types=["ruling_issued"],
        metadata={"panel": 3},
    )


@pytest.mark.parametrize(
    ("filters", "says"),
    [
        (
            MetadataFilters(
                filters=[MetadataFilter(key="case", value="x"), MetadataFilter(key="source", value="y")],
                condition=FilterCondition.OR,
            ),
            "condition 'or' cannot be compiled",
        ),
        (
            MetadataFilters(filters=[MetadataFilter(key="source", value="y", operator=FilterOperator.NE)]),
            "operator '!=' cannot be compiled",
        ),
        (MetadataFilters(filters=[MetadataFilter(key="case", value="x", operator=FilterOperator.GTE)]), "gte compares dates"),
        (MetadataFilters(filters=[MetadataFilter(key="published_at", value="2019-01-01")]), "dates take gte and lte"),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="published_at", value="2021-01-01", operator=FilterOperator.GTE),
                    MetadataFilter(key="published_at", value="2020-01-01", operator=FilterOperator.LTE),
                ]
            ),
            "date_range: from 2021-01-01 is after to 2020-01-01",
        ),
    ],
)
def test_what_cannot_be_compiled_is_refused_naming_it(filters, says):
    with pytest.raises(ValueError) as raised:
        record_filter(filters, LEGAL)
    assert says in str(raised.value)
