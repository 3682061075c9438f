"""LangChain filter dicts (the Chroma-style ``filter`` of a vector store's search) as a car-rag
:class:`~car_rag.eligibility.RecordFilter`: compiled into every channel and Stage 2 by the core,
never applied to a top k afterwards. ``{"key": value}``, ``$eq`` and ``$in`` on the type, source,
scope keys and metadata, ``$gte`` and ``$lte`` on ``published_at`` / ``effective_at``, ``$and``
at any depth; ``$or``, ``$not`` or another operator is a ValueError naming it, never dropped."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from car_rag.eligibility import RecordFilter, filter_of_conditions
from car_rag.layout import RecordLayout
from car_rag.policy import Policy

__all__ = ["record_filter"]

_OPERATORS = {"$eq": "eq", "$in": "in", "$gte": "gte", "$lte": "lte"}


def record_filter(where: Mapping[str, Any], policy: Policy, layout: RecordLayout | None = None) -> RecordFilter:
    """``where`` as the records it keeps, under ``policy``'s scope keys and ``layout``'s names."""
    return filter_of_conditions(_conditions(where), policy.scope_keys, (layout or RecordLayout()).doc_type_key)


def _conditions(where: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for key, value in where.items():
        if key == "$and":
            if not isinstance(value, list):
                raise ValueError(f"$and takes a list of filters, got {value!r}")
            for part in value:
                yield from _conditions(part)
        elif key.startswith("$"):
            raise ValueError(f"filter operator {key!r} cannot be compiled ($and of $eq, $in, $gte, $lte)")
        elif isinstance(value, Mapping):
            for operator, operand in value.items():
                if operator not in _OPERATORS:
                    raise ValueError(f"filter on {key!r}: operator {operator!r} cannot be compiled ($eq, $in, $gte, $lte)")
                yield key, _OPERATORS[operator], operand
        else:
            yield key, "eq", value
