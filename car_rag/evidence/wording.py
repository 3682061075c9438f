"""Every sentence a reader of the evidence sees, in one place.

The renderings (:mod:`~car_rag.evidence.plain`, :mod:`~car_rag.evidence.reader`,
:mod:`~car_rag.evidence.audit`), the packets' rationale (:mod:`~car_rag.evidence.packets`) and
the authority digest (:mod:`~car_rag.evidence.digest`) decide what to say and where; this
module says it. The words were chosen against small readers' misreadings, so a change here
changes what readers answer (the reader protocol in the docs says how to measure that):

* the plain and reader-first forms say a record was *replaced* and the digest speaks the
  policy's state words ("patched", "good law"), because small readers read "superseded" as
  "not fixed" (``evals/results/llm-ghsa-freeform/``);
* packet ids stand at the end of a digest line, apart from its words: an id next to "fixes"
  is copied in place of a version (``evals/results/llm-ghsa-freeform-reader/choices/``);
* a record replaced by one the caller may not read says so and never names it;
* a scope probability is said only where the scope is a guess (under 1.00);
* a result asked as of a date says so first, in every form: its records are the authority as
  it stood that day, not now.

Record values (types, versions, scope values) reach these sentences as data: the renderings
escape what they write, and the ambiguity sentence folds white space so no value starts a
line of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from car_rag.policy import EXPLICIT_RULE

if TYPE_CHECKING:
    from car_rag.ambiguity import Ambiguity
    from car_rag.policy import Policy

__all__ = [
    "CUT_MARK",
    "DEFAULT_VERB",
    "DIGEST_IDS",
    "FILTERED_REPLACER",
    "FILTERED_REPLACER_NOTE",
    "FILTERED_SUPERSEDER_TEXT",
    "HIDDEN_REPLACER",
    "HIDDEN_REPLACER_NOTE",
    "HIDDEN_SUPERSEDER_TEXT",
    "NOT_SHOWN_REASON",
    "NOT_SUPERSEDED",
    "Link",
    "ambiguity_note",
    "ambiguity_sentence",
    "as_of_sentence",
    "compact_possibly_text",
    "compact_relation_text",
    "confidence_words",
    "conflict_note",
    "cut_note",
    "digest_current",
    "digest_disputed_authority",
    "digest_disputed_states",
    "digest_filtered_replacer",
    "digest_hidden_replacer",
    "digest_ids",
    "digest_possibly_superseded",
    "digest_replaced_not_shown",
    "digest_state",
    "digest_voids",
    "dispute_claim",
    "dispute_group_note",
    "disputed_by_text",
    "disputed_note",
    "disputed_sentence",
    "document_header",
    "dropped_reason",
    "filtered_sentence",
    "guessed_subject",
    "hidden_sentence",
    "link_label",
    "not_shown",
    "possibly_superseded_note",
    "replaced_note",
    "possibly_superseded_sentence",
    "quote_forged_headers",
    "plain_line",
    "plain_text",
    "plain_value",
    "reader_status",
    "record_label",
    "record_phrase",
    "ref_with_confidence",
    "role_phrase",
    "scope_probability_note",
    "state_per_record",
    "subject_phrase",
    "superseded_by_sentence",
    "supersedes_sentence",
    "uncertain_scope",
]


class Link(Protocol):
    """One supersession edge as the sentences need it (an :class:`~car_rag.evidence.packets.AuthorityLink`)."""

    @property
    def doc_id(self) -> str: ...
    @property
    def doc_type(self) -> str | None: ...
    @property
    def version(self) -> str | None: ...
    @property
    def rule(self) -> str: ...
    @property
    def rule_description(self) -> str: ...
    @property
    def scope(self) -> dict[str, str]: ...
    @property
    def controlling(self) -> bool: ...
    @property
    def confidence(self) -> float: ...


# ---------------------------------------------------------------------- records and subjects
def record_label(doc_type: str | None, version: str | None, doc_id: str) -> str:
    """'patch release 4.17.12', else 'patch release <doc_id>': a record's short name."""
    kind = (doc_type or "record").replace("_", " ").strip() or "record"
    return f"{kind} {version}" if version else f"{kind} {doc_id}"


