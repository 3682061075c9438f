"""Query sets in the benchmark corpora's format (``<name>.queries.jsonl``).

Only ``query_id`` and ``query`` are needed to run queries; the labels (gold, anchor and
chain ids, hop type, answer) are what the eval module scores against.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["Query", "load_queries"]


class Query(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    query_id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    gold_doc_ids: list[str] = Field(default_factory=list, description="The controlling record(s).")
    anchor_doc_ids: list[str] = Field(default_factory=list, description="What relevance search should find.")
    chain_doc_ids: list[str] = Field(default_factory=list, description="The authority chain, oldest first.")
    hop_type: str | None = None
    answer: str | None = None


def load_queries(path: str | Path) -> list[Query]:
    """Load a query set; a bad line raises ValueError naming the line and field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"query file not found: {path}")
    out = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                out.append(Query.model_validate(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON: {exc.msg}") from exc
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(map(str, err["loc"]))
                raise ValueError(f"{path}:{number}: field {field!r}: {err['msg']}") from exc
    return out
