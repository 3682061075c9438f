"""What the guard judges an answer against (:class:`GuardEvidence`): the records the reader
saw, numbered as the reader saw them (:func:`seen_evidence`), or, where that is not known, a
re-retrieval's top records and the whole of their scopes (:func:`scope_evidence`); either way
with what the store's authority graph adds (the records that replace them)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from car_rag.ambiguity import Ambiguity
from car_rag.evidence import EvidenceForm as Form
from car_rag.evidence import EvidencePacket, build_packets
from car_rag.records import tenant_key

if TYPE_CHECKING:
    from car_rag.eligibility import CallerContext
    from car_rag.graph import AuthorityGraph
    from car_rag.policy import Policy
    from car_rag.retriever import RetrievalResult

__all__ = ["EvidenceForm", "GuardEvidence", "Numbering", "numbering", "result_evidence", "scope_evidence", "seen_evidence"]

Numbering = Literal["packets", "documents"]
"""How the evidence numbers its records: ``[EP-n]`` (the reader and audit forms) or
``[Document n]`` (the plain form, :mod:`car_rag.evidence.plain`). Findings cite in the same way."""
EvidenceForm = Numbering
"""The former name of :data:`Numbering`, kept for one release (the evidence forms themselves are
:data:`car_rag.evidence.EvidenceForm`: plain, reader, audit)."""

CITATION = {"packets": re.compile(r"\bEP-(\d+)\b"), "documents": re.compile(r"\bDocument\s+(\d+)\b", re.IGNORECASE)}
"""A citation in an answer, by numbering: the number it cites."""
LABEL = {"packets": "EP-{}", "documents": "Document {}"}
"""A record's citation, by numbering."""


def numbering(form: Numbering | Form) -> Numbering:
    """How evidence in ``form`` (an evidence form: plain, reader, audit; or a numbering) numbers its records."""
    if form in ("packets", "documents"):
        return form
    if form == "plain":
        return "documents"
    if form in ("reader", "audit"):
        return "packets"
    raise ValueError(f"form must be an evidence form ('plain', 'reader', 'audit') or 'packets' or 'documents', got {form!r}")


@dataclass(frozen=True)
class GuardEvidence:
    """What the guard judges an answer against.

    ``packets`` are the records the reader saw (``shown``, numbered as the reader saw them),
    then the records the guard adds from the authority graph: those that replace them, the
    question's subject and, without the reader's evidence, every record of their scopes
    (numbered by doc id; a finding says they were not shown). ``versions_from`` says whose
    versions count as known: ``shown`` (with ``text``, the rendering the reader saw) or
    ``all``. ``subject`` holds the doc ids of the question's subject where retrieval named
    it; empty, the first shown record's subject is the question's."""

    packets: tuple[EvidencePacket, ...]
    shown: frozenset[str]
    form: Numbering = "packets"
    text: str = ""
    ambiguity: Ambiguity | None = None
    subject: frozenset[str] = frozenset()
    versions_from: Literal["shown", "all"] = "shown"
    basis: Literal["evidence", "scopes"] = "evidence"
    policy: Policy | None = None
    """The policy whose state words read the answer (the store's)."""
    unnumbered: bool = False
    """Some shown records carry no number the evidence records (provenance shown beside the
    listed records): a citation beyond the listed numbers is not judged."""

    def ref(self, packet: EvidencePacket) -> str:
        """How a finding names ``packet``: its citation, else its doc id (and, where the reader's
        evidence is known and it was not shown, says so)."""
        if packet.doc_id in self.shown and packet.evidence_packet_id != packet.doc_id:
            return f"[{packet.evidence_packet_id}]"
        if self.basis == "evidence" and packet.doc_id not in self.shown:
            return f"({packet.doc_id}, not in the evidence the answer was given)"
        return f"({packet.doc_id})"


def _relabel(packets: Iterable[EvidencePacket], shown: Sequence[str], labels: Sequence[str]) -> tuple[EvidencePacket, ...]:
    """The shown records first, in the order shown and with the reader's labels; then the
    others, labelled by doc id."""
    by_doc = {p.doc_id: p for p in packets}
    label: dict[str, str] = {}
    for doc_id, text in zip(shown, labels):
        label.setdefault(doc_id, text)  # a record shown twice keeps its first number
    first = [by_doc[d].model_copy(update={"evidence_packet_id": label[d]}) for d in label if d in by_doc]
    rest = [p.model_copy(update={"evidence_packet_id": p.doc_id}) for d, p in by_doc.items() if d not in label]
    return (*first, *rest)


def _resolved(
    graph: AuthorityGraph, policy: Policy, doc_ids: Iterable[str], caller: CallerContext | None, query: str
) -> list[EvidencePacket]:
    """Packets for ``doc_ids`` and every record that replaces them, with their status as the
    store's graph decides it for ``caller`` (Stages 2 and 3 over these records, nothing searched)."""
    from car_rag.resolution import Anchor, resolve_authority

    anchors = [Anchor(d, rank) for rank, d in enumerate(dict.fromkeys(doc_ids), 1)]
    result = resolve_authority(graph, policy, query, anchors, caller, scope_ids={})
    return build_packets(result, policy, None)