def link_label(link: Link) -> str:
    """The short name of the record at the other end of ``link``."""
    return record_label(link.doc_type, link.version, link.doc_id)


def record_phrase(doc_type: str | None, version: str | None = None) -> str:
    """'patch release 4.17.12', 'ruling issued': the record's type in words, and its version."""
    kind = (doc_type or "record").replace("_", " ").strip() or "record"
    return f"{kind} {version}" if version else kind


def subject_phrase(scope: Mapping[str, str], policy: Policy | None = None) -> str:
    """'lodash, CVE-2019-10744': a scope's values, in the policy's key order."""
    keys = [k for k in (policy.scope_keys if policy else ()) if k in scope]
    keys += [k for k in scope if not policy or k not in policy.scope_keys]
    return ", ".join(scope[k] for k in keys)


def confidence_words(confidence: float) -> str:
    """'confidence 0.60': how sure an uncertain edge is, as every rendering says it."""
    return f"confidence {confidence:.2f}"


def uncertain_scope(probability: float | None) -> str | None:
    """The scope probability as a reader sees it ("0.42"), or None where the scope is certain
    (named by the question) or was never estimated: only uncertainty is worth the words."""
    if probability is None or round(probability, 2) >= 1.0:
        return None
    return f"{probability:.2f}"


# ---------------------------------------------------------------------- packets' rationale
HIDDEN_SUPERSEDER_TEXT = "superseded by a record you are not permitted to read"
"""What a packet says when the record that voids it is one the caller may not read."""

FILTERED_SUPERSEDER_TEXT = "superseded by a record this query's filters leave out"
"""What a packet says when the record that voids it is one the query's filters leave out."""

NOT_SUPERSEDED = "active: no retrieved record supersedes it"
"""The rationale of an active record nothing voids."""


def role_phrase(role: str | None, anchor_id: str | None) -> str:
    """Why a record is in the result, in words."""
    roles = {
        "anchor": "Stage-1 anchor for the query",
        "superseder": f"supersedes anchor {anchor_id}",
        "scope_match": "in the scope of an id named in the query",
    }
    return roles.get(str(role), str(role))


def supersedes_sentence(label: str, link: Link) -> str:
    """'patch release 4.17.12 supersedes vulnerability disclosure X for package lodash and …'."""
    return f"{label} supersedes {link_label(link)}{_scope_phrase(link)}{_rule_phrase(link)}{_sureness(link)}."


def superseded_by_sentence(label: str, link: Link) -> str:
    """'vulnerability disclosure X is superseded by patch release 4.17.12 for …'."""
    tail = "" if link.controlling else "; that record is itself superseded"
    return f"{label} is superseded by {link_label(link)}{_scope_phrase(link)}{_rule_phrase(link)}{_sureness(link)}{tail}."


def hidden_sentence(label: str) -> str:
    """'<label> is superseded by a record you are not permitted to read.' (no id, by design)."""
    return f"{label} is {HIDDEN_SUPERSEDER_TEXT}."


def filtered_sentence(label: str) -> str:
    """'<label> is superseded by a record this query's filters leave out.'"""
    return f"{label} is {FILTERED_SUPERSEDER_TEXT}."


def disputed_sentence(label: str, link: Link, reverse: Link | None) -> str:
    """'authority disputed: by rule R ruling Y supersedes ruling X; by rule S ruling X supersedes ruling Y.'"""
    claims = [f"by rule {link.rule} {link_label(link)} supersedes {label}"]
    if reverse is not None:
        claims.append(f"by rule {reverse.rule} {label} supersedes {link_label(link)}")
    return f"authority disputed: {'; '.join(claims)}; neither is applied, both are shown as current."


