"""The authority-consistency guard: does an answer agree with the authority behind the
evidence it was given?

The guard judges an answer against :class:`GuardEvidence`: the records the reader saw,
numbered as it saw them, plus what the guard adds from the store's authority graph. Build
it with :func:`seen_evidence` when the evidence an answer was generated from is known (its
records, or its rendered text), and with :func:`scope_evidence` when it is not: then the
guard re-retrieves and judges over the *whole scopes* of the result's top ``k`` records,
not only the ``k`` records themselves. A :class:`~car_rag.retriever.RetrievalResult` or a
list of packets passed to :func:`check_answer` is taken as what the reader saw.

Findings:

``stale_state``        the answer asserts the state of a superseded record as current
                       ("not patched" while a patch release controls; "good law" while an
                       overruling does), read with the policy's state words
                       (:mod:`car_rag.claims`), about the question's subject or a subject
                       whose record it cites;
``stale_citation``     it asserts a state and cites only replaced records;
``unknown_citation``   it cites a record the evidence does not number (``[EP-n]`` in the
                       packet forms, ``[Document n]`` in the plain form);
``unknown_version``    it names a version that appears in no record the guard knows: the
                       records the reader saw (and the rendered text), or, without them,
                       every record of the result's scopes;
``superseded_version`` every version it gives for the fix comes from a replaced record
                       (an affected range, an earlier release that a later one replaced),
                       while it asserts the state of the record that replaced it;
``ambiguous_state``    the question plausibly names several scopes in different states
                       (:class:`~car_rag.ambiguity.Ambiguity`) and the answer picks one
                       state as if it knew which scope is meant. An answer that says it
                       depends, that it cannot tell which one is meant, or that gives both
                       states is not flagged.

A version stated by a replaced record in the words of the state that replaced it (a
disclosure's "Fixed versions: 40.8.0, 39.8.1") is what holds now, not a replaced version.

An answer is judged or not: an empty or non-text answer, or one that does not read as
English (the claim rules are English), gets ``judged=False`` with the reason, never an
exception. :func:`repair_messages` turns findings into one follow-up message asking the
same model for a corrected answer; call it only for flagged answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from car_rag.ambiguity import Ambiguity
from car_rag.claims import ClaimReader, ClaimReading, sentences
from car_rag.evidence import EvidencePacket, build_packets, scope_groups
from car_rag.evidence.digest import authority_digest
from car_rag.evidence.wording import DIGEST_IDS, record_phrase
from car_rag.versions import extract_versions, normalise_version

if TYPE_CHECKING:
    from car_rag.eligibility import CallerContext
    from car_rag.graph import AuthorityGraph
    from car_rag.policy import Policy
    from car_rag.retriever import RetrievalResult

__all__ = [
    "EvidenceForm",
    "Finding",
    "FindingKind",
    "GuardEvidence",
    "GuardReport",
    "check_answer",
    "repair_messages",
    "scope_evidence",
    "seen_evidence",
]

FindingKind = Literal[
    "stale_state", "stale_citation", "unknown_citation", "unknown_version", "superseded_version", "ambiguous_state"
]
EvidenceForm = Literal["packets", "documents"]
"""How the evidence numbers its records: ``[EP-n]`` (reader-first and audit XML) or
``[Document n]`` (plain, :mod:`car_rag.evidence.plain`). Findings cite in the same form."""

_CITATION = {"packets": re.compile(r"\bEP-(\d+)\b"), "documents": re.compile(r"\bDocument\s+(\d+)\b", re.IGNORECASE)}
_LABEL = {"packets": "EP-{}", "documents": "Document {}"}
_WORDS = re.compile(r"[^\W\d_]+")
_ENGLISH = frozenset(
    "the a an is are was were be been has have had not no it its of in to and or for that this with by from on as "
    "yes still which there can will does do".split()
)
_ANY_VERSION = re.compile(r"(\d+(?:\.\d+)+)(?:[-.]?(?:alpha|beta|rc|pre|post|dev|a|b)\.?\d*)?", re.IGNORECASE)
_HEADING = re.compile(r"^\s*(?:#|\*\*.*\*\*\s*$)|:\s*$")
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


@dataclass(frozen=True)
class Finding:
    """One inconsistency: its kind, a plain sentence a user (or the model) can act on, the
    records it concerns (as the evidence numbers them) and the answer's words it was found in."""

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
    basis: str = ""
    """What it was judged against: ``evidence`` (what the reader saw) or ``scopes`` (re-retrieved, whole scopes)."""

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"judged": self.judged, "flagged": self.flagged, "reason": self.reason, "claims": list(self.claims),
                "basis": self.basis, "findings": [f.to_dict() for f in self.findings]}


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
    form: EvidenceForm = "packets"
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


