"""The authority digest: one plain sentence per subject of the evidence, saying what holds
now and which packet controls it, in the policy's own words.

"lodash, CVE-2019-10744: patched. The patch release 4.17.12 fixes the vulnerability
disclosure. (Current: EP-1. Replaced: EP-3.)" A small reader that holds a release note which never names the CVE
still learns from this line that the note answers the question, and in the domain's
words rather than in "superseded", which small readers have been measured to read as
"not fixed" (``evals/results/llm-ghsa-freeform/``). A policy without states gets neutral
wording ("… is current; it supersedes …"). Packet ids are listed at the end of each line,
apart from the words: small readers copy an id that stands next to "fixes" into the place
of a version (evals/results/llm-ghsa-freeform-reader/choices/).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from car_rag.ambiguity import Ambiguity
from car_rag.evidence.packets import AuthorityLink, EvidencePacket, confidence_words, scope_groups, uncertain_scope
from car_rag.policy import Policy

__all__ = ["DigestLine", "ambiguity_sentence", "authority_digest", "record_phrase", "subject_phrase"]


@dataclass(frozen=True)
class DigestLine:
    """One subject of the evidence: its words, the state that holds (a policy state key,
    ``"disputed"`` when current records disagree, None when unknown), the sentence, and
    the packet ids that control it and that it replaced."""

    subject: str
    state: str | None
    text: str
    controlling: tuple[str, ...]
    replaced: tuple[str, ...]


def record_phrase(doc_type: str | None, version: str | None = None) -> str:
    """'patch release 4.17.12', 'ruling issued': the record's type in words, and its version."""
    kind = (doc_type or "record").replace("_", " ").strip() or "record"
    return f"{kind} {version}" if version else kind


def subject_phrase(scope: dict[str, str], policy: Policy | None = None) -> str:
    """'lodash, CVE-2019-10744': a scope's values, in the policy's key order."""
    keys = [k for k in (policy.scope_keys if policy else ()) if k in scope]
    keys += [k for k in scope if not policy or k not in policy.scope_keys]
    return ", ".join(scope[k] for k in keys)


_LISTED = 3
"""Subjects named per state in the ambiguity sentence; the rest are counted."""


def ambiguity_sentence(ambiguity: Ambiguity, policy: Policy | None = None) -> str:
    """One line for the reader: how many subjects the question matches without telling them
    apart, how many are in each current state, and that the evidence does not say which is
    meant. "The question matches 9 subjects it does not tell apart (all puppet): 1 patched
    (CVE-2024-00251), 8 vulnerable (CVE-2023-99314, CVE-2023-94633, CVE-2023-92794 and 5
    more). The documents below do not say which one is meant." Values come from records:
    white space of any kind (line and paragraph separators included) is folded to a space,
    so no value can start a line of its own."""
    members = ambiguity.members
    keys = [k for k in (policy.scope_keys if policy else ()) if any(k in m.scope for m in members)]
    keys += [k for m in members for k in m.scope if k not in keys]
    shared = [k for k in keys if len({m.scope.get(k) for m in members}) == 1 and members[0].scope.get(k) is not None]
    differing = [k for k in keys if k not in shared]

    def fold(value: str) -> str:
        return " ".join(value.split())

    def named(scope: Mapping[str, str]) -> str:
        return ", ".join(fold(scope[k]) for k in differing if k in scope) or "?"

    parts = []
    for state, count in ambiguity.states.items():
        names = [named(m.scope) for m in members if m.state == state]
        listed = ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
        parts.append(f"{count} {fold(state.replace('_', ' '))} ({listed})")
    common = f" (all {', '.join(fold(members[0].scope[k]) for k in shared)})" if shared else ""
    return (
        f"The question matches {ambiguity.scopes} subjects it does not tell apart{common}: {'; '.join(parts)}. "
        "The documents below do not say which one is meant."
    )


def _shared_scope(packets: Sequence[EvidencePacket]) -> dict[str, str]:
    shared = dict(packets[0].scope)
    for p in packets[1:]:
        shared = {k: v for k, v in shared.items() if p.scope.get(k) == v}
    return shared or dict(packets[0].scope)


def _verb(policy: Policy | None, link: AuthorityLink, trigger_type: str, target_type: str | None) -> str:
    """The rule's verb; for an explicit edge, the verb of a policy rule between the two types."""
    if policy is not None:
        rule = policy.rule(link.rule)
        if rule is not None and rule.verb:
            return rule.verb
        for rule in policy.rules:
            if rule.verb and target_type and rule.matches_types(trigger_type, target_type):
                return rule.verb
    return "supersedes"


