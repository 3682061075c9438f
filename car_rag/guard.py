"""The authority-consistency guard: does an answer agree with the authority it was given?

Given an answer and the retrieval result (or evidence packets) it was generated from, the
guard reports structured findings:

``stale_state``      the answer asserts the state of a superseded record as current ("not
                     patched" while a patch release controls; "good law" while an
                     overruling does), read with the policy's state words
                     (:mod:`car_rag.claims`), about the question's subject (the first
                     packet's) or a subject whose packet it cites;
``stale_citation``   it asserts a state and cites only replaced packets;
``unknown_citation`` it cites a packet id (``EP-n``) that is not in the evidence;
``unknown_version``  it names a version that appears nowhere in the evidence.

An answer is judged or not: an empty or non-text answer, or one that does not read as
English (the claim rules are English), gets ``judged=False`` with the reason, never an
exception. :func:`repair_messages` turns findings into one follow-up message asking the
same model for a corrected answer; call it only for flagged answers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from car_rag.claims import ClaimReader
from car_rag.evidence import EvidencePacket, build_packets, scope_groups
from car_rag.evidence.digest import authority_digest, record_phrase
from car_rag.versions import extract_versions, normalise_version

if TYPE_CHECKING:
    from car_rag.policy import Policy
    from car_rag.retriever import RetrievalResult

__all__ = ["Finding", "FindingKind", "GuardReport", "check_answer", "repair_messages"]

FindingKind = Literal["stale_state", "stale_citation", "unknown_citation", "unknown_version"]

_CITATION = re.compile(r"\bEP-(\d+)\b")
_WORDS = re.compile(r"[^\W\d_]+")
_ENGLISH = frozenset(
    "the a an is are was were be been has have had not no it its of in to and or for that this with by from on as "
    "yes still which there can will does do".split()
)


@dataclass(frozen=True)
class Finding:
    """One inconsistency: its kind, a plain sentence a user (or the model) can act on, the
    packet ids it concerns and the answer's words it was found in."""

    kind: FindingKind
    message: str
    packet_ids: tuple[str, ...] = ()
    quote: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "packet_ids": list(self.packet_ids), "quote": self.quote}


@dataclass(frozen=True)
class GuardReport:
    """The guard's verdict on one answer."""

    judged: bool
    findings: tuple[Finding, ...] = ()
    reason: str = ""
    """Why the answer could not be judged, when ``judged`` is False."""
    claims: tuple[str, ...] = field(default=())
    """States the answer asserts, in order."""

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"judged": self.judged, "flagged": self.flagged, "reason": self.reason, "claims": list(self.claims),
                "findings": [f.to_dict() for f in self.findings]}


def _as_text(answer: Any) -> str | None:
    if isinstance(answer, (bytes, bytearray)):
        return bytes(answer).decode("utf-8", errors="replace")
    return answer if isinstance(answer, str) else None


def _reads_as_english(text: str) -> bool:
    """Function words make up a fifth or more of English prose; under 15% in six words or
    more, or mostly non-ASCII letters, and the claim rules would read nothing."""
    words = [w.lower() for w in _WORDS.findall(text)]
    letters = "".join(words)
    if letters and sum(not c.isascii() for c in letters) > 0.2 * len(letters):
        return False
    return len(words) < 6 or sum(w in _ENGLISH for w in words) >= 0.15 * len(words)