# ---------------------------------------------------------------------------- evidence

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
    form: EvidenceForm = "documents",
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
    missing = [d for d in doc_ids if d not in graph.records]
    if missing:
        raise ValueError(f"{len(missing)} evidence record(s) not in the store: {', '.join(map(repr, missing[:5]))}")
    if numbers is not None and len(numbers) != len(doc_ids):
        raise ValueError(f"numbers: {len(numbers)} for {len(doc_ids)} records")
    replaced = [e.target for d in doc_ids for e in graph.superseded_by(d) if e.target not in doc_ids] if provenance else []
    subject_ids: list[str] = []
    if subject is not None and subject.ranked:
        subject_ids = _scope_members(graph, [subject.ranked[0].doc_id], caller)
    labels = [_LABEL[form].format(n) for n in (numbers if numbers is not None else range(1, len(doc_ids) + 1))]
    resolved = _resolved(graph, policy, [*doc_ids, *replaced, *subject_ids], caller, query)
    packets = _relabel(resolved, doc_ids, labels)
    # Provenance was shown (its versions were read), under packet numbers the evidence does not record.
    shown = frozenset(doc_ids) | {p.doc_id for p in resolved if p.doc_id in replaced}
    return GuardEvidence(packets, shown, form, text, ambiguity, frozenset(subject_ids), policy=policy,
                         unnumbered=len(shown) > len(set(doc_ids)) if unnumbered is None else unnumbered)


def scope_evidence(
    result: RetrievalResult,
    graph: AuthorityGraph,
    policy: Policy | None = None,
    *,
    k: int | None = 5,
    form: EvidenceForm = "packets",
    text: str | None = None,
    caller: CallerContext | None = None,
) -> GuardEvidence:
    """Evidence when the reader's is not known: ``result`` (a re-retrieval for the question)
    as a reader would have seen its top ``k`` records, numbered by rank, and every record of
    those records' scopes from ``graph`` (readable by ``caller``). Every version in those
    scopes counts as known, unless the reader's rendered ``text`` is given: then its
    versions alone do. The ambiguity is the result's."""
    policy = policy or result.policy or graph.policy
    top = result.top(k)
    ids = [r.doc_id for r in top]
    members = _scope_members(graph, ids, caller)
    packets = _relabel(_resolved(graph, policy, [*ids, *members], caller, result.query), ids,
                       [_LABEL[form].format(r.rank) for r in top])
    return GuardEvidence(packets, frozenset(ids), form, text or "", result.ambiguity,
                         versions_from="shown" if text is not None else "all", basis="scopes", policy=policy)


def _result_evidence(result: RetrievalResult, policy: Policy | None, k: int | None, form: EvidenceForm) -> GuardEvidence:
    """A result taken as what the reader saw: its top ``k`` and the records they replace, by rank."""
    packets = build_packets(result, policy, k)
    labels = [_LABEL[form].format(p.rank) for p in packets]
    ids = [p.doc_id for p in packets]
    return GuardEvidence(_relabel(packets, ids, labels), frozenset(ids), form, ambiguity=result.ambiguity, policy=policy)


# ---------------------------------------------------------------------------- judging

