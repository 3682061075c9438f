"""The reader-first rendering of evidence: what a language model reads to answer.

    <evidence query-id="q1">
      <digest>lodash, CVE-2019-10744: patched. patch release 4.17.12 [EP-1] fixes the vulnerability disclosure [EP-3].</digest>
      <packet id="EP-1" status="current" type="patch release" subject="lodash, CVE-2019-10744" version="4.17.12" date="2019-07-09">…</packet>
      <packet id="EP-3" status="replaced" replaced-by="EP-1" type="vulnerability disclosure" subject="…">…</packet>
      <not-shown reason="length budget">EP-5</not-shown>
    </evidence>

It opens with the authority digest (:mod:`car_rag.evidence.digest`), then each packet with what a
reader uses: its id, ``current`` or ``replaced`` (by which packet), type, subject, version
and date as attributes (so a version never has to be read off an id), and the whole text.
Packets follow their subject: each current packet, then the records it replaced. A
``token_budget`` keeps whole packets in that order while they fit and drops the ones that
do not, rather than cutting every text; only the first packet, when it alone exceeds the
budget, is cut, and says so.
Channel scores, ranks and match lists are for audits: :func:`car_rag.evidence.audit.render_audit`.

Every string is escaped by :mod:`car_rag.evidence.xml_tree`: retrieved text never leaves its packet.
"""  # noqa: E501 (the example's packet lines are shown whole)

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from car_rag.evidence.budget import TokenCounter, approx_tokens
from car_rag.evidence.digest import authority_digest
from car_rag.evidence.packets import EvidencePacket, SupersededMode, hidden_only, renderable_packets
from car_rag.evidence.wording import (
    CUT_MARK,
    FILTERED_REPLACER,
    HIDDEN_REPLACER,
    NOT_SHOWN_REASON,
    ambiguity_sentence,
    cut_note,
    reader_status,
    record_phrase,
    ref_with_confidence,
    subject_phrase,
    uncertain_scope,
)
from car_rag.evidence.xml_tree import Element, as_of_element, iso_date

if TYPE_CHECKING:
    from car_rag.ambiguity import Ambiguity
    from car_rag.policy import Policy
    from car_rag.retriever import RetrievalResult

__all__ = ["reader_order", "render_reader"]


def reader_order(packets: Iterable[EvidencePacket]) -> list[EvidencePacket]:
    """Each current packet in rank order, followed by the records it replaced; a record
    replaced only by one the caller may not read keeps its own place (nothing shown stands
    in for it); other replaced records whose controller is not among ``packets`` come last.
    Dropping from the end of this order removes the least useful packet first."""
    packets = list(packets)
    by_id = {p.doc_id: p for p in packets}
    placed: set[str] = set()
    out: list[EvidencePacket] = []
    for p in packets:
        if p.doc_id in placed:
            continue
        if p.is_active:
            out.append(p)
            placed.add(p.doc_id)
            for link in p.epistemic_metadata.supersedes:
                target = by_id.get(link.doc_id)
                if target is not None and not target.is_active and target.doc_id not in placed:
                    out.append(target)
                    placed.add(target.doc_id)
        elif hidden_only(p):
            out.append(p)
            placed.add(p.doc_id)
    out += [p for p in packets if p.doc_id not in placed]
    return out


def _packet(packet: EvidencePacket, refs: dict[str, str], policy: Policy | None, text: str, cut: str | None) -> Element:
    ep = packet.epistemic_metadata
    replaced_by = [refs.get(link.doc_id, link.doc_id) for link in ep.superseded_by if link.controlling]
    if ep.conflict_indicators.hidden_superseder and not replaced_by:
        replaced_by = [HIDDEN_REPLACER]
    elif ep.conflict_indicators.filtered_superseder and not replaced_by:
        replaced_by = [FILTERED_REPLACER]
    possibly = [ref_with_confidence(refs.get(link.doc_id, link.doc_id), link.confidence) for link in ep.possibly_superseded_by]
    when = packet.provenance.effective_at or packet.provenance.published_at
    return Element(
        "packet",
        {
            "id": packet.evidence_packet_id,
            "status": reader_status(packet.is_active),
            "replaced-by": ", ".join(replaced_by) if not packet.is_active else None,
            "possibly-replaced-by": ", ".join(possibly) or None,
            "disputed-with": ", ".join(refs.get(link.doc_id, link.doc_id) for link in ep.disputed_by) or None,
            "type": record_phrase(packet.doc_type),
            "subject": subject_phrase(packet.scope, policy) or None,
            "subject-probability": uncertain_scope(ep.scope_probability),
            "version": packet.version,
            "date": iso_date(when),
            "cut": cut,
        },
        text,
    )


