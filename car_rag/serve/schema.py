"""The request and response bodies of ``car-rag serve`` (the RFC seed's §11 contract: candidates
with per-channel scores, the final ranking, the evidence pack, diagnostics). FastAPI turns
them into the OpenAPI document at ``/openapi.json`` and ``/docs``."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from car_rag.evidence import EvidencePacket

__all__ = [
    "Format",
    "Caller",
    "ExplainRequest",
    "RetrieveRequest",
    "ChannelEvidence",
    "Candidate",
    "Link",
    "Stage1",
    "RankedRecord",
    "EvidencePack",
    "ScopeProbability",
    "Diagnostics",
    "RetrieveResponse",
    "EdgeOut",
    "RecordsResponse",
    "RecordProblem",
    "RecordsRejected",
    "MAX_QUERY_CHARS",
    "unstorable",
]

Format = Literal["json", "plain", "reader", "audit", "xml"]
"""The evidence pack's form: json packets, or a rendering (plain, reader, audit). ``xml`` is the former
name of ``audit``, accepted for one release; the pack says which form it holds."""
MAX_QUERY_CHARS = 4096
"""Longer questions are refused: MiniLM reads 256 tokens, and BM25 time grows with the query."""


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""What no store keeps: NUL (PostgreSQL's text refuses it) and lone UTF-16 surrogates (JSON's
``\\ud800`` escapes read as text no UTF-8 encoder writes)."""


def _unstorable_in(value: Any) -> bool:
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, dict):
        return any(_unstorable_in(k) or _unstorable_in(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_unstorable_in(v) for v in value)
    return False


def unstorable(items: list[Any]) -> list[RecordProblem]:
    """Each field of each record of a POST /records body that holds a character no store keeps,
    found before the records are parsed, so that the answer is a 422 naming the record and field
    on every store rather than the database's refusal mid-write. The record's doc_id is named
    only where it holds none itself."""
    problems = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            continue
        doc_id = item.get("doc_id")
        named = doc_id if isinstance(doc_id, str) and not _unstorable_in(doc_id) else None
        problems += [
            RecordProblem(
                item=number,
                doc_id=named,
                field=field if not _unstorable_in(field) else None,
                message="holds a NUL character or a lone UTF-16 surrogate, which no store keeps",
            )
            for field, value in item.items()
            if _unstorable_in(field) or _unstorable_in(value)
        ]
    return problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Caller(_Strict):
    """Who to read as, on a server without API keys (with keys, the key decides)."""

    tenant: str | None = None
    principals: list[str] = []


class ExplainRequest(_Strict):
    doc_id: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="the record, by the doc_id its writer gave")
    caller: Caller | None = Field(None, description="only on a server without API keys")