def check_answer(
    answer: Any,
    evidence: RetrievalResult | Sequence[EvidencePacket],
    policy: Policy | None = None,
    *,
    k: int | None = 5,
) -> GuardReport:
    """Findings for ``answer`` against ``evidence``: a retrieval result (its top ``k``
    records and the records they supersede, numbered ``EP-<rank>`` as both renderings
    number them) or the packets the answer was generated from. ``policy`` (default: the
    result's own) supplies the state words; without states only the citation and version
    checks run."""
    text = _as_text(answer)
    if text is None:
        return GuardReport(False, reason=f"the answer is not text ({type(answer).__name__})")
    if not text.strip():
        return GuardReport(False, reason="empty answer")
    if hasattr(evidence, "ranked") and hasattr(evidence, "query"):  # a result, duck-typed
        result = cast("RetrievalResult", evidence)
        policy = policy or result.policy
        packets = build_packets(result, policy, k)
    else:
        packets = list(evidence)
    if not packets:
        return GuardReport(False, reason="no evidence to judge against")
    if not _reads_as_english(text):
        return GuardReport(False, reason="the answer does not read as English; the claim rules are English")
    by_id = {p.evidence_packet_id: p for p in packets}
    cited = list(dict.fromkeys(f"EP-{n}" for n in _CITATION.findall(text)))
    findings: list[Finding] = []
    unknown = [c for c in cited if c not in by_id]
    if unknown:
        findings.append(
            Finding("unknown_citation", f"The answer cites {', '.join(unknown)}, which is not in the evidence.", tuple(unknown))
        )
    reading = ClaimReader(policy).read(text) if policy is not None and policy.states else None
    asserted = reading.asserted() if reading else []
    if reading is not None and asserted:
        findings += _stale_state(reading, packets, policy, {c for c in cited if c in by_id})  # type: ignore[arg-type]
        known = [by_id[c] for c in cited if c in by_id]
        if known and all(not p.is_active for p in known):
            findings.append(Finding(
                "stale_citation",
                "The answer states what holds now but cites only replaced evidence "
                f"({', '.join(p.evidence_packet_id for p in known)}).",
                tuple(p.evidence_packet_id for p in known),
            ))
    findings += _unknown_versions(text, packets)
    return GuardReport(True, tuple(findings), claims=tuple(asserted))


def _stale_state(reading: Any, packets: list[EvidencePacket], policy: Policy, cited: set[str]) -> list[Finding]:
    """A settled subject (a replaced record whose current controller is shown) about which
    the answer asserts the replaced record's state, not the controller's."""
    asserted = reading.asserted()
    digest = {line.controlling + line.replaced: line for line in authority_digest(packets, policy)}
    out = []
    for n, members in enumerate(scope_groups(packets)):
        group = [packets[i] for i in members]
        ids = {p.evidence_packet_id for p in group}
        if n != 0 and not ids & cited:
            continue  # not the question's subject (the first packet's), and not cited
        for old in (p for p in group if not p.is_active):
            for link in old.epistemic_metadata.superseded_by:
                controller = next((p for p in group if p.doc_id == link.doc_id and p.is_active), None)
                if controller is None:
                    continue
                stale, current = policy.state_of(old.doc_type), policy.state_of(controller.doc_type)
                if stale is None or stale == current or stale not in asserted:
                    continue
                if current in asserted and reading.lead != stale:
                    continue  # leads with what holds now; the stale state is history ("versions before 2.3 were vulnerable")
                claim = reading.first(stale)
                line = next((d for key, d in digest.items() if old.evidence_packet_id in key), None)
                now = f" The evidence says: {line.text}" if line is not None else ""
                out.append(Finding(
                    "stale_state",
                    f"The answer says {policy.state_label(stale)!r}, which is what the replaced "
                    f"{record_phrase(old.doc_type, old.version)} [{old.evidence_packet_id}] said; the "
                    f"{record_phrase(controller.doc_type, controller.version)} [{controller.evidence_packet_id}] replaced it"
                    + (f" and says {policy.state_label(current)!r}." if current else ".") + now,
                    (old.evidence_packet_id, controller.evidence_packet_id),
                    claim.text if claim else "",
                ))
                break
            else:
                continue
            break
    return out


_ANY_VERSION = re.compile(r"\d+(?:\.\d+)+")


def _unknown_versions(text: str, packets: list[EvidencePacket]) -> list[Finding]:
    # Evidence is read liberally: a version inside a URL or a tag ("/releases/tag/v0.31.2.0") counts.
    known = {normalise_version(m) for p in packets for m in [*_ANY_VERSION.findall(p.text), *([p.version] if p.version else [])]}
    named = list(dict.fromkeys(extract_versions(text)))
    missing = [v for v in named if normalise_version(v) not in known]
    if not missing:
        return []
    names = ", ".join(missing)
    return [Finding("unknown_version", f"The answer names version {names}, which appears nowhere in the evidence.", (), names)]


def repair_messages(messages: Sequence[dict[str, str]], answer: str, report: GuardReport) -> list[dict[str, str]]:
    """The conversation that asks for a corrected answer: the original ``messages``, the
    answer, and one user message stating ``report``'s findings plainly."""
    if not report.flagged:
        raise ValueError("repair_messages needs a flagged report; unflagged answers need no repair")
    problems = "\n".join(f"- {f.message}" for f in report.findings)
    ask = (f"Your answer does not agree with the evidence:\n{problems}\n"
           "Answer the question again, from the current packets only. Begin with the direct answer.")
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": ask}]