def check_answer(
    answer: Any,
    evidence: RetrievalResult | Sequence[EvidencePacket] | GuardEvidence,
    policy: Policy | None = None,
    *,
    k: int | None = 5,
    form: EvidenceForm = "packets",
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
        basis = _result_evidence(result, policy, k, form)
    else:
        packets = tuple(evidence)
        basis = GuardEvidence(packets, frozenset(p.doc_id for p in packets), form)
    if not basis.packets and not basis.text:
        return GuardReport(False, reason="no evidence to judge against", basis=basis.basis)
    if not _reads_as_english(text):
        return GuardReport(False, reason="the answer does not read as English; the claim rules are English", basis=basis.basis)
    template = _LABEL[basis.form]
    by_id = {p.evidence_packet_id.casefold(): p for p in basis.packets if p.doc_id in basis.shown}
    listed = [int(n) for p in by_id.values() for n in _CITATION[basis.form].findall(p.evidence_packet_id)]
    numbers = [int(n) for n in dict.fromkeys(_CITATION[basis.form].findall(text))]
    if basis.unnumbered:
        numbers = [n for n in numbers if n <= max(listed, default=0)]  # beyond them: provenance, number unknown
    cited = [template.format(n) for n in numbers]
    findings: list[Finding] = []
    unknown = [c for c in cited if c.casefold() not in by_id]
    if unknown:
        findings.append(Finding("unknown_citation", f"The answer cites {', '.join(f'[{c}]' for c in unknown)}, which "
                                f"{'is' if len(unknown) == 1 else 'are'} not in the evidence.", tuple(unknown)))
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
        if known and not any(_holds(p, basis, policy) for p in known):
            findings.append(Finding(
                "stale_citation",
                "The answer states what holds now but cites only replaced evidence "
                f"({', '.join(basis.ref(p) for p in known)}).",
                tuple(p.evidence_packet_id for p in known),
            ))
    findings += _version_findings(text, reading, reader, basis, policy)
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
                out.append(Finding(
                    "stale_state",
                    f"The answer says {policy.state_label(stale)!r}, which is what the replaced "
                    f"{record_phrase(old.doc_type, old.version)} {basis.ref(old)} said; the "
                    f"{record_phrase(controller.doc_type, controller.version)} {basis.ref(controller)} replaced it"
                    + (f" and says {policy.state_label(current)!r}." if current else ".") + now,
                    tuple(p.evidence_packet_id for p in (old, controller) if p.doc_id in basis.shown),
                    claim.text if claim else "",
                ))
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
    return [Finding(
        "ambiguous_state",
        f"The question matches {ambiguity.scopes} scopes the evidence does not tell apart ({counts}); the answer says "
        f"{policy.state_label(state)!r} as if it knew which one is meant. Say that it depends on which one is meant, "
        "and what holds for each.",
        refs,
        claim.text if claim else "",
    )]


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


def _holds(packet: EvidencePacket, basis: GuardEvidence, policy: Policy) -> bool:
    """Whether ``packet`` states what holds now: it is active, or it is a fix replaced only by
    fixes on other release lines (a branch release, still its line's fix)."""
    if packet.is_active:
        return True
    by_doc = {p.doc_id: p for p in basis.packets}
    later = _controllers(packet, by_doc)
    before = policy.state_of(packet.doc_type)
    return (bool(later) and before is not None and all(policy.state_of(c.doc_type) == before for c in later)
            and not _replaced_on_its_line(packet, by_doc))


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


def _version_findings(
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
            out.append(Finding(
                "superseded_version",
                f"The answer gives version {names} for what holds now ({policy.state_label(later)!r}), but "
                f"{'it comes' if len(stale) == 1 else 'they come'} only from the replaced "
                f"{record_phrase(old.doc_type, old.version)} {basis.ref(old)}, not from the record that replaced it.",
                tuple(p.evidence_packet_id for p in (old,) if p.doc_id in basis.shown),
                names,
            ))
    return out


def repair_messages(messages: Sequence[dict[str, str]], answer: str, report: GuardReport) -> list[dict[str, str]]:
    """The conversation that asks for a corrected answer: the original ``messages``, the
    answer, and one user message stating ``report``'s findings plainly."""
    if not report.flagged:
        raise ValueError("repair_messages needs a flagged report; unflagged answers need no repair")
    problems = "\n".join(f"- {f.message}" for f in report.findings)
    ask = (f"Your answer does not agree with the evidence:\n{problems}\n"
           "Answer the question again, from the current packets only. Begin with the direct answer.")
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": ask}]