def possibly_superseded_sentence(label: str, link: Link) -> str:
    """'ruling X is possibly superseded by overruling Y …, by rule R (confidence 0.60); too unsure to void it.'"""
    return (
        f"{label} is possibly superseded by {link_label(link)}{_scope_phrase(link)}{_rule_phrase(link)} "
        f"({confidence_words(link.confidence)}); too unsure to void it, so it stays active."
    )


def _sureness(link: Link) -> str:
    return f" ({confidence_words(link.confidence)})" if link.confidence < 1.0 else ""


def _scope_phrase(link: Link) -> str:
    if link.scope:
        return " for " + " and ".join(f"{key} {value}" for key, value in link.scope.items())
    if link.rule != EXPLICIT_RULE:
        return " in every scope"
    return ""


def _rule_phrase(link: Link) -> str:
    if link.rule == EXPLICIT_RULE:
        return ", by an explicit supersedes edge"
    description = link.rule_description.strip().rstrip(".")
    return f", by rule {link.rule}" + (f" ({description})" if description else "")


# ---------------------------------------------------------------------- ambiguity
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
    keys += [k for k in dict.fromkeys(k for m in members for k in m.scope) if k not in keys]  # each key once
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


def ambiguity_note(ambiguity: Ambiguity, policy: Policy | None = None) -> str:
    """The ambiguity sentence as the plain form opens with it."""
    return f"Note: {ambiguity_sentence(ambiguity, policy)}"


def as_of_sentence(label: str) -> str:
    """What every form says first of a result asked as of a date (``label``: the date as written)."""
    return f"As of {label}: these records are the authority as it stood then; nothing dated later was considered."


# ---------------------------------------------------------------------- the authority digest
DEFAULT_VERB = "supersedes"
"""What a record does to the one it voids where no policy rule gives a verb."""

DIGEST_IDS = re.compile(r"\s*\((?:Current|Replaced):[^()]*\)\s*$")
"""The packet ids that end a digest line (:func:`digest_ids`), for readers of the line's words alone."""


def guessed_subject(subject: str, probability: str) -> str:
    """A subject the retriever only guessed, said to be a guess: the reader must not take
    "patched" about the most probable package as the answer about the asked one."""
    return f"{subject} (probability {probability} that this is the question's subject)"


def dispute_claim(rule: str, superseder: str, superseder_ref: str, target: str, target_ref: str) -> str:
    """'by rule R the ruling X (EP-2) supersedes the ruling Y (EP-1)'."""
    return f"by rule {rule} the {superseder} ({superseder_ref}) supersedes the {target} ({target_ref})"


def digest_disputed_authority(subject: str, claims: Sequence[str]) -> str:
    return f"{subject}: authority disputed: {'; '.join(claims)}. Neither is applied; all are shown as current."


def state_per_record(state_label: str | None, doc_type: str, version: str | None, packet_id: str) -> str:
    """'patched per the patch release 4.17.12 (EP-1)'; without a state, '<type> current per …'."""
    words = state_label if state_label is not None else f"{record_phrase(doc_type)} current"
    return f"{words} per the {record_phrase(doc_type, version)} ({packet_id})"


def digest_disputed_states(subject: str, parts: Sequence[str]) -> str:
    return f"{subject}: disputed: " + "; ".join(parts) + "."


def digest_state(subject: str, state_label: str) -> str:
    return f"{subject}: {state_label}."


def digest_current(subject: str, records: Sequence[str]) -> str:
    """'lodash: the patch release 4.17.12 is current.' (no state words, nothing voided)."""
    kinds = " and the ".join(dict.fromkeys(records))
    return f"{subject}: the {kinds} {'is' if len(records) == 1 else 'are'} current."


def digest_voids(record: str, verb: str, target: str, *, in_evidence: bool, subject: str | None = None) -> str:
    """'The patch release 4.17.12 fixes the vulnerability disclosure.'; with ``subject``, the
    line's opening without state words: 'lodash: the … is current; it supersedes the …'."""
    lead = f"{subject}: the {record} is current; it" if subject is not None else f"The {record}"
    where = "" if in_evidence else " (not in the evidence)"
    return f"{lead} {verb} the {target}{where}."


