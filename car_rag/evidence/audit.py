"""The audit form: evidence packets as XML with everything retrieval knows about them (ranks,
channel scores, matched terms, conflict groups), for debugging and provenance.

Layout (one ``<evidence>`` root; instructions never appear in it — they belong in the
system prompt, see :mod:`car_rag.prompts`)::

    <evidence query-id="q1">
      <evidence-packet id="EP-1" doc-id="rel-4.17.12" status="active" doc-type="patch_release" …>
        <supersedes doc-id="CVE-…" rule="patch_fixes_disclosure" scope="package=lodash; cve_id=CVE-…">
          patch release 4.17.12 supersedes vulnerability disclosure CVE-… for package lodash and …</supersedes>
        <citation uri="…" version="4.17.12"/>
        <rationale role="superseder" anchor="CVE-…"/>
        <text>…verbatim text, escaped…</text>
      </evidence-packet>
      <evidence-packet id="EP-2" doc-id="CVE-…" status="superseded" …>
        <superseded-by doc-id="rel-4.17.12" packet-ref="EP-1" controlling="true" …>…</superseded-by>
        <text>…</text>
      </evidence-packet>
      <conflict-group scope="package=lodash; cve_id=CVE-…">…members…</conflict-group>
      <dropped reason="token-budget" …>…</dropped>
    </evidence>

Every string that reaches the output — record text, ids, doc types, scope keys and values,
rule names and descriptions — is treated as untrusted. Characters XML 1.0 forbids (C0
controls other than tab, newline and carriage return, lone surrogates, U+FFFE/U+FFFF) are
replaced by U+FFFD; then ``&``, ``<`` and ``>`` are escaped everywhere (so neither a tag nor
the CDATA terminator ``]]>`` can appear), ``"`` and literal tab/newline/CR are escaped in
attribute values, and CR is escaped in text, so a conforming parser reads back exactly the
sanitized string. Tag and attribute names are constants of this module, never data. No
CDATA sections are used.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from car_rag.deprecation import warn_renamed
from car_rag.evidence.budget import TokenCounter, approx_tokens
from car_rag.evidence.packets import AuthorityLink, EvidencePacket, SupersededMode, hidden_only, renderable_packets, scope_groups
from car_rag.evidence.wording import (
    ambiguity_sentence,
    compact_possibly_text,
    compact_relation_text,
    conflict_note,
    dispute_group_note,
    disputed_by_text,
    dropped_reason,
    possibly_superseded_sentence,
    record_label,
    uncertain_scope,
)
from car_rag.evidence.xml_tree import Element, as_of_element, iso_date, short_number

if TYPE_CHECKING:
    from car_rag.ambiguity import Ambiguity
    from car_rag.policy import Policy
    from car_rag.retriever import RetrievalResult

_SCOPE_SPECIAL = re.compile(r"([\\;=])")

__all__ = ["format_scope", "parse_scope", "render_audit"]


def format_scope(scope: dict[str, str]) -> str:
    """``{"package": "lodash", "cve_id": "CVE-1"}`` → ``"package=lodash; cve_id=CVE-1"``.

    ``\\``, ``;`` and ``=`` inside keys or values are backslash-escaped, so
    :func:`parse_scope` reads any scope back unambiguously.
    """
    quote: Callable[[str], str] = lambda s: _SCOPE_SPECIAL.sub(r"\\\1", s)  # noqa: E731
    return "; ".join(f"{quote(k)}={quote(v)}" for k, v in scope.items())


def parse_scope(text: str) -> dict[str, str]:
    """Inverse of :func:`format_scope`."""
    out: dict[str, str] = {}
    if not text:
        return out
    key: list[str] | None = None
    part: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            part.append(text[i + 1])
            i += 2
            continue
        if ch == "=" and key is None:
            key, part = part, []
        elif ch == ";":
            out["".join(key or [])] = "".join(part)
            key, part = None, []
            i += 1
            if i < len(text) and text[i] == " ":
                i += 1
            continue
        else:
            part.append(ch)
        i += 1
    out["".join(key or [])] = "".join(part)
    return out


# ---------------------------------------------------------------------- packets
def _relation(tag: str, packet: EvidencePacket, link: AuthorityLink, ref: str | None, compact: bool) -> Element:
    voids = tag == "supersedes"
    if tag == "possibly-superseded-by":
        text = compact_possibly_text(link, ref) if compact else possibly_superseded_sentence(packet.label(), link)
        return Element(
            tag,
            {
                "doc-id": None if ref and compact else link.doc_id,
                "packet-ref": ref,
                "rule": link.rule,
                "confidence": short_number(link.confidence),
            },
            text,
        )
    if not compact:
        attrs = {
            "doc-id": link.doc_id,
            "packet-ref": ref,
            "doc-type": link.doc_type,
            "rule": link.rule,
            "scope": format_scope(link.scope) if link.scope else None,
        }
        text = packet.supersedes_sentence(link) if voids else packet.superseded_by_sentence(link)
    else:  # the packet named by packet-ref carries the id and type; its own scope is on this packet
        attrs = {
            "doc-id": None if ref else link.doc_id,
            "packet-ref": ref,
            "rule": link.rule,
            "scope": format_scope(link.scope) if link.scope and link.scope != packet.scope else None,
        }
        text = compact_relation_text(link, ref, voids=voids)
    if link.confidence < 1.0:
        attrs["confidence"] = short_number(link.confidence)
    if not voids:
        attrs["controlling"] = "true" if link.controlling else "false"
        if compact and link.controlling:
            attrs.pop("controlling")
    return Element(tag, attrs, text)


def _packet_element(packet: EvidencePacket, refs: dict[str, str], rationale: bool, compact: bool = False) -> Element:
    ep = packet.epistemic_metadata
    prov = packet.provenance
    el = Element(
        "evidence-packet",
        {
            "id": packet.evidence_packet_id,
            "doc-id": packet.doc_id,
            "status": packet.status,
            "doc-type": packet.doc_type,
            "rank": str(packet.rank) if packet.rank is not None and not compact else None,
            "version": packet.version,
            "published": iso_date(prov.published_at),
            "effective": iso_date(prov.effective_at),
            "source": prov.source_id,
            "authority": short_number(prov.source_authority_score),
            "permission": None if packet.governance.permission_status == "cleared" else "restricted",
            "scope": format_scope(packet.scope) if packet.scope else None,
            "scope-probability": uncertain_scope(ep.scope_probability),
        },
    )
    for link in ep.supersedes:
        el.add(_relation("supersedes", packet, link, refs.get(link.doc_id), compact))
    for link in ep.superseded_by:
        el.add(_relation("superseded-by", packet, link, refs.get(link.doc_id), compact))
    for link in ep.possibly_superseded_by:
        el.add(_relation("possibly-superseded-by", packet, link, refs.get(link.doc_id), compact))
    for link in ep.disputed_by:
        ref = refs.get(link.doc_id)
        el.add(
            Element(
                "disputed-by",
                {
                    "doc-id": None if ref and compact else link.doc_id,
                    "packet-ref": ref,
                    "rule": link.rule,
                },
                disputed_by_text(ref if ref and compact else link.label(), link.rule),
            )
        )
    if ep.conflict_indicators.hidden_superseder:
        # Never an id, a type or a rule of the hidden record: only that it exists.
        el.add(Element("superseded-by", {"hidden": "true"}, packet.hidden_sentence()))
    elif ep.conflict_indicators.filtered_superseder:
        el.add(Element("superseded-by", {"filtered-out": "true"}, packet.filtered_sentence()))
    cite = packet.citation_coordinates
    if any(v is not None for v in (cite.uri, cite.version_id, cite.section_path, cite.page_number)):
        el.add(
            Element(
                "citation",
                {
                    "uri": cite.uri,
                    "version": cite.version_id,
                    "section": cite.section_path,
                    "page": str(cite.page_number) if cite.page_number is not None else None,
                },
            )
        )
    if rationale:
        why = packet.retrieval_rationale
        r = el.add(
            Element(
                "rationale",
                {
                    "role": why.role,
                    "anchor": why.anchor_id if why.anchor_id != packet.doc_id else None,
                    "stage1-rank": str(why.stage1_rank) if why.stage1_rank is not None else None,
                    "fused-score": short_number(why.fused_score),
                    "status-rule": why.status_rule,
                },
            )
        )
        for name, score in why.channel_scores.items():
            rank = why.channel_ranks.get(name)
            r.add(
                Element("channel", {"name": name, "score": short_number(score), "rank": str(rank) if rank is not None else None})
            )
        for span in packet.content.exact_matching_spans:
            r.add(Element("match", text=span))
    el.add(Element("text", text=packet.text))
    return el


def _stated_by_links(packets: Sequence[EvidencePacket], members: list[int]) -> bool:
    """One active member, and every other member's superseded-by names a shown member: the
    group says nothing its packets' own supersession elements do not."""
    ids = {packets[i].doc_id for i in members}
    active = [i for i in members if packets[i].is_active]
    return len(active) == 1 and all(
        any(link.doc_id in ids for link in packets[i].epistemic_metadata.superseded_by)
        for i in members
        if not packets[i].is_active
    )