def _scope_members(graph: AuthorityGraph, doc_ids: Iterable[str], caller: CallerContext | None) -> list[str]:
    """Every record, readable by ``caller``, in the scope of each of ``doc_ids``."""
    out: dict[str, None] = {}
    for doc_id in doc_ids:
        record = graph.records.get(doc_id)
        if record is None:
            continue
        for member in graph.scope_bucket(record):
            if caller is None or caller.can_read(member):
                out.setdefault(member.doc_id)
    return list(out)


def seen_evidence(
    graph: AuthorityGraph,
    doc_ids: Sequence[str],
    policy: Policy | None = None,
    *,
    form: Numbering | Form = "documents",
    numbers: Sequence[int] | None = None,
    text: str = "",
    ambiguity: Ambiguity | None = None,
    provenance: bool = False,
    unnumbered: bool | None = None,
    subject: RetrievalResult | None = None,
    caller: CallerContext | None = None,
    query: str = "",
) -> GuardEvidence:
    """The evidence an answer was generated from: the records ``doc_ids`` in the order the
    reader saw them (numbered 1, 2, … or by ``numbers``: a result's ranks), the rendered
    ``text`` where known (its versions count as known too), and the ``ambiguity`` the
    evidence stated. The guard adds, from ``graph``, the records that replace them (what
    controls, whether or not the reader saw it); ``provenance`` adds the records they
    replace (the packet forms show those as provenance). ``unnumbered`` says the evidence
    named records beyond ``doc_ids`` under numbers it does not record (default: when
    provenance was added; the audit XML that omits replaced records still lists their ids):
    a citation beyond the listed numbers is then not judged. With ``subject`` (a re-retrieval
    for the question) the guard also knows which scope the question is about. Only the
    records shown, and ``text``, decide which versions are known. Raises ValueError naming
    the doc ids ``graph`` does not hold."""
    policy = policy or graph.policy
    if caller is not None and caller.tenant is not None:  # a tenant's results show the ids its writers gave
        doc_ids = [_held(graph, caller.tenant, d) for d in doc_ids]
    missing = [d for d in doc_ids if d not in graph.records]
    if missing:
        raise ValueError(f"{len(missing)} evidence record(s) not in the store: {', '.join(map(repr, missing[:5]))}")
    if numbers is not None and len(numbers) != len(doc_ids):
        raise ValueError(f"numbers: {len(numbers)} for {len(doc_ids)} records")
    replaced = [e.target for d in doc_ids for e in graph.superseded_by(d) if e.target not in doc_ids] if provenance else []
    subject_ids: list[str] = []
    if subject is not None and subject.ranked:
        top = subject.ranked[0].doc_id
        subject_ids = _scope_members(graph, [_held(graph, caller.tenant, top) if caller and caller.tenant else top], caller)
    form = numbering(form)
    labels = [LABEL[form].format(n) for n in (numbers if numbers is not None else range(1, len(doc_ids) + 1))]
    resolved = _resolved(graph, policy, [*doc_ids, *replaced, *subject_ids], caller, query)
    packets = _relabel(resolved, doc_ids, labels)
    # Provenance was shown (its versions were read), under packet numbers the evidence does not record.
    shown = frozenset(doc_ids) | {p.doc_id for p in resolved if p.doc_id in replaced}
    return GuardEvidence(
        packets,
        shown,
        form,
        text,
        ambiguity,
        frozenset(subject_ids),
        policy=policy,
        unnumbered=len(shown) > len(set(doc_ids)) if unnumbered is None else unnumbered,
    )


def scope_evidence(
    result: RetrievalResult,
    graph: AuthorityGraph,
    policy: Policy | None = None,
    *,
    k: int | None = 5,
    form: Numbering | Form = "packets",
    text: str | None = None,
    caller: CallerContext | None = None,
) -> GuardEvidence:
    """Evidence when the reader's is not known: ``result`` (a re-retrieval for the question)
    as a reader would have seen its top ``k`` records, numbered by rank, and every record of
    those records' scopes from ``graph`` (readable by ``caller``). Every version in those
    scopes counts as known, unless the reader's rendered ``text`` is given: then its
    versions alone do. The ambiguity is the result's."""
    policy = policy or result.policy or graph.policy
    form = numbering(form)
    top = result.top(k)
    ids = [r.doc_id for r in top]
    members = _scope_members(graph, ids, caller)
    packets = _relabel(
        _resolved(graph, policy, [*ids, *members], caller, result.query), ids, [LABEL[form].format(r.rank) for r in top]
    )
    return GuardEvidence(
        packets,
        frozenset(ids),
        form,
        text or "",
        result.ambiguity,
        versions_from="shown" if text is not None else "all",
        basis="scopes",
        policy=policy,
    )


def _held(graph: AuthorityGraph, tenant: str, doc_id: str) -> str:
    """The key ``tenant``'s record ``doc_id`` is held under, else ``doc_id`` (a public record)."""
    key = tenant_key(tenant, doc_id)
    return key if key in graph.records else doc_id


def result_evidence(result: RetrievalResult, policy: Policy | None, k: int | None, form: Numbering) -> GuardEvidence:
    """A result taken as what the reader saw: its top ``k`` and the records they replace, by rank."""
    packets = build_packets(result, policy, k)
    labels = [LABEL[form].format(p.rank) for p in packets]
    ids = [p.doc_id for p in packets]
    return GuardEvidence(_relabel(packets, ids, labels), frozenset(ids), form, ambiguity=result.ambiguity, policy=policy)
