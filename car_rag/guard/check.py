"""Judging an answer: :func:`check_answer` reads what the answer claims (in the policy's
state words, :mod:`car_rag.claims`) and finds where it disagrees with the authority behind
its evidence; :func:`repair_messages` asks the same model for a corrected answer. The
findings are listed in :mod:`car_rag.guard`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from car_rag.ambiguity import Ambiguity
from car_rag.claims import ClaimReader, ClaimReading
from car_rag.evidence import EvidenceForm, EvidencePacket, scope_groups
from car_rag.evidence.digest import authority_digest
from car_rag.evidence.wording import DIGEST_IDS, record_phrase
from car_rag.guard.evidence import CITATION, LABEL, GuardEvidence, Numbering, numbering, result_evidence
from car_rag.guard.findings import Finding, GuardReport
from car_rag.guard.versions import holds_now, version_findings

if TYPE_CHECKING:
    from car_rag.policy import Policy
    from car_rag.retriever import RetrievalResult

__all__ = ["check_answer", "repair_messages"]

_WORDS = re.compile(r"[^\W\d_]+")
_ENGLISH = frozenset(
    "the a an is are was were be been has have had not no it its of in to and or for that this with by from on as "
    "yes still which there can will does do".split()
)
# An answer that declines to pick among the scopes the question may mean (English, as the claim rules are).
_SAYS_IT_DEPENDS = re.compile(
    r"\b(?:it\s+)?depend(?:s|ing)\s+on\s+(?:which|what|the\s+(?:specific|particular|exact))\b|\bit\s+depends\b"
    r"|\b(?:can(?:no|')t|can\s+not|could\s+not|couldn't|unable\s+to|not\s+possible\s+to|impossible\s+to)\s+"
    r"(?:\w+\s+){0,2}?(?:tell|determine|know|say|identify|establish)\s+which\b"
    r"|\b(?:unclear|not\s+clear|ambiguous)\b[^.]*\bwhich\b|\bwhich\s+(?:one|of\s+(?:them|these|the))\b[^.]*\b(?:mean|meant|refer|asking|asked)"
    r"|\bmore\s+than\s+one\s+\w+|\b(?:several|multiple|two|three|\d+)\s+(?:\w+\s+){0,2}?(?:match|matching|fit|could\s+be|are\s+described)\b"
    r"|\bif\s+you\s+(?:mean|meant|are\s+(?:asking|referring))\b|\bambiguous\b|\bnot\s+(?:sure|certain)\s+which\b",
    re.IGNORECASE,
)


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
    evidence: RetrievalResult | Sequence[EvidencePacket] | GuardEvidence,
    policy: Policy | None = None,
    *,
    k: int | None = 5,
    form: Numbering | EvidenceForm = "packets",
) -> GuardReport:
    """Findings for ``answer`` against ``evidence``: a :class:`GuardEvidence`
    (:func:`seen_evidence`, :func:`scope_evidence`), a retrieval result taken as what the
    reader saw (its top ``k`` records and the records they supersede, numbered by rank in
    ``form``), or the packets the answer was generated from. ``policy`` (default: the
    result's own) supplies the state words; without states only the citation and version
    checks run."""
    text = _as_text(answer)
    if text is None:
        return GuardReport(False, reason=f"the answer is not text ({type(answer).__name__})")
    if not text.strip():
        return GuardReport(False, reason="empty answer")
    if isinstance(evidence, GuardEvidence):
        basis = evidence
        policy = policy or basis.policy
    elif hasattr(evidence, "ranked") and hasattr(evidence, "query"):  # a result, duck-typed
        result = cast("RetrievalResult", evidence)
        policy = policy or result.policy
        basis = result_evidence(result, policy, k, numbering(form))
    else:
        packets = tuple(evidence)
        basis = GuardEvidence(packets, frozenset(p.doc_id for p in packets), numbering(form))
    if not basis.packets and not basis.text:
        return GuardReport(False, reason="no evidence to judge against", basis=basis.basis)
    if not _reads_as_english(text):
        return GuardReport(False, reason="the answer does not read as English; the claim rules are English", basis=basis.basis)
    template = LABEL[basis.form]
    by_id = {p.evidence_packet_id.casefold(): p for p in basis.packets if p.doc_id in basis.shown}
    listed = [int(n) for p in by_id.values() for n in CITATION[basis.form].findall(p.evidence_packet_id)]
    numbers = [int(n) for n in dict.fromkeys(CITATION[basis.form].findall(text))]
    if basis.unnumbered:
        numbers = [n for n in numbers if n <= max(listed, default=0)]  # beyond them: provenance, number unknown
    cited = [template.format(n) for n in numbers]
    findings: list[Finding] = []
    unknown = [c for c in cited if c.casefold() not in by_id]
    if unknown:
        findings.append(
            Finding(
                "unknown_citation",
                f"The answer cites {', '.join(f'[{c}]' for c in unknown)}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not in the evidence.",
                tuple(unknown),
            )
        )
    known = [by_id[c.casefold()] for c in cited if c.casefold() in by_id]
    reader = ClaimReader(policy) if policy is not None and policy.states else None
    reading = reader.read(text) if reader is not None else None
    asserted = reading.asserted() if reading else []
    if reading is not None and asserted:
        assert policy is not None
        split = _ambiguous_states(basis.ambiguity, policy)
        if split:
            findings += _ambiguous_state(text, reading, basis, split, policy)
        findings += _stale_state(reading, basis, policy, {p.doc_id for p in known}, judge_subject=not split)
        if known and not any(holds_now(p, basis, policy) for p in known):
            findings.append(
                Finding(
                    "stale_citation",
                    "The answer states what holds now but cites only replaced evidence "
                    f"({', '.join(basis.ref(p) for p in known)}).",
                    tuple(p.evidence_packet_id for p in known),
                )
            )
    findings += version_findings(text, reading, reader, basis, policy)
    return GuardReport(True, tuple(findings), claims=tuple(asserted), basis=basis.basis)


def _stale_state(
    reading: ClaimReading, basis: GuardEvidence, policy: Policy, cited: set[str], *, judge_subject: bool
) -> list[Finding]:
    """A settled subject (a replaced record whose current controller is known) about which
    the answer asserts the replaced record's state, not the controller's. The subjects
    judged: the question's (unless ``judge_subject`` is off: the question may mean several)
    and those whose records the answer cites."""
    packets = list(basis.packets)
    asserted = reading.asserted()
    out = []
    for n, members in enumerate(scope_groups(packets)):
        group = [packets[i] for i in members]
        ids = {p.doc_id for p in group}
        about_question = bool(ids & basis.subject) if basis.subject else n == 0
        if not (judge_subject and about_question) and not ids & cited:
            continue
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
                digest = authority_digest(group, policy)
                now = f" The evidence says: {DIGEST_IDS.sub('', digest[0].text)}" if digest else ""
                out.append(
                    Finding(
                        "stale_state",
                        f"The answer says {policy.state_label(stale)!r}, which is what the replaced "
                        f"{record_phrase(old.doc_type, old.version)} {basis.ref(old)} said; the "
                        f"{record_phrase(controller.doc_type, controller.version)} {basis.ref(controller)} replaced it"
                        + (f" and says {policy.state_label(current)!r}." if current else ".")
                        + now,
                        tuple(p.evidence_packet_id for p in (old, controller) if p.doc_id in basis.shown),
                        claim.text if claim else "",
                    )
                )
                break
            else:
                continue
            break
    return out


def _ambiguous_states(ambiguity: Ambiguity | None, policy: Policy) -> dict[str, int]:
    """The policy states (by name) of the scopes an ambiguous question may mean, with how many
    scopes are in each; empty unless they are in two states or more (then no state is the answer)."""
    if ambiguity is None:
        return {}
    by_label = {policy.state_label(name).casefold(): name for name in policy.states}
    by_label.update({name.casefold(): name for name in policy.states})
    states: dict[str, int] = {}
    for label, count in ambiguity.states.items():
        name = by_label.get(str(label).casefold())
        if name is not None and count > 0:
            states[name] = states.get(name, 0) + int(count)
    return states if len(states) > 1 else {}


def _ambiguous_state(
    text: str, reading: ClaimReading, basis: GuardEvidence, states: Mapping[str, int], policy: Policy
) -> list[Finding]:
    """One state picked for a question that may mean scopes in several states."""
    picked = [s for s in reading.asserted() if s in states]
    if len(set(reading.asserted())) != 1 or not picked or _SAYS_IT_DEPENDS.search(text):
        return []  # claims nothing about them, gives several states, or says which one is meant decides
    state = picked[0]
    ambiguity = cast(Ambiguity, basis.ambiguity)
    counts = ", ".join(f"{n} {policy.state_label(s)}" for s, n in states.items())
    controlling = {d for m in ambiguity.members for d in m.controlling}
    refs = tuple(p.evidence_packet_id for p in basis.packets if p.doc_id in basis.shown and p.doc_id in controlling)
    claim = reading.first(state)
    return [
        Finding(
            "ambiguous_state",
            f"The question matches {ambiguity.scopes} scopes the evidence does not tell apart ({counts}); the answer says "
            f"{policy.state_label(state)!r} as if it knew which one is meant. Say that it depends on which one is meant, "
            "and what holds for each.",
            refs,
            claim.text if claim else "",
        )
    ]


def repair_messages(messages: Sequence[dict[str, str]], answer: str, report: GuardReport) -> list[dict[str, str]]:
    """The conversation that asks for a corrected answer: the original ``messages``, the
    answer, and one user message stating ``report``'s findings plainly."""
    if not report.flagged:
        raise ValueError("repair_messages needs a flagged report; unflagged answers need no repair")
    problems = "\n".join(f"- {f.message}" for f in report.findings)
    ask = (
        f"Your answer does not agree with the evidence:\n{problems}\n"
        "Answer the question again, from the current packets only. Begin with the direct answer."
    )
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": ask}]