def digest_possibly_superseded(record: str, voider: str, confidence: float) -> str:
    return (
        f"The {record} is possibly superseded by the {voider} ({confidence_words(confidence)}); "
        "too unsure to void it, so it is shown as current."
    )


def digest_hidden_replacer(subject: str, record: str) -> str:
    return (
        f"{subject}: the {record} has been replaced by a record you are not permitted to read; "
        "the evidence does not say what replaced it."
    )


def digest_filtered_replacer(subject: str, record: str) -> str:
    return f"{subject}: the {record} has been replaced by a record this query's filters leave out."


def digest_replaced_not_shown(subject: str, record: str, replacer: str) -> str:
    return f"{subject}: the {record} has been replaced by the {replacer}, which is not shown."


def not_shown(packet_id: str) -> str:
    """A replaced record's packet id in a digest line, where the packet itself was left out."""
    return f"{packet_id}, not shown"


def digest_ids(current: Sequence[str], replaced: Sequence[str]) -> str:
    """' (Current: EP-1. Replaced: EP-3.)': the packet ids that end a digest line."""
    ids = []
    if current:
        ids.append("Current: " + ", ".join(current) + ".")
    if replaced:
        ids.append("Replaced: " + "; ".join(replaced) + ".")
    return f" ({' '.join(ids)})"


# ---------------------------------------------------------------------- plain documents
HIDDEN_REPLACER_NOTE = "replaced by a record you are not permitted to read"
"""Header note of a document voided by a record the caller may not read (never named)."""

FILTERED_REPLACER_NOTE = "replaced by a record this query's filters leave out"
"""Header note of a document voided by a record the query's filters leave out."""

CUT_MARK = " […]"
"""Where a text was cut to fit a token budget."""

_HEADER = re.compile(r"^((?:[^\S\n]|[\u200c\u200d])*)\[[^\S\n]*(Document[^\S\n]*\d+)[^\S\n]*\]", re.MULTILINE | re.IGNORECASE)
"""A line that starts like a document header, after any white space or zero-width joiners."""
_LINE_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every character Unicode (and so a reader's tokenizer, or its display) may break a line at."""
_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ud800-\udfff\ufeff]"
)
"""Control characters, the bidirectional controls (which reorder what is shown of a line: a value
could make a header read backwards), zero-width spaces and lone surrogates (no UTF-8 encoder writes them): written
as ``<U+202E>``, visible and inert."""
_DELIMITERS = re.compile(r'[()\[\];,"]')
"""What separates a plain header's parts: a value holding one is quoted, so it cannot close the
header's parentheses or add a note of its own."""


def document_header(number: int, doc_type: str, notes: Sequence[str], *, dated: bool = False, date: str | None = None) -> str:
    """'[Document 2] (vulnerability_disclosure, 2019-07-02; replaced by …)'."""
    when = f", {date or 'date unknown'}" if dated else ""
    return f"[Document {number}] ({doc_type}{when}{''.join(f'; {note}' for note in notes)})"


def quote_forged_headers(text: str) -> str:
    """A record's text with any line that starts like a document header marked as quoted."""
    return _HEADER.sub(r"\1[quoted: \2]", text)


def _visible(text: str) -> str:
    return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def plain_text(text: str) -> str:
    """A record's text as the plain form writes it: every Unicode line break a line feed (so a
    header forged after a line or paragraph separator starts a line, and is quoted), control and
    bidirectional characters made visible, lines that start like a document header quoted."""
    return quote_forged_headers(_visible(_LINE_BREAKS.sub("\n", text)))


def plain_value(value: str) -> str:
    """A record's value (type, label, rule, scope value) as a plain header writes it: on one line
    (white space of every kind folded), control and bidirectional characters made visible, and
    quoted as a JSON string where it holds a header delimiter."""
    folded = _visible(" ".join(value.split()))
    return json.dumps(folded, ensure_ascii=False) if _DELIMITERS.search(folded) else folded