def _document(
    shown: list[EvidencePacket],
    hidden_refs: dict[str, str],
    policy: Policy | None,
    *,
    query_id: str | None,
    indent: str | None,
    dropped: list[str],
    cut_to: int | None,
    ambiguity: Ambiguity | None,
    as_of: datetime | None,
) -> str:
    refs = {**hidden_refs, **{p.doc_id: p.evidence_packet_id for p in shown}}
    root = Element("evidence", {"query-id": query_id})
    if as_of is not None:
        root.add(as_of_element(as_of))
    if ambiguity is not None:
        root.add(Element("ambiguity", {"subjects": str(ambiguity.scopes)}, ambiguity_sentence(ambiguity, policy)))
    lines = authority_digest(shown, policy, refs=hidden_refs)
    if lines:
        root.add(Element("digest", text="\n".join(line.text for line in lines)))
    for i, p in enumerate(shown):
        text = p.text.replace("\r\n", "\n").replace("\r", "\n")
        cut = None
        if cut_to is not None and i == len(shown) - 1 and len(text) > cut_to:
            cut, text = cut_note(cut_to, len(text)), text[:cut_to] + CUT_MARK
        root.add(_packet(p, refs, policy, text, cut))
    if dropped:
        root.add(Element("not-shown", {"reason": NOT_SHOWN_REASON}, ", ".join(dropped)))
    out: list[str] = []
    root.write(out, indent)
    return "".join(out)


def _without(refs: dict[str, str], packet: EvidencePacket) -> dict[str, str]:
    return {d: i for d, i in refs.items() if d != packet.doc_id}


def render_reader(
    evidence: RetrievalResult | Iterable[EvidencePacket],
    *,
    policy: Policy | None = None,
    k: int | None = None,
    superseded: SupersededMode = "include",
    token_budget: float | None = None,
    token_counter: TokenCounter | None = None,
    query_id: str | None = None,
    indent: str | None = "  ",
    provenance: bool = True,
) -> str:
    """The reader-first ``<evidence>`` for a retrieval result or for packets; ``policy``
    (default: the result's own) supplies the states and verbs that word the digest.

    ``k`` keeps the first ``k`` records of a result plus, with ``provenance``, the records
    those replaced. ``superseded="omit"`` leaves replaced records out (the digest still
    names them as not shown). ``token_budget`` (counted by ``token_counter``, default
    :func:`approx_tokens`) drops whole packets, least useful first, and lists their ids in
    ``<not-shown>``; when a single packet is left over budget its text is cut and the
    packet carries ``cut="N of M characters shown"``.
    """
    if token_budget is not None and token_budget <= 0:
        raise ValueError(f"token_budget must be > 0, got {token_budget}")
    packets, policy = renderable_packets("render_reader", evidence, policy, k, provenance=provenance, superseded=superseded)
    ordered = reader_order(packets)
    shown = [p for p in ordered if p.is_active or superseded == "include"]
    not_shown = {p.doc_id: p.evidence_packet_id for p in ordered if p not in shown}
    count = token_counter or approx_tokens
    options: dict[str, Any] = {
        "query_id": query_id,
        "indent": indent,
        "ambiguity": getattr(evidence, "ambiguity", None),
        "as_of": getattr(evidence, "as_of", None),
    }
    dropped: list[str] = []
    if token_budget is not None:
        # Greedy in reader order: keep each packet that still fits, drop one that does not
        # (a long replaced disclosure must not push out a short current record after it).
        kept: list[EvidencePacket] = []
        for p in shown:
            trial = _document([*kept, p], _without(not_shown, p), policy, dropped=dropped, cut_to=None, **options)
            if not kept or count(trial) <= token_budget:
                kept.append(p)
            else:
                not_shown[p.doc_id] = p.evidence_packet_id
                dropped.append(p.evidence_packet_id)
        shown = kept
    text = _document(shown, not_shown, policy, dropped=dropped, cut_to=None, **options)
    while token_budget is not None and len(shown) > 1 and count(text) > token_budget:
        # A later drop can lengthen an earlier digest line ("…, not shown"): drop from the end.
        last = shown.pop()
        not_shown[last.doc_id] = last.evidence_packet_id
        dropped.append(last.evidence_packet_id)
        text = _document(shown, not_shown, policy, dropped=dropped, cut_to=None, **options)
    if token_budget is not None and len(shown) == 1 and count(text) > token_budget:
        # The most useful packet alone is over budget: keep as much of its text as fits.
        lo, hi = 0, len(shown[0].text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            fits = count(_document(shown, not_shown, policy, dropped=dropped, cut_to=mid, **options)) <= token_budget
            lo, hi = (mid, hi) if fits else (lo, mid - 1)
        text = _document(shown, not_shown, policy, dropped=dropped, cut_to=lo, **options)
    return text