def _dispute_groups(packets: Sequence[EvidencePacket]) -> list[Element]:
    """A group per disputed pair shown (two relations order it both ways), naming both relations."""
    ids = {p.doc_id: p for p in packets}
    out, seen = [], set()
    for p in packets:
        for link in p.epistemic_metadata.disputed_by:
            other = ids.get(link.doc_id)
            if other is None or frozenset((p.doc_id, other.doc_id)) in seen:
                continue
            seen.add(frozenset((p.doc_id, other.doc_id)))
            back = next((b for b in other.epistemic_metadata.disputed_by if b.doc_id == p.doc_id), None)
            shared = {k: v for k, v in p.scope.items() if other.scope.get(k) == v}
            group = Element("conflict-group", {"kind": "disputed-authority", "scope": format_scope(shared) if shared else None})
            for member in (p, other):
                group.add(
                    Element("member", {"packet-ref": member.evidence_packet_id, "doc-id": member.doc_id, "status": member.status})
                )
            claims = [(other, p, link)] + ([(p, other, back)] if back is not None else [])
            for sup, tgt, claim in claims:
                group.add(
                    Element(
                        "relation", {"rule": claim.rule, "superseder": sup.evidence_packet_id, "target": tgt.evidence_packet_id}
                    )
                )
            group.add(Element("note", text=dispute_group_note([(claim, sup.label(), tgt.label()) for sup, tgt, claim in claims])))
            out.append(group)
    return out


