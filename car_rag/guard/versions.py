"""The version findings: a version an answer names that no record the guard knows holds
(``unknown_version``), or that only replaced records hold while the answer asserts the state
of what replaced them (``superseded_version``); and which replaced records still state what
holds now (a fix replaced only by fixes on other release lines)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from car_rag.claims import ClaimReader, ClaimReading, sentences
from car_rag.evidence import EvidencePacket
from car_rag.evidence.wording import record_phrase
from car_rag.guard.evidence import GuardEvidence
from car_rag.guard.findings import Finding
from car_rag.policy import Policy
from car_rag.versions import extract_versions, normalise_version

__all__ = ["holds_now", "version_findings"]

_ANY_VERSION = re.compile(r"(\d+(?:\.\d+)+)(?:[-.]?(?:alpha|beta|rc|pre|post|dev|a|b)\.?\d*)?", re.IGNORECASE)
_HEADING = re.compile(r"^\s*(?:#|\*\*.*\*\*\s*$)|:\s*$")
# An answer that declines to pick among the scopes the question may mean (English, as the claim rules are).


def _versions(text: str) -> set[tuple[tuple[int, ...], str] | None]:
    """Every version in ``text``, with and without its pre-release suffix. Evidence is read
    liberally: a version inside a URL or a tag ("/releases/tag/v0.31.2.0") counts."""
    found = {normalise_version(v) for m in _ANY_VERSION.finditer(text) for v in (m.group(0), m.group(1))}
    return found | {normalise_version(v) for v in extract_versions(text)}


def _fix_versions(packet: EvidencePacket, words: re.Pattern[str], reader: ClaimReader, state: str) -> set[Any]:
    """Versions a replaced record states in the words of ``state``, the state of the record
    that replaced it, without denying it: read per sentence, under the heading the sentence
    stands below ("### Fixed Versions" over "* `40.8.0`")."""
    out = set()
    heading = ""
    for line in packet.text.splitlines():
        if _HEADING.search(line):
            heading = line
        for sentence in sentences(line):
            context = sentence if heading in (line, "") else f"{heading} {sentence}"
            if words.search(context) and not any(c.state == state and not c.asserts for c in reader.read(context).claims):
                out |= _versions(sentence)
    return out


def _controllers(packet: EvidencePacket, by_doc: Mapping[str, EvidencePacket]) -> list[EvidencePacket]:
    """The active records, among the known ones, that replace ``packet``."""
    return [by_doc[link.doc_id] for link in packet.epistemic_metadata.superseded_by if link.controlling and link.doc_id in by_doc]


def holds_now(packet: EvidencePacket, basis: GuardEvidence, policy: Policy) -> bool:
    """Whether ``packet`` states what holds now: it is active, or it is a fix replaced only by
    fixes on other release lines (a branch release, still its line's fix)."""
    if packet.is_active:
        return True
    by_doc = {p.doc_id: p for p in basis.packets}
    later = _controllers(packet, by_doc)
    before = policy.state_of(packet.doc_type)
    return (
        bool(later)
        and before is not None
        and all(policy.state_of(c.doc_type) == before for c in later)
        and not _replaced_on_its_line(packet, by_doc)
    )


def _record_version(packet: EvidencePacket) -> str | None:
    """The version a record is: its label, else the first version its text names ("Release Notes for v38.8.6")."""
    return packet.version or next(iter(extract_versions(packet.text)), None)


def _release_line(version: str | None) -> tuple[int, ...] | None:
    """The release line a version belongs to: its major number (``40`` of ``40.8.0``), or
    major and minor below 1.0 (``0.31`` of ``0.31.2``)."""
    parsed = normalise_version(version) if version else None
    if parsed is None:
        return None
    parts = parsed[0]
    return parts[:2] if parts[0] == 0 else parts[:1]


def _replaced_on_its_line(packet: EvidencePacket, by_doc: Mapping[str, EvidencePacket]) -> bool:
    """Whether a record that voids ``packet`` is on its release line (or either line is
    unknown): an earlier fix replaced, not a release of a parallel branch."""
    mine = _release_line(_record_version(packet))
    if mine is None:
        return True
    for link in packet.epistemic_metadata.superseded_by:
        other = by_doc.get(link.doc_id)
        line = _release_line(link.version or (_record_version(other) if other is not None else None))
        if line is None or line == mine:
            return True
    return False


def _state_words(policy: Policy | None, state: str | None) -> re.Pattern[str] | None:
    if policy is None or state is None:
        return None
    spec = policy.states[state]
    patterns = [*spec.claims, *spec.terms] or ([re.escape(spec.label)] if spec.label else [])
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE) if patterns else None


