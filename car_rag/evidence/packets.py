"""Evidence packets: the unit handed to the language model.

A packet carries one retrieved record's verbatim text together with everything a reader
needs to weigh it: where it came from (provenance), who may see it (governance), whether
it still controls (epistemic metadata: active or superseded, by what, under which rule and
in which scope), how to cite it, and why retrieval put it there. The field names follow
the Evidence Packet schema of the retrieval doctrine (``evidence_packet_id``,
``corpus_object_id``, ``content.raw_text``, ``provenance.source_authority_score``, …)
where it fits; car-rag adds the supersession links that schema has no room for.

Packets are built from a :class:`~car_rag.retriever.RetrievalResult` with
:func:`build_packets`; their rationale sentences are :mod:`car_rag.evidence.wording`'s. They
can also be constructed directly (tests, adapters), and every string in them is treated as
untrusted when rendered: see :mod:`car_rag.evidence.xml_tree`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from car_rag.annotations import status_rule
from car_rag.evidence.spans import matching_spans
from car_rag.evidence.wording import (
    NOT_SUPERSEDED,
    disputed_sentence,
    filtered_sentence,
    hidden_sentence,
    possibly_superseded_sentence,
    record_label,
    role_phrase,
    superseded_by_sentence,
    supersedes_sentence,
)
from car_rag.policy import Policy

if TYPE_CHECKING:
    from car_rag.graph import Edge
    from car_rag.retriever import RetrievalResult, RetrievedRecord

__all__ = [
    "AuthorityLink",
    "CitationCoordinates",
    "ConflictIndicators",
    "EpistemicMetadata",
    "EvidencePacket",
    "FreshnessStatus",
    "Governance",
    "PacketContent",
    "Provenance",
    "RetrievalRationale",
    "SupersededMode",
    "renderable_packets",
    "build_packets",
    "hidden_only",
    "scope_groups",
]

FreshnessStatus = Literal["active", "superseded", "archived"]

SupersededMode = Literal["include", "omit"]
"""What a rendering does with superseded packets: show them as marked provenance, or leave them out."""


def _to_text(value: Any) -> Any:
    """Bytes become text the way untrusted input should: invalid UTF-8 is replaced, not fatal."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PacketContent(_Model):
    """The record's text, verbatim, and where the query's terms occur in it."""

    raw_text: str = Field(description="The record text, verbatim (untrusted: escaped when rendered).")
    exact_matching_spans: list[str] = Field(
        default_factory=list, description="Distinct substrings of raw_text made of query terms, in order of appearance."
    )
    structured_data: dict[str, Any] | None = Field(default=None, description="The record's free metadata, if any.")

    @field_validator("raw_text", mode="before")
    @classmethod
    def _decode(cls, value: Any) -> Any:
        return _to_text(value)


class Provenance(_Model):
    """Where the record comes from and how much its source is trusted."""

    source_id: str | None = Field(default=None, description="Issuing source (feed, court, agency).")
    source_authority_score: float | None = Field(default=None, ge=0.0, le=1.0, description="Source authority, 0..1.")
    published_at: datetime | None = Field(default=None, description="When the record was issued.")
    effective_at: datetime | None = Field(default=None, description="When it takes effect, if not when issued.")
    ingestion_timestamp: datetime | None = Field(
        default=None, description="When car-rag ingested it; the store does not record this yet, so usually None."
    )
    lineage_hash: str | None = Field(default=None, description="SHA-256 fingerprint of the record as stored.")


class Governance(_Model):
    """Who may read the record. ``restricted`` means the eligibility gate admitted it for this caller."""

    tenant_id: str | None = Field(default=None, description="Owning tenant; None means every tenant.")
    permission_status: Literal["cleared", "restricted"] = Field(
        default="cleared", description="'cleared': readable by everyone; 'restricted': tenant- or principal-scoped."
    )
    allowed_principals: list[str] = Field(default_factory=list)


