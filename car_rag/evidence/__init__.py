"""The evidence stack: what a language model reads, built from a retrieval result.

One concept per module:

* :mod:`~car_rag.evidence.packets` — evidence packets, one per retrieved record, with their
  provenance, governance, authority links and retrieval rationale (:func:`build_packets`);
* :mod:`~car_rag.evidence.digest` — the authority digest, one sentence per subject in the
  policy's words;
* :mod:`~car_rag.evidence.plain` — the records as numbered plain documents, the default
  context for a model (:func:`render_plain`);
* :mod:`~car_rag.evidence.reader` — the reader-first form: an authority digest, then packets
  (:func:`render_reader`);
* :mod:`~car_rag.evidence.audit_xml` — the audit XML with scores, ranks and conflict groups
  (:func:`render_xml`);
* :mod:`~car_rag.evidence.budget` — how tokens are counted when evidence is fitted to a budget;
* :mod:`~car_rag.evidence.xml_tree` — the element tree both renderings write through, which
  treats every value as untrusted.
"""

from car_rag.evidence.audit_xml import render_xml
from car_rag.evidence.budget import TokenCounter, approx_tokens
from car_rag.evidence.digest import DigestLine, authority_digest
from car_rag.evidence.packets import (
    HIDDEN_SUPERSEDER_TEXT,
    AuthorityLink,
    CitationCoordinates,
    ConflictIndicators,
    EpistemicMetadata,
    EvidencePacket,
    FreshnessStatus,
    Governance,
    PacketContent,
    Provenance,
    RetrievalRationale,
    SupersededMode,
    build_packets,
    hidden_only,
    matching_spans,
    record_label,
    scope_groups,
)
from car_rag.evidence.plain import oldest_first, render_plain
from car_rag.evidence.reader import render_reader

__all__ = [
    # packets
    "HIDDEN_SUPERSEDER_TEXT", "AuthorityLink", "CitationCoordinates", "ConflictIndicators", "EpistemicMetadata",
    "EvidencePacket", "FreshnessStatus", "Governance", "PacketContent", "Provenance", "RetrievalRationale",
    "SupersededMode", "build_packets", "hidden_only", "matching_spans", "record_label", "scope_groups",
    # digest, the three renderings, the budget
    "DigestLine", "authority_digest", "oldest_first", "render_plain", "render_reader", "render_xml", "TokenCounter",
    "approx_tokens",
]