Version = Any
"""A normalised version (:func:`car_rag.versions.normalise_version`)."""


def _evidence_versions(
    basis: GuardEvidence, policy: Policy | None, reader: ClaimReader | None
) -> tuple[set[Version], dict[Version, tuple[EvidencePacket, str | None]]]:
    """Versions the known records hold as what holds now (active records, and what a replaced
    record says in its replacer's words), and versions only replaced records hold, each with
    the first such record and the state of the record that replaced it."""
    pool = [p for p in basis.packets if basis.versions_from == "all" or p.doc_id in basis.shown]
    by_doc = {p.doc_id: p for p in basis.packets}
    current: set[Version] = set()
    replaced: dict[Version, tuple[EvidencePacket, str | None]] = {}
    for p in pool:
        own = _versions(p.text) | ({normalise_version(p.version)} if p.version else set())
        if p.is_active:
            current |= own
            continue
        later = next((policy.state_of(c.doc_type) for c in _controllers(p, by_doc)), None) if policy is not None else None
        before = policy.state_of(p.doc_type) if policy is not None else None
        if later is not None and later == before and not _replaced_on_its_line(p, by_doc):
            current |= own  # a fix on another release line (39.8.1 beside 40.8.0): still that line's fix
            continue
        words = _state_words(policy, later)
        if words is not None and reader is not None and later is not None and later != before:
            fixed = _fix_versions(p, words, reader, later)
            current |= fixed
            own -= fixed
        for v in own:
            replaced.setdefault(v, (p, later))
    return current, replaced


def version_findings(
    text: str, reading: ClaimReading | None, reader: ClaimReader | None, basis: GuardEvidence, policy: Policy | None
) -> list[Finding]:
    """Versions the answer names that no known record holds, or, when every version it gives
    comes only from replaced records, the replaced ones it names with the replacer's state."""
    named = list(dict.fromkeys(extract_versions(text)))
    if not named:
        return []
    current, replaced = _evidence_versions(basis, policy, reader)
    rendered = _versions(basis.text)
    stale = [v for v in named if normalise_version(v) not in current and normalise_version(v) in replaced]
    unknown = [v for v in named if normalise_version(v) not in current | rendered | set(replaced)]
    out = []
    if unknown:
        names = ", ".join(unknown)
        where = "the evidence" if basis.versions_from == "shown" else "any record of the evidence's scopes"
        out.append(Finding("unknown_version", f"The answer names version {names}, which appears nowhere in {where}.", (), names))
    if stale and reading is not None and policy is not None and len(stale) + len(unknown) == len(named):
        old, later = replaced[normalise_version(stale[0])]
        before = policy.state_of(old.doc_type)
        # It gives the replacer's state with these versions (and does not lead with the replaced state, which
        # would be a stale_state: "vulnerable up to 9.8"), or the replaced record was itself a fix (an earlier release).
        if later is not None and later in reading.asserted() and (later == before or reading.lead != before):
            names = ", ".join(stale)
            out.append(
                Finding(
                    "superseded_version",
                    f"The answer gives version {names} for what holds now ({policy.state_label(later)!r}), but "
                    f"{'it comes' if len(stale) == 1 else 'they come'} only from the replaced "
                    f"{record_phrase(old.doc_type, old.version)} {basis.ref(old)}, not from the record that replaced it.",
                    tuple(p.evidence_packet_id for p in (old,) if p.doc_id in basis.shown),
                    names,
                )
            )
    return out