class AuthorityLink(_Model):
    """One supersession edge seen from a packet: the record at the other end, and why."""

    doc_id: str = Field(description="The record at the other end of the edge.")
    doc_type: str | None = Field(default=None, description="Its doc_type, when known.")
    version: str | None = Field(default=None, description="Its version label, when known.")
    rule: str = Field(description="Policy rule name, or 'explicit' for a record's own supersedes list.")
    rule_description: str = Field(default="", description="The rule's description from the policy.")
    scope: dict[str, str] = Field(
        default_factory=dict,
        description="The scope the rule is confined to (its 'within' keys with their values); empty for a global "
        "rule, and for an explicit edge the scope entries both records share.",
    )
    controlling: bool = Field(
        default=True, description="For a superseded packet: whether this superseder is itself active (it controls)."
    )
    confidence: float = Field(
        default=1.0, ge=0.0, le=1.0, description="How sure the edge (or the surest path through others) is; 1.0: certain."
    )

    def label(self) -> str:
        return record_label(self.doc_type, self.version, self.doc_id)


class ConflictIndicators(_Model):
    has_contradiction: bool = Field(description="Whether any record voids this one (visible or not), however surely.")
    contradicted_by_ids: list[str] = Field(
        default_factory=list, description="Visible records in this result that void it, possibly (contested) or not."
    )
    hidden_superseder: bool = Field(default=False, description="Voided by a record the caller may not read (never named).")
    filtered_superseder: bool = Field(default=False, description="Voided by a record the query's filters leave out.")


class EpistemicMetadata(_Model):
    freshness_status: FreshnessStatus
    conflict_indicators: ConflictIndicators
    superseded_by: list[AuthorityLink] = Field(
        default_factory=list, description="Records in this result that void it; 'controlling' marks the active ones."
    )
    supersedes: list[AuthorityLink] = Field(default_factory=list, description="Records in this result it voids.")
    possibly_superseded_by: list[AuthorityLink] = Field(
        default_factory=list,
        description="Records in this result that void it with too little confidence to count "
        "(below the query's min_confidence): it stays active, contested.",
    )
    disputed_by: list[AuthorityLink] = Field(
        default_factory=list,
        description="Records in this result that void it by one relation (the link's rule) while "
        "it voids them by another: the authority is disputed, neither voids the other.",
    )
    scope_probability: float | None = Field(
        default=None, description="How probable it is that the question is about this record's scope (latent scope)."
    )


class CitationCoordinates(_Model):
    uri: str | None = None
    version_id: str | None = None
    section_path: str | None = None
    page_number: int | None = None


class RetrievalRationale(_Model):
    matched_subquery: str = Field(description="The query the record was retrieved for.")
    role: Literal["anchor", "superseder", "scope_match"] | None = Field(
        default=None, description="Why it is in the result: a Stage-1 anchor, a superseder of one, or a scope id match."
    )
    rank: int | None = Field(default=None, description="1-based position in the retrieval result.")
    anchor_id: str | None = Field(default=None, description="The anchor whose authority chain brought it in.")
    stage1_rank: int | None = None
    fused_score: float | None = None
    channel_scores: dict[str, float] = Field(default_factory=dict)
    channel_ranks: dict[str, int] = Field(default_factory=dict)
    status_rule: str | None = Field(
        default=None, description="The rule (or 'explicit') of the edge that set a superseded status."
    )
    relevance_rationale: str = Field(default="", description="Why it is here and why it has its status, in words.")