class RetrieveRequest(_Strict):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(5, ge=1, le=100, description="records in the ranking and the evidence")
    format: Format = Field(
        "json", description="evidence pack: json packets, or the plain, reader or audit rendering (xml: the former name of audit)"
    )
    with_text: bool = Field(False, description="each ranked record carries its text")
    with_records: bool = Field(
        False,
        description="each ranked record carries the whole record and its car_* annotations, so that a remote "
        "client (car_rag.client) lays it out as the in-process framework retrievers do",
    )
    token_budget: float | None = Field(None, gt=0, description="fit the rendered evidence to this many tokens")
    marked: bool = Field(
        False,
        description="format plain: each replaced record's header names what replaced it (for an agent's tool output, "
        "which is read apart from car-rag's order)",
    )
    caller: Caller | None = Field(None, description="only on a server without API keys")
    as_of: str | None = Field(
        None,
        description="the authority as it stood on this date (YYYY-MM-DD: its end; or an ISO 8601 time): records dated "
        "later (effective_at, else published_at) are not candidates and void nothing; undated records count at every date",
    )
    filters: dict[str, Any] | None = Field(
        None,
        description='only the records these keep, in every channel: {"date_range": {"from": date, "to": date}, '
        '"subjects": {scope key: [values]}, "sources": [...], "doc_types": [...], "metadata": {key: value}}; '
        "an unknown field, a date that cannot be read or a range from > to is a 400 naming it",
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must not be blank")
        if _UNSTORABLE.search(value):
            raise ValueError("query must not hold a NUL character or a lone UTF-16 surrogate")
        return value


class ChannelEvidence(_Strict):
    score: float
    rank: int
    contribution: float | None = None


class Candidate(_Strict):
    """A fused Stage-1 candidate; ``anchor`` when the latent-scope step made it an anchor."""

    doc_id: str
    rank: int
    score: float
    anchor: bool
    channels: dict[str, ChannelEvidence]


class Link(_Strict):
    doc_id: str
    rule: str
    confidence: float | None = Field(default=None, description="Only where the edge is less than certain.")
    untrusted: str | None = Field(
        default=None, description="Only on a claim the trust model refuses: the rule it breaks (it voids nothing)."
    )

    @model_serializer(mode="wrap")
    def _certain_edges_say_nothing(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # As `car-rag query --format json` writes an edge: no confidence key on a certain one,
        # no untrusted key on a trusted one.
        data: dict[str, Any] = handler(self)
        for optional in ("confidence", "untrusted"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


class Stage1(_Strict):
    rank: int
    score: float
    channels: dict[str, float]
    contributions: dict[str, float]


class RankedRecord(_Strict):
    """One record of the final ranking (the shape of ``car-rag query --format json``)."""

    rank: int
    doc_id: str
    doc_type: str
    status: Literal["active", "superseded"]
    role: Literal["anchor", "superseder", "scope_match"]
    anchor_id: str | None
    superseded_by: list[str]
    voided_by: list[Link]
    voids: list[Link]
    contested_by: list[Link] = Field(description="Voiders too unsure to count (below min_confidence): possibly superseded.")
    disputed_by: list[Link] = Field(description="Records another authority relation orders the other way.")
    hidden_superseder: bool
    filtered_superseder: bool = Field(False, description="Voided by a record the request's filters leave out.")
    scope: dict[str, str]
    scope_probability: float | None
    published_at: str | None
    stage1: Stage1 | None
    text: str | None = None
    record: dict[str, Any] | None = Field(
        default=None,
        description="With with_records: the record in the records format, its supersedes naming only records the key may read.",
    )
    annotations: dict[str, Any] | None = Field(
        default=None, description="With with_records: the car_* metadata the framework integrations write (car_rag.layout)."
    )


class EvidencePack(_Strict):
    """``packets`` for format json; ``text`` (the rendering) for plain, reader and audit."""

    format: Format
    packets: list[EvidencePacket] | None = None
    text: str | None = None


class ScopeProbability(_Strict):
    scope: dict[str, str]
    probability: float


class AmbiguousSubject(_Strict):
    scope: dict[str, str]
    probability: float
    state: str = Field(description="its current state, in the policy's words")
    controlling: list[str] = Field(description="the records that control it (those the key may read)")


class AmbiguityOut(_Strict):
    scopes: int = Field(description="how many scopes the question plausibly names without telling them apart (>= 2)")
    states: dict[str, int] = Field(description="how many of them are in each current state")
    members: list[AmbiguousSubject]


class ScopeLinkOut(_Strict):
    key: str
    value: str
    words: str = Field(description="the question's words that name it")
    match: Literal["exact", "fuzzy"]
    specificity: float | None
    support: float


class Diagnostics(_Strict):
    timings_ms: dict[str, float] = Field(description="bm25, dense (with the query embedding), stage1 .. total, evidence")
    channel_hits: dict[str, int]
    anchors: int
    scope_ids: dict[str, list[str]] = Field(description="scope values the question names")
    scope_posterior: list[ScopeProbability] | None
    scope_links: list[ScopeLinkOut] = Field(description="scope values the question's words name")
    ambiguity: AmbiguityOut | None = Field(
        description="null when one scope is clearly the question's subject (or no posterior was estimated); else the "
        "scopes it does not tell apart, counted by current state"
    )
    degraded: list[str] = Field(description="channels left out of this answer, and why (e.g. 'dense: timeout after 750 ms')")


class RetrieveResponse(_Strict):
    query: str
    k: int
    as_of: str | None = Field(None, description="the date asked as of (only when asked)")
    filters: dict[str, Any] | None = Field(None, description="the filter the records were chosen under (only when asked)")
    candidates: list[Candidate]
    reranked: list[RankedRecord]
    evidence_pack: EvidencePack
    diagnostics: Diagnostics

    @model_serializer(mode="wrap")
    def _asked_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An answer to a request without as_of or filters is written as before.
        data: dict[str, Any] = handler(self)
        for optional in ("as_of", "filters"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


class EdgeOut(_Strict):
    superseder: str
    target: str
    rule: str


class RecordsResponse(_Strict):
    added: list[str]
    updated: list[str]
    unchanged: int
    newly_superseded: list[str] = Field(description="records this batch voided (those the key may read)")
    new_edges: list[EdgeOut]
    warnings: list[str] = Field(description="rules that cannot fire for some record of the batch, for want of a scope key")


class RecordProblem(_Strict):
    item: int | None = Field(description="1-based position in the batch")
    doc_id: str | None
    field: str | None
    message: str


class RecordsRejected(_Strict):
    detail: str
    errors: list[RecordProblem]
