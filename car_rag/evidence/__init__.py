"""The evidence stack: what a language model reads, built from a retrieval result.

One concept per module:

* :mod:`~car_rag.evidence.render` — :func:`render`, the one call that turns a result into
  evidence text in a form: ``plain``, ``reader`` or ``audit``;
* :mod:`~car_rag.evidence.plain` — the records as numbered plain documents, the default
  context for a model (:func:`render_plain`);
* :mod:`~car_rag.evidence.reader` — the reader-first form: an authority digest, then packets
  (:func:`render_reader`);
* :mod:`~car_rag.evidence.audit` — the audit XML with scores, ranks and conflict groups
  (:func:`render_audit`);
* :mod:`~car_rag.evidence.packets` — evidence packets, one per retrieved record, with their
  provenance, governance, authority links and retrieval rationale (:func:`build_packets`);
* :mod:`~car_rag.evidence.digest` — the authority digest, one sentence per subject in the
  policy's words;
* :mod:`~car_rag.evidence.wording` — every sentence a reader sees, for all of the above;
* :mod:`~car_rag.evidence.spans` — where the query's terms occur in a record's text;
* :mod:`~car_rag.evidence.budget` — how tokens are counted when evidence is fitted to a budget;
* :mod:`~car_rag.evidence.xml_tree` — the element tree both XML forms write through, which
  treats every value as untrusted.

``render_xml`` (now :func:`render_audit`) and the module ``car_rag.evidence.audit_xml`` (now
:mod:`~car_rag.evidence.audit`) still work for one release and warn.
"""

from car_rag.evidence.audit import render_audit
from car_rag.evidence.audit import render_xml as render_xml
from car_rag.evidence.budget import TokenCounter, approx_tokens
from car_rag.evidence.digest import DigestLine, authority_digest
from car_rag.evidence.packets import (
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
    scope_groups,
)
from car_rag.evidence.plain import oldest_first, render_plain
from car_rag.evidence.reader import render_reader
from car_rag.evidence.render import EVIDENCE_FORMS, EvidenceForm, evidence_form, render
from car_rag.evidence.spans import matching_spans
from car_rag.evidence.wording import HIDDEN_SUPERSEDER_TEXT, record_label

__all__ = [
    # one call for every form
    "EVIDENCE_FORMS",
    "EvidenceForm",
    "evidence_form",
    "render",
    # packets
    "HIDDEN_SUPERSEDER_TEXT",
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
    "build_packets",
    "hidden_only",
    "matching_spans",
    "record_label",
    "scope_groups",
    # digest, the three forms, the budget
    "DigestLine",
    "authority_digest",
    "oldest_first",
    "render_plain",
    "render_reader",
    "render_audit",
    "TokenCounter",
    "approx_tokens",
]
