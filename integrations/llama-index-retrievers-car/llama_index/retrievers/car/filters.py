"""LlamaIndex ``MetadataFilters`` as a car-rag :class:`~car_rag.eligibility.RecordFilter`: the
filter a query asks for, compiled into every channel and Stage 2 by the core (never applied to a
top k afterwards). ``==`` and ``in`` on the type, source, scope keys and metadata, ``>=`` and
``<=`` on ``published_at`` / ``effective_at``, AND-ed at any depth; an operator or an OR/NOT that
cannot be compiled is a ValueError naming it, never a filter silently dropped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from car_rag.eligibility import RecordFilter, filter_of_conditions
from car_rag.layout import RecordLayout
from car_rag.policy import Policy
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

__all__ = ["record_filter"]

_OPERATORS = {FilterOperator.EQ: "eq", FilterOperator.IN: "in", FilterOperator.GTE: "gte", FilterOperator.LTE: "lte"}


def record_filter(filters: MetadataFilters, policy: Policy, layout: RecordLayout | None = None) -> RecordFilter:
    """``filters`` as the records they keep, under ``policy``'s scope keys and ``layout``'s names."""
    return filter_of_conditions(_conditions(filters), policy.scope_keys, (layout or RecordLayout()).doc_type_key)


def _conditions(filters: MetadataFilters) -> Iterator[tuple[str, str, Any]]:
    if filters.condition not in (None, FilterCondition.AND) and len(filters.filters) > 1:
        raise ValueError(f"MetadataFilters with condition {filters.condition.value!r} cannot be compiled (AND only)")
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            yield from _conditions(item)
            continue
        assert isinstance(item, MetadataFilter)
        operator = _OPERATORS.get(item.operator)
        if operator is None:
            raise ValueError(
                f"MetadataFilter on {item.key!r}: operator {item.operator.value!r} cannot be compiled (==, in, >=, <=)"
            )
        yield item.key, operator, item.value