def _conflict_groups(packets: Sequence[EvidencePacket], compact: bool = False) -> list[Element]:
    """Records of one scope (equal scope, or linked by supersession) whose statuses disagree;
    ``compact`` leaves out groups that only restate their members' supersession links. Then a
    group per disputed pair."""
    out = []
    for members in scope_groups(packets):
        statuses = {packets[i].status for i in members}
        if len(members) < 2 or len(statuses) < 2 or (compact and _stated_by_links(packets, members)):
            continue
        shared = dict(packets[members[0]].scope)
        for i in members[1:]:
            shared = {k: v for k, v in shared.items() if packets[i].scope.get(k) == v}
        group = Element("conflict-group", {"scope": format_scope(shared) if shared else None})
        for i in members:
            p = packets[i]
            group.add(Element("member", {"packet-ref": p.evidence_packet_id, "doc-id": p.doc_id, "status": p.status}))
        labels = [(record_label(packets[i].doc_type, packets[i].version, packets[i].doc_id), packets[i].status) for i in members]
        group.add(Element("note", text=conflict_note(labels, shared)))
        out.append(group)
    return out + _dispute_groups(packets)


def _document(
    shown: Sequence[EvidencePacket],
    omitted: Sequence[EvidencePacket],
    dropped: Sequence[EvidencePacket],
    *,
    budget: float | None,
    query_id: str | None,
    rationale: bool,
    indent: str | None,
    compact: bool,
    ambiguity: Ambiguity | None,
    policy: Policy | None,
    as_of: datetime | None,
) -> str:
    # A packet-ref may name an omitted or dropped packet (each is listed with its id), so a
    # packet renders the same whatever else is shown: prompts that share their first
    # packets share a prefix, which servers and hosted APIs evaluate once.
    refs: dict[str, str] = {}
    for p in [*shown, *omitted, *dropped]:
        refs.setdefault(p.doc_id, p.evidence_packet_id)
    root = Element("evidence", {"query-id": query_id})
    if as_of is not None:
        root.add(as_of_element(as_of))
    if ambiguity is not None:
        note = root.add(Element("ambiguity", {"subjects": str(ambiguity.scopes)}, ambiguity_sentence(ambiguity, policy)))
        for member in ambiguity.members:
            note.add(
                Element(
                    "subject",
                    {
                        "scope": "; ".join(f"{k}={v}" for k, v in member.scope.items()),
                        "probability": f"{member.probability:.2f}",
                        "state": member.state,
                        "controlling": " ".join(member.controlling) or None,
                    },
                )
            )
    for packet in shown:
        root.add(_packet_element(packet, refs, rationale, compact))
    for group in _conflict_groups(shown, compact):
        root.add(group)
    if omitted:
        note = Element("omitted", {"reason": "superseded"})
        for p in omitted:
            note.add(Element("packet", {"id": p.evidence_packet_id, "doc-id": p.doc_id, "status": p.status}))
        root.add(note)
    if dropped:
        note = Element("dropped", {"reason": "token-budget", "budget": short_number(budget)})
        for p in dropped:
            note.add(
                Element(
                    "packet",
                    {"id": p.evidence_packet_id, "doc-id": p.doc_id, "status": p.status, "reason": dropped_reason(p.is_active)},
                )
            )
        root.add(note)
    out: list[str] = []
    root.write(out, indent)
    return "".join(out)