class EvidencePacket(_Model):
    """One retrieved record, ready for the model. Build with :func:`build_packets`."""

    evidence_packet_id: str = Field(description="Id the model cites, e.g. 'EP-1'.")
    corpus_object_id: str = Field(description="The record's doc_id.")
    chunk_id: str = Field(description="Chunk id; car-rag does not chunk, so the doc_id.")
    doc_type: str
    scope: dict[str, str] = Field(default_factory=dict)
    version: str | None = None
    content: PacketContent
    provenance: Provenance = Field(default_factory=Provenance)
    governance: Governance = Field(default_factory=Governance)
    epistemic_metadata: EpistemicMetadata
    citation_coordinates: CitationCoordinates = Field(default_factory=CitationCoordinates)
    retrieval_rationale: RetrievalRationale

    @property
    def doc_id(self) -> str:
        return self.corpus_object_id

    @property
    def status(self) -> FreshnessStatus:
        return self.epistemic_metadata.freshness_status

    @property
    def text(self) -> str:
        return self.content.raw_text

    @property
    def rank(self) -> int | None:
        return self.retrieval_rationale.rank

    @property
    def is_active(self) -> bool:
        return self.status == "active"

    @property
    def contested(self) -> bool:
        """Active, though some record voids it with too little confidence to count."""
        return self.is_active and bool(self.epistemic_metadata.possibly_superseded_by)

    def label(self) -> str:
        """Short human name: 'patch release 4.17.12', else '<type> <doc_id>'."""
        return record_label(self.doc_type, self.version, self.doc_id)

    def supersedes_sentence(self, link: AuthorityLink) -> str:
        """'patch release 4.17.12 supersedes vulnerability disclosure X for package lodash and …'."""
        return supersedes_sentence(self.label(), link)

    def superseded_by_sentence(self, link: AuthorityLink) -> str:
        """'vulnerability disclosure X is superseded by patch release 4.17.12 for …'."""
        return superseded_by_sentence(self.label(), link)

    def hidden_sentence(self) -> str:
        """'<label> is superseded by a record you are not permitted to read.' (no id, by design)."""
        return hidden_sentence(self.label())

    def filtered_sentence(self) -> str:
        """'<label> is superseded by a record this query's filters leave out.'"""
        return filtered_sentence(self.label())


# ---------------------------------------------------------------------- building
def _link(result: RetrievalResult, policy: Policy | None, edge: Edge, *, towards: str, controlling: bool = True) -> AuthorityLink:
    """``edge`` seen from one of its ends; ``towards`` names the other end."""
    sup, tgt, other = result.get(edge.superseder), result.get(edge.target), result.get(towards)
    rule = policy.rule(edge.rule) if policy is not None else None
    if sup is None:
        scope: dict[str, str] = {}
    elif rule is not None:
        scope = {k: sup.record.scope[k] for k in rule.within if k in sup.record.scope}
    else:  # explicit edge (or no policy): the scope entries both records share
        shared = tgt.record.scope if tgt is not None else {}
        scope = {k: v for k, v in sup.record.scope.items() if shared.get(k) == v}
    return AuthorityLink(
        doc_id=towards,
        doc_type=other.record.doc_type if other else None,
        version=other.record.version if other else None,
        rule=edge.rule,
        rule_description=rule.description if rule is not None else "",
        scope=scope,
        controlling=controlling,
        confidence=edge.confidence,
    )