def authority_digest(
    packets: Sequence[EvidencePacket], policy: Policy | None = None, *, refs: dict[str, str] | None = None
) -> list[DigestLine]:
    """A :class:`DigestLine` per subject of ``packets`` (records of one scope, or linked by
    supersession), in the order of each subject's first packet. ``refs`` maps doc ids of
    records not among ``packets`` (omitted or dropped) to their packet ids, so a line can
    name them as not shown."""
    refs = {**(refs or {}), **{p.doc_id: p.evidence_packet_id for p in packets}}
    shown = {p.evidence_packet_id for p in packets}
    lines = []
    for members in scope_groups(packets):
        group = [packets[i] for i in members]
        subject = subject_phrase(_shared_scope(group), policy) or record_phrase(group[0].doc_type)
        # A subject the retriever only guessed is said to be a guess: the reader must not
        # take "patched" about the most probable package as the answer about the asked one.
        known = [p.epistemic_metadata.scope_probability for p in group if p.epistemic_metadata.scope_probability is not None]
        probability = uncertain_scope(max(known)) if known else None
        if probability is not None:
            subject = f"{subject} (probability {probability} that this is the question's subject)"
        active = [p for p in group if p.is_active]
        replaced = [p for p in group if not p.is_active]
        states = {policy.state_of(p.doc_type) if policy else None for p in active}
        state = next(iter(states)) if len(states) == 1 else ("disputed" if active else None)
        disputes = [(p, link) for p in active for link in p.epistemic_metadata.disputed_by
                    if any(q.doc_id == link.doc_id and q.is_active for q in active)]
        if disputes:
            state = "disputed"
        sentences: list[str] = []
        elsewhere: list[str] = []  # replaced records not among the packets, by packet id
        if disputes:
            claims = "; ".join(f"by rule {link.rule} the {record_phrase(link.doc_type, link.version)} "
                               f"({refs.get(link.doc_id, link.doc_id)}) supersedes the "
                               f"{record_phrase(p.doc_type, p.version)} ({p.evidence_packet_id})" for p, link in disputes)
            sentences.append(f"{subject}: authority disputed: {claims}. Neither is applied; all are shown as current.")
        elif state == "disputed":
            parts = [f"{_state_words(policy, policy.state_of(p.doc_type) if policy else None, p)} per the "
                     f"{record_phrase(p.doc_type, p.version)} ({p.evidence_packet_id})" for p in active]
            sentences.append(f"{subject}: disputed: " + "; ".join(parts) + ".")
        elif active:
            voids = [(p, link) for p in active for link in p.epistemic_metadata.supersedes]
            if state is not None:
                sentences.append(f"{subject}: {policy.state_label(state)}.")  # type: ignore[union-attr]
            elif not voids:
                kinds = " and the ".join(dict.fromkeys(record_phrase(p.doc_type, p.version) for p in active))
                sentences.append(f"{subject}: the {kinds} {'is' if len(active) == 1 else 'are'} current.")
            for i, (p, link) in enumerate(voids):
                verb = _verb(policy, link, p.doc_type, link.doc_type)
                lead = f"The {record_phrase(p.doc_type, p.version)}"
                if state is None and i == 0:
                    lead = f"{subject}: the {record_phrase(p.doc_type, p.version)} is current; it"
                ref = refs.get(link.doc_id)
                if ref is not None and ref not in shown:
                    elsewhere.append(f"{ref}, not shown")
                where = " (not in the evidence)" if ref is None else ""
                sentences.append(f"{lead} {verb} the {record_phrase(link.doc_type, link.version)}{where}.")
            for p in active:
                for link in p.epistemic_metadata.possibly_superseded_by:
                    sentences.append(
                        f"The {record_phrase(p.doc_type, p.version)} is possibly superseded by the "
                        f"{record_phrase(link.doc_type, link.version)} ({confidence_words(link.confidence)}); "
                        "too unsure to void it, so it is shown as current."
                    )
        for p in replaced:
            replacers = p.epistemic_metadata.superseded_by
            controllers = [link for link in replacers if link.controlling and refs.get(link.doc_id) not in shown]
            if p.epistemic_metadata.conflict_indicators.hidden_superseder and not any(link.controlling for link in replacers):
                sentences.append(f"{subject}: the {record_phrase(p.doc_type, p.version)} has been replaced by a record "
                                 "you are not permitted to read; the evidence does not say what replaced it.")
            for link in controllers:
                sentences.append(f"{subject}: the {record_phrase(p.doc_type, p.version)} has been replaced by the "
                                 f"{record_phrase(link.doc_type, link.version)}, which is not shown.")
        ids = []
        if active:
            ids.append("Current: " + ", ".join(p.evidence_packet_id for p in active) + ".")
        if replaced or elsewhere:
            ids.append("Replaced: " + "; ".join([p.evidence_packet_id for p in replaced] + elsewhere) + ".")
        lines.append(DigestLine(
            subject=subject,
            state=state,
            text=" ".join(sentences) + f" ({' '.join(ids)})",
            controlling=tuple(p.evidence_packet_id for p in active),
            replaced=tuple(p.evidence_packet_id for p in replaced),
        ))
    return lines


def _state_words(policy: Policy | None, state: str | None, packet: EvidencePacket) -> str:
    return policy.state_label(state) if policy is not None and state is not None else f"{record_phrase(packet.doc_type)} current"