def render_audit(
    evidence: RetrievalResult | Iterable[EvidencePacket],
    *,
    policy: Policy | None = None,
    k: int | None = None,
    superseded: SupersededMode = "include",
    token_budget: float | None = None,
    token_counter: TokenCounter | None = None,
    query_id: str | None = None,
    rationale: bool = True,
    indent: str | None = "  ",
    provenance: bool = True,
    compact: bool = False,
) -> str:
    """The ``<evidence>`` XML for a retrieval result (packets built with ``policy``, by default
    the result's own) or for packets.

    Active packets come first, each in its given order, then superseded (and archived) ones;
    a packet superseded only by a record the caller may not read keeps its place among the
    active ones.
    ``superseded="omit"`` leaves the superseded packets out and lists their ids in an
    ``<omitted>`` element; the default keeps them, marked ``status="superseded"`` with a
    ``<superseded-by>`` pointer. ``k`` keeps the first ``k`` records of a result (in result
    order) plus, with ``provenance`` (default), the superseded records those void.
    ``token_budget`` drops packets until the whole output fits under ``token_counter``
    (default :func:`approx_tokens`): superseded before active, lowest rank first; what was
    dropped is listed in a ``<dropped>`` element. ``indent=None`` renders without line breaks.

    ``compact`` spends fewer tokens on the same facts, for small or paid-by-token readers: a
    supersession element names a shown record by ``packet-ref`` alone (that packet carries
    its id and type), gives its scope only where it differs from the packet's, and says why
    in one short sentence; ranks are left to packet order; conflict groups that only restate
    their members' supersession elements are left out. On ghsa-freeform top-5 evidence it
    takes 55% of the full form's tokens.
    """
    packets, policy = renderable_packets("render_audit", evidence, policy, k, provenance=provenance, superseded=superseded)
    # A packet voided only by a record the caller may not read keeps its place: nothing
    # shown stands in for it (the result ranks it so too).
    first = [p for p in packets if p.is_active or hidden_only(p)]
    ordered = first + [p for p in packets if p not in first]
    if superseded == "omit":
        shown, omitted = [p for p in ordered if p.is_active], [p for p in ordered if not p.is_active]
    else:
        shown, omitted = ordered, []
    dropped: list[EvidencePacket] = []
    count = token_counter or approx_tokens
    options: dict[str, Any] = {
        "query_id": query_id,
        "rationale": rationale,
        "indent": indent,
        "compact": compact,
        "ambiguity": getattr(evidence, "ambiguity", None),
        "policy": policy,
        "as_of": getattr(evidence, "as_of", None),
    }
    text = _document(shown, omitted, dropped, budget=token_budget, **options)
    # Active packets precede superseded ones in ``shown``, each in rank order, so the last
    # one is always the least useful: superseded provenance first, lowest rank first.
    while token_budget is not None and shown and count(text) > token_budget:
        dropped.append(shown.pop())
        text = _document(shown, omitted, dropped, budget=token_budget, **options)
    return text


def render_xml(evidence: RetrievalResult | Iterable[EvidencePacket], **options: Any) -> str:
    """Deprecated: :func:`render_audit` (kept for one release)."""
    warn_renamed("render_xml", "render_audit, or render(result, 'audit')")
    return render_audit(evidence, **options)