def _packet(item: RetrievedRecord, result: RetrievalResult, policy: Policy | None, packet_id: str) -> EvidencePacket:
    record = item.record
    # A superseder controls when it is itself active. (``item.superseded_by`` can name a
    # record that is superseded only by one the caller may not read; it does not control.)
    controlling = {e.superseder for e in item.voided_by if _is_active(result, e.superseder)}
    superseded_by = [
        _link(result, policy, e, towards=e.superseder, controlling=e.superseder in controlling)
        for e in sorted(item.voided_by, key=lambda e: (e.superseder not in controlling, e.superseder))
    ]
    # Superseded with no active superseder in view: what controls is a record the caller may not
    # read, or one the query's filters leave out.
    filtered = item.filtered_superseder and not item.hidden_superseder
    hidden = not filtered and (item.hidden_superseder or (item.status == "superseded" and not controlling))
    supersedes = [_link(result, policy, e, towards=e.target) for e in item.voids]
    possibly = [_link(result, policy, e, towards=e.superseder) for e in item.contested_by] if item.status == "active" else []
    disputed = [_link(result, policy, e, towards=e.superseder) for e in item.disputed_by]
    status: FreshnessStatus = item.status
    label = record_label(record.doc_type, record.version, record.doc_id)
    reasons = [role_phrase(item.role, item.anchor_id)]
    if status == "superseded":
        if superseded_by:
            reasons.append("; ".join(superseded_by_sentence(label, link) for link in superseded_by))
        if hidden:
            reasons.append(hidden_sentence(label))
        if filtered:
            reasons.append(filtered_sentence(label))
    elif possibly or disputed:
        reasons.extend(disputed_sentence(label, link, _claim_back(result, policy, item, link)) for link in disputed)
        reasons.extend(possibly_superseded_sentence(label, link) for link in possibly)
        reasons.extend(supersedes_sentence(label, link) for link in supersedes)
    else:
        reasons.append(NOT_SUPERSEDED)
        reasons.extend(supersedes_sentence(label, link) for link in supersedes)
    hit = item.stage1
    restricted = record.tenant is not None or bool(record.allowed_principals)
    permission: Literal["cleared", "restricted"] = "restricted" if restricted else "cleared"
    return EvidencePacket(
        evidence_packet_id=packet_id,
        corpus_object_id=record.doc_id,
        chunk_id=record.doc_id,
        doc_type=record.doc_type,
        scope=dict(record.scope),
        version=record.version,
        content=PacketContent(
            raw_text=record.text,
            exact_matching_spans=matching_spans(record.text, result.query),
            structured_data=dict(record.metadata) or None,
        ),
        provenance=Provenance(
            source_id=record.source,
            source_authority_score=record.authority,
            published_at=record.published_at,
            effective_at=record.effective_at,
            lineage_hash=record.fingerprint(),
        ),
        governance=Governance(
            tenant_id=record.tenant, permission_status=permission, allowed_principals=list(record.allowed_principals)
        ),
        epistemic_metadata=EpistemicMetadata(
            freshness_status=status,
            conflict_indicators=ConflictIndicators(
                has_contradiction=status == "superseded" or bool(possibly or disputed),
                contradicted_by_ids=[link.doc_id for link in [*superseded_by, *possibly, *disputed]],
                hidden_superseder=hidden,
                filtered_superseder=filtered,
            ),
            superseded_by=superseded_by,
            supersedes=supersedes,
            possibly_superseded_by=possibly,
            disputed_by=disputed,
            scope_probability=item.scope_probability,
        ),
        citation_coordinates=CitationCoordinates(
            uri=record.uri,
            version_id=record.version,
            section_path=_str_meta(record.metadata, "section_path", "section"),
            page_number=_int_meta(record.metadata, "page_number", "page"),
        ),
        retrieval_rationale=RetrievalRationale(
            matched_subquery=result.query,
            role=item.role,
            rank=item.rank,
            anchor_id=item.anchor_id,
            stage1_rank=hit.rank if hit else None,
            fused_score=hit.score if hit else None,
            channel_scores=dict(hit.channel_scores) if hit else {},
            channel_ranks=dict(hit.channel_ranks) if hit else {},
            status_rule=status_rule(item, result),
            relevance_rationale="; ".join(reasons),
        ),
    )


def _claim_back(
    result: RetrievalResult, policy: Policy | None, item: RetrievedRecord, link: AuthorityLink
) -> AuthorityLink | None:
    """``item``'s own claim over the record ``link`` names, the other side of their dispute."""
    other = result.get(link.doc_id)
    edge = next((e for e in other.disputed_by if e.superseder == item.doc_id), None) if other else None
    return _link(result, policy, edge, towards=edge.target) if edge is not None else None