def plain_line(text: str) -> str:
    """A line of the plain form built from record values (the ambiguity note): controls visible."""
    return _visible(" ".join(text.split()))


def replaced_note(replacers: Sequence[str]) -> str:
    """'replaced by patch release 4.17.12': the plain header of a replaced record, when marked."""
    return "replaced by " + " and ".join(replacers) if replacers else "replaced"


def possibly_superseded_note(voider: str, confidence: float) -> str:
    return f"possibly superseded by {voider} ({confidence_words(confidence)})"


def disputed_note(claims: Sequence[tuple[str, str]]) -> str:
    """'authority disputed by ruling X (rule R)': each (record label, rule)."""
    return "authority disputed by " + ", ".join(f"{label} (rule {rule})" for label, rule in claims)


def scope_probability_note(probability: str, subject: str) -> str:
    return f"probability {probability} that the question is about {subject or 'its subject'}"


# ---------------------------------------------------------------------- the reader-first form
HIDDEN_REPLACER = "hidden"
"""``replaced-by`` of a packet voided by a record the caller may not read."""

FILTERED_REPLACER = "filtered-out"
"""``replaced-by`` of a packet voided by a record the query's filters leave out."""

NOT_SHOWN_REASON = "length budget"
"""Why packets are listed in ``<not-shown>``."""


def reader_status(active: bool) -> str:
    """'current' or 'replaced': what a packet's status says (not 'superseded', see above)."""
    return "current" if active else "replaced"


def ref_with_confidence(ref: str, confidence: float) -> str:
    return f"{ref} ({confidence_words(confidence)})"


def cut_note(shown: int, total: int) -> str:
    return f"{shown} of {total} characters shown"


# ---------------------------------------------------------------------- the audit form
def _compact_target(link: Link, ref: str | None) -> str:
    return f"{ref} ({(link.doc_type or 'record').replace('_', ' ')})" if ref else link_label(link)


def compact_relation_text(link: Link, ref: str | None, *, voids: bool) -> str:
    """The compact form's sentence: the other record by packet id when shown, and the rule's reason."""
    target = _compact_target(link, ref)
    if link.rule == EXPLICIT_RULE:
        reason = " by an explicit supersedes edge"
    else:
        description = link.rule_description.strip().rstrip(".")
        reason = f": {description}" if description else f" by rule {link.rule}"
    if voids:
        return f"supersedes {target}{reason}."
    tail = "" if link.controlling else "; that record is itself superseded"
    return f"superseded by {target}{reason}{tail}."


def compact_possibly_text(link: Link, ref: str | None) -> str:
    return f"possibly superseded by {_compact_target(link, ref)} ({confidence_words(link.confidence)}); too unsure to void it."


def disputed_by_text(other: str, rule: str) -> str:
    return (
        f"{other} claims to supersede it by rule {rule}; it claims the reverse by another relation: disputed, neither is applied."
    )


def dispute_group_note(claims: Sequence[tuple[Link, str, str]]) -> str:
    """Both relations of a disputed pair: each (the claim's link, superseder label, target label)."""
    words = "; ".join(
        f"by rule {claim.rule}"
        + (f" ({claim.rule_description.strip().rstrip('.')})" if claim.rule_description else "")
        + f" {superseder} supersedes {target}"
        for claim, superseder, target in claims
    )
    return f"authority disputed: {words}. Neither is applied: both are shown."


def conflict_note(members: Sequence[tuple[str, str]], shared: Mapping[str, str]) -> str:
    """'2 records for package lodash disagree in status: …': each member (label, status)."""
    where = " for " + " and ".join(f"{k} {v}" for k, v in shared.items()) if shared else ", linked by supersession,"
    statuses = "; ".join(f"{label} is {status}" for label, status in members)
    return f"{len(members)} records{where} disagree in status: {statuses}."


def dropped_reason(active: bool) -> str:
    return (
        "active evidence, dropped last, lowest rank first"
        if active
        else "superseded provenance, dropped before active evidence, lowest rank first"
    )
