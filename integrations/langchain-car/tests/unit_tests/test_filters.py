"""LangChain filter dicts translated into the core's RecordFilter (compiled into every channel),
or refused naming what cannot be compiled."""

from __future__ import annotations

import pytest
from car_rag import load_policy
from car_rag.eligibility import RecordFilter

from langchain_car.filters import record_filter

LEGAL = load_policy("legal-precedent")


def test_a_filter_dict_becomes_the_record_filter_it_means() -> None:
    where = {
        "$and": [
            {"doc_type": "ruling_issued"},
            {"case": {"$in": ["a_v_b", "c_v_d"]}},
            {"published_at": {"$gte": "2019-01-01", "$lte": "2020-12-31"}},
        ],
        "source": {"$eq": "ca9"},
        "en_banc": True,
    }
    assert record_filter(where, LEGAL) == RecordFilter(
        since="2019-01-01",
        until="2020-12-31",
        subjects={"case": ["a_v_b", "c_v_d"]},
        sources=["ca9"],
        doc_types=["ruling_issued"],
        metadata={"en_banc": True},
    )


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ({"$or": [{"case": "x"}, {"source": "y"}]}, "filter operator '$or' cannot be compiled"),
        ({"source": {"$ne": "y"}}, "operator '$ne' cannot be compiled"),
        ({"case": {"$in": "x"}}, "operator 'in' with 'x' cannot be compiled"),
        ({"subjects": {"$gte": "x"}}, "gte compares dates"),
        ({"published_at": {"$gte": "not a date"}}, "cannot read 'not a date' as a date"),
    ],
)
def test_what_cannot_be_compiled_is_refused_naming_it(where: dict, says: str) -> None:
    with pytest.raises(ValueError) as raised:
        record_filter(where, LEGAL)
    assert says in str(raised.value)