def _is_active(result: RetrievalResult, doc_id: str) -> bool:
    other = result.get(doc_id)
    return other is not None and other.status == "active"


def _str_meta(meta: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = meta.get(key)
        if isinstance(value, str):
            return value
    return None


def _int_meta(meta: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def hidden_only(packet: EvidencePacket) -> bool:
    """Superseded only by records the caller may not read, or the query's filters leave out: no
    shown record stands in for it."""
    ep, flags = packet.epistemic_metadata, packet.epistemic_metadata.conflict_indicators
    return (flags.hidden_superseder or flags.filtered_superseder) and not any(link.controlling for link in ep.superseded_by)


def scope_groups(packets: Sequence[EvidencePacket]) -> list[list[int]]:
    """Indices of ``packets`` grouped by subject: records with equal scope, or linked by a
    supersession edge, are one group. Groups in order of their first member."""
    parent = list(range(len(packets)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_id: dict[str, list[int]] = {}
    by_scope: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for i, p in enumerate(packets):
        by_id.setdefault(p.doc_id, []).append(i)
        if p.scope:
            by_scope.setdefault(tuple(sorted(p.scope.items())), []).append(i)
    for i, p in enumerate(packets):
        ep = p.epistemic_metadata
        for link in [*ep.supersedes, *ep.superseded_by, *ep.possibly_superseded_by, *ep.disputed_by]:
            for j in by_id.get(link.doc_id, ()):
                parent[find(j)] = find(i)
    for members in by_scope.values():
        for j in members[1:]:
            parent[find(j)] = find(members[0])
    groups: dict[int, list[int]] = {}
    for i in range(len(packets)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def build_packets(
    result: RetrievalResult, policy: Policy | None = None, k: int | None = None, *, provenance: bool = True
) -> list[EvidencePacket]:
    """Evidence packets for the top ``k`` records of ``result`` (all when ``k`` is None), in its order,
    plus, as provenance, the superseded records those ``k`` void (so the reader sees what was
    replaced and by what; the renderer can omit them or drop them under a token budget).
    ``provenance=False`` keeps exactly the top ``k``.

    Packet ids are ``EP-<rank>``. ``policy`` (default: the one the result was resolved
    under) supplies each rule's description and scope keys for the supersession sentences;
    without any, the sentences name the rule only and use the scope entries both records share.
    """
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k}")
    policy = policy or result.policy
    shown = result.ranked[:k]
    if k is not None and provenance:
        ids = {item.doc_id for item in shown}
        shown += [item for item in result.ranked[k:] if item.status == "superseded" and ids & set(item.superseded_by)]
    return [_packet(item, result, policy, f"EP-{item.rank}") for item in shown]


def renderable_packets(
    renderer: str,
    evidence: RetrievalResult | Iterable[EvidencePacket],
    policy: Policy | None,
    k: int | None,
    *,
    provenance: bool,
    superseded: str,
) -> tuple[list[EvidencePacket], Policy | None]:
    """What a renderer shows, and the policy whose words it uses: packets built from a result
    (under the result's own policy unless one is given) or packets taken as given; checks
    the arguments every renderer shares, naming ``renderer`` in the error."""
    if superseded not in ("include", "omit"):
        raise ValueError(f"superseded must be 'include' or 'omit', got {superseded!r}")
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k}")
    if isinstance(evidence, (str, bytes)):
        raise TypeError(f"{renderer} takes a RetrievalResult or EvidencePacket objects, not text")
    if hasattr(evidence, "ranked") and hasattr(evidence, "query"):
        result = cast("RetrievalResult", evidence)
        policy = policy or result.policy
        return build_packets(result, policy, k, provenance=provenance), policy
    packets = list(evidence)[:k]
    for p in packets:
        if not isinstance(p, EvidencePacket):
            raise TypeError(f"expected EvidencePacket objects, got {type(p).__name__}")
    return packets, policy
