"""Query sets in the benchmark corpora's format (``<name>.queries.jsonl``; the format, field by
field: ``docs/bench-queries.md``).

Only ``query_id`` and ``query`` are needed to run queries; the labels (gold, anchor and
chain ids, hop type, answer) are what the eval module scores against. A label that cannot be
right is refused when the set is loaded, each error naming the line, the query and the field:
an unknown field (a misspelt label would otherwise be dropped and score as absent), a repeated
``query_id``; and, given the corpus's authority graph, an id the corpus does not hold and a
chain not listed oldest first.

Why the chain's order is checked: TCA@k (:func:`car_rag.eval.metrics.score_query`) counts a
shown chain record as an ignored superseder unless a record listed after it is shown too,
which is right only when each record is voided, directly or through others, by the next one.
A chain listed newest first makes the controlling record (then first) count as ignored
whenever it is shown without the records it voids: a silently wrong score, not an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from car_rag.records import json_line_error

if TYPE_CHECKING:
    from car_rag.graph import AuthorityGraph

__all__ = ["Query", "chain_problem", "load_queries", "missing_ids"]

ID_FIELDS = ("gold_doc_ids", "anchor_doc_ids", "chain_doc_ids")
_SHOWN = 10
"""Problems listed in one error (the count says how many more)."""
FORMAT_NOTE = "(the query set's format: docs/bench-queries.md in car-rag's repository)"


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    query_id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    gold_doc_ids: list[str] = Field(default_factory=list, description="The controlling record(s).")
    anchor_doc_ids: list[str] = Field(default_factory=list, description="What relevance search should find.")
    chain_doc_ids: list[str] = Field(
        default_factory=list, description="The authority chain, oldest first: each record voided by the next."
    )
    hop_type: str | None = None
    answer: str | None = None


def missing_ids(query: Query, graph: AuthorityGraph) -> dict[str, list[str]]:
    """Field -> the ids in it that the corpus (``graph``) does not hold, for the fields with any."""
    out = {name: [d for d in getattr(query, name) if d not in graph] for name in ID_FIELDS}
    return {name: ids for name, ids in out.items() if ids}


def chain_problem(chain: list[str], graph: AuthorityGraph) -> str | None:
    """Why ``chain`` is not oldest first in ``graph`` (each record voided, directly or through
    other records, by the next), or None. Ids the graph does not hold are not judged here."""
    for older, newer in zip(chain, chain[1:]):
        if older not in graph or newer not in graph or newer in graph.ancestors(older):
            continue
        if older == newer:
            return f"{older!r} is listed twice in a row"
        if older in graph.ancestors(newer):
            return f"listed newest first ({older!r} voids {newer!r}): list it oldest first, each record voided by the next"
        return f"{newer!r} does not void {older!r}, directly or through others: each record must be voided by the next"
    return None


def _invalid(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(map(str, err["loc"]))
    if err["type"] == "extra_forbidden":
        return f"unknown field {field!r} (the fields: {', '.join(Query.model_fields)})"
    return f"field {field!r}: {err['msg']}"


def _parse(line: str) -> tuple[Query | None, str | None]:
    """One line's query, or why it is not one (naming the query where the line names it)."""
    try:
        data: Any = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        return None, json_line_error(exc)
    try:
        return Query.model_validate(data), None
    except ValidationError as exc:
        named = data.get("query_id") if isinstance(data, dict) else None
        return None, (f"query {named!r}: " if isinstance(named, str) and named else "") + _invalid(exc)


def load_queries(path: str | Path, graph: AuthorityGraph | None = None) -> list[Query]:
    """Load a query set. Every bad line is found before a ValueError names them (each with its
    line, query and field): invalid JSON, a missing or unknown field, a repeated ``query_id``;
    with ``graph`` (the corpus's authority graph), also ids the corpus does not hold and chains
    not listed oldest first."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"query file not found: {path}")
    out: list[Query] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            query, problem = _parse(line)
            where = f"{path}:{number}:"
            if query is None:
                problems.append(f"{where} {problem}")
                continue
            if query.query_id in first_line:
                problems.append(f"{where} query {query.query_id!r}: field 'query_id': repeats line {first_line[query.query_id]}")
                continue
            first_line[query.query_id] = number
            if graph is not None:
                for name, ids in missing_ids(query, graph).items():
                    problems.append(f"{where} query {query.query_id!r}: field {name!r}: not in the corpus: {ids}")
                if (why := chain_problem(query.chain_doc_ids, graph)) is not None:
                    problems.append(f"{where} query {query.query_id!r}: field 'chain_doc_ids': {why}")
            out.append(query)
    if problems:
        head = [f"{len(problems)} problems in {path}:"] if len(problems) > 1 else []
        more = [f"... and {len(problems) - _SHOWN} more"] if len(problems) > _SHOWN else []
        raise ValueError("\n".join([*head, *problems[:_SHOWN], *more, FORMAT_NOTE]))
    return out
