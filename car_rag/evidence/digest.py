"""The authority digest: one plain sentence per subject of the evidence, saying what holds
now and which packet controls it, in the policy's own words.

"lodash, CVE-2019-10744: patched. The patch release 4.17.12 fixes the vulnerability
disclosure. (Current: EP-1. Replaced: EP-3.)" A small reader that holds a release note which never names the CVE
still learns from this line that the note answers the question, and in the domain's
words rather than in "superseded", which small readers have been measured to read as
"not fixed" (``evals/results/llm-ghsa-freeform/``). A policy without states gets neutral
wording ("… is current; it supersedes …"). Packet ids are listed at the end of each line,
apart from the words: small readers copy an id that stands next to "fixes" into the place
of a version (evals/results/llm-ghsa-freeform-reader/choices/). The sentences themselves are
:mod:`car_rag.evidence.wording`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import car_rag.evidence.wording as wording
from car_rag.deprecation import warn_renamed
from car_rag.evidence.packets import AuthorityLink, EvidencePacket, scope_groups
from car_rag.evidence.wording import (
    DEFAULT_VERB,
    digest_current,
    digest_disputed_authority,
    digest_disputed_states,
    digest_filtered_replacer,
    digest_hidden_replacer,
    digest_ids,
    digest_possibly_superseded,
    digest_replaced_not_shown,
    digest_state,
    digest_voids,
    dispute_claim,
    guessed_subject,
    not_shown,
    record_phrase,
    state_per_record,
    subject_phrase,
    uncertain_scope,
)
from car_rag.policy import Policy

if TYPE_CHECKING:
    from car_rag.ambiguity import Ambiguity

__all__ = ["DigestLine", "ambiguity_sentence", "authority_digest"]


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
    return DEFAULT_VERB


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
            subject = guessed_subject(subject, probability)
        active = [p for p in group if p.is_active]
        replaced = [p for p in group if not p.is_active]
        states = {policy.state_of(p.doc_type) if policy else None for p in active}
        state = next(iter(states)) if len(states) == 1 else ("disputed" if active else None)
        disputes = [
            (p, link)
            for p in active
            for link in p.epistemic_metadata.disputed_by
            if any(q.doc_id == link.doc_id and q.is_active for q in active)
        ]
        if disputes:
            state = "disputed"
        sentences: list[str] = []
        elsewhere: list[str] = []  # replaced records not among the packets, by packet id
        if disputes:
            claims = [
                dispute_claim(
                    link.rule,
                    record_phrase(link.doc_type, link.version),
                    refs.get(link.doc_id, link.doc_id),
                    record_phrase(p.doc_type, p.version),
                    p.evidence_packet_id,
                )
                for p, link in disputes
            ]
            sentences.append(digest_disputed_authority(subject, claims))
        elif state == "disputed":
            parts = [state_per_record(_state_label(policy, p), p.doc_type, p.version, p.evidence_packet_id) for p in active]
            sentences.append(digest_disputed_states(subject, parts))
        elif active:
            voids = [(p, link) for p in active for link in p.epistemic_metadata.supersedes]
            if state is not None:
                sentences.append(digest_state(subject, policy.state_label(state)))  # type: ignore[union-attr]
            elif not voids:
                sentences.append(digest_current(subject, [record_phrase(p.doc_type, p.version) for p in active]))
            for i, (p, link) in enumerate(voids):
                ref = refs.get(link.doc_id)
                if ref is not None and ref not in shown:
                    elsewhere.append(not_shown(ref))
                sentences.append(
                    digest_voids(
                        record_phrase(p.doc_type, p.version),
                        _verb(policy, link, p.doc_type, link.doc_type),
                        record_phrase(link.doc_type, link.version),
                        in_evidence=ref is not None,
                        subject=subject if state is None and i == 0 else None,
                    )
                )
            for p in active:
                for link in p.epistemic_metadata.possibly_superseded_by:
                    sentences.append(
                        digest_possibly_superseded(
                            record_phrase(p.doc_type, p.version), record_phrase(link.doc_type, link.version), link.confidence
                        )
                    )
        for p in replaced:
            replacers = p.epistemic_metadata.superseded_by
            controllers = [link for link in replacers if link.controlling and refs.get(link.doc_id) not in shown]
            flags = p.epistemic_metadata.conflict_indicators
            if flags.hidden_superseder and not any(link.controlling for link in replacers):
                sentences.append(digest_hidden_replacer(subject, record_phrase(p.doc_type, p.version)))
            elif flags.filtered_superseder and not any(link.controlling for link in replacers):
                sentences.append(digest_filtered_replacer(subject, record_phrase(p.doc_type, p.version)))
            for link in controllers:
                sentences.append(
                    digest_replaced_not_shown(
                        subject, record_phrase(p.doc_type, p.version), record_phrase(link.doc_type, link.version)
                    )
                )
        current = [p.evidence_packet_id for p in active]
        lines.append(
            DigestLine(
                subject=subject,
                state=state,
                text=" ".join(sentences) + digest_ids(current, [p.evidence_packet_id for p in replaced] + elsewhere),
                controlling=tuple(current),
                replaced=tuple(p.evidence_packet_id for p in replaced),
            )
        )
    return lines


def _state_label(policy: Policy | None, packet: EvidencePacket) -> str | None:
    state = policy.state_of(packet.doc_type) if policy is not None else None
    return policy.state_label(state) if policy is not None and state is not None else None


def ambiguity_sentence(ambiguity: Ambiguity, policy: Policy | None = None) -> str:
    """Deprecated: :func:`car_rag.evidence.wording.ambiguity_sentence` (kept for one release)."""
    warn_renamed("car_rag.evidence.digest.ambiguity_sentence", "car_rag.evidence.wording.ambiguity_sentence")
    return wording.ambiguity_sentence(ambiguity, policy)
