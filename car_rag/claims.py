"""What an answer claims about the state of its subject, read with a policy's state words.

One reader of free text for the authority guard and the answer classifier: the answer is
split into sentences; questions are skipped; in each sentence the first *hedge* — a phrase
that turns what follows into a statement about the evidence rather than about the world
("the documents do not indicate that …", "I cannot confirm whether …", "it is unclear if
…", "it depends …", "probably …") — cuts it, so only the text before the hedge can claim
anything, and a conclusion after it (", so …", ", therefore …") claims again. In what
remains, a state's ``claims`` assert it ("remains vulnerable", "has been overruled"), and a
negated claim or a negated ``term`` denies it ("has not been patched", "hasn't been fixed",
"no longer good law", "no patch", "won't be fixed", "haven't released a fix", "has yet to
be patched", "no court has overruled it", "none of the releases fix it", "a fix has not
been released"); a denial asserts the state's ``opposite`` where the policy names one.
Negators: not, never, no, none, nor, without, cannot, no longer and the contraction n't
(straight or curly apostrophe); "No," followed by punctuation is an interjection, not a
negator, and a negator's reach ends at a comma ("Not surprisingly, it was overruled"). "It
is not the case that …" / "not true that …" turns the claim after it into a denial. A
negated term followed by "in", "until", "before", "prior to" or "below" ("not fixed until
2.4", "not patched in 2.3.0") says when, not whether, and denies nothing — except "in any
…" and "in the latest/current …", which are about now; "not fixed until 2.4.1" asserts the
fix (in 2.4.1).

Some claims are *scoped*: about earlier versions ("earlier versions remain vulnerable",
"versions before 2.4.1 are still affected"), about the past ("it was still good law in
2018") or conditional ("you remain vulnerable until you upgrade"). They count as claims,
but :meth:`ClaimReading.in_force` sets them aside where the answer asserts another state
without such a scope: "It was fixed in 2.4.1; earlier versions remain vulnerable" claims
patched. What is left, asserting two states, or asserting and denying one, is an answer
that claims both ways (:meth:`ClaimReading.contradicted`).

The English of hedges, negation and scope lives here; every domain word comes from the policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from car_rag.versions import extract_versions, normalise_version

if TYPE_CHECKING:
    from car_rag.policy import Policy

__all__ = ["Claim", "ClaimReading", "ClaimReader", "sentences"]

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+|(?<=[.!?])$|\s*;\s+|\s+\(\d\)\s+|^\s*\(\d\)\s+")

# A hedge turns what follows it into a statement about the evidence.
_HEDGES = [
    r"\b(?:do|does|did)\s+not\s+(?:explicitly\s+|specifically\s+|directly\s+|clearly\s+)?"
    r"(?:indicate|mention|provide|contain|specify|state|say|show|confirm|include|address|discuss|describe|reference)"
    r"(?!\s+(?:this|the|that)\s+(?:vulnerability|flaw|bug|issue)\b)",
    r"\b(?:don't|doesn't|didn't|don’t|doesn’t|didn’t)\s+(?:explicitly\s+)?(?:indicate|mention|provide|contain|specify|state|say|show|confirm)"
    r"(?!\s+(?:this|the|that)\s+(?:vulnerability|flaw|bug|issue)\b)",
    r"\b(?:cannot|can't|can’t|can\s+not|could\s+not|couldn't|couldn’t|unable\s+to|not\s+able\s+to|impossible\s+to)\s+"
    r"(?:\w+\s+){0,2}?(?:confirm|determine|verify|tell|say|know|establish|ascertain|assess)",
    r"\b(?:unclear|not\s+clear|uncertain|unknown|not\s+known)\b",
    r"\b(?:no|not\s+any|insufficient|limited)\s+(?:specific\s+|explicit\s+|direct\s+|clear\s+)?"
    r"(?:information|mention|indication|evidence|details?|data|reference|record)\b",
    r"\bnot\s+(?:been\s+)?(?:explicitly\s+|specifically\s+|directly\s+|clearly\s+)?"
    r"(?:mentioned|stated|indicated|specified|documented|described|reported|confirmed|addressed\s+in\s+the\s+(?:provided\s+)?(?:documents|evidence|context))\b",
    r"\bno\s+(?:\w+\s+){0,3}?(?:mentioned|indicated|stated|specified|provided|given|listed|identified)\b",
    r"\bnot\s+(?:explicitly\s+)?mentioned\b",
    # "it depends which CVE you mean", "depending on the jurisdiction"
    r"\b(?:it|that|this|the\s+answer)\s+(?:(?:really|all)\s+)?depends\b|\bdepending\s+(?:on|upon)\b",
]
_NEGATOR = r"(?:\b(?:not|never|no|none|nor|without|cannot)\b|n[’']t\b)"
# A negator directly followed by punctuation ("No, it is patched") is an interjection; a
# negator's reach is two words and ends at a comma ("Not surprisingly, it was overruled").
_NEGATOR_BEFORE = re.compile(rf"{_NEGATOR}(?:\s+[^\s,;:]+){{0,2}}\s*$", re.IGNORECASE)
_NEGATOR_INSIDE = re.compile(rf"{_NEGATOR}(?!\s*[,.;:!])", re.IGNORECASE)
# "has not been overruled, modified or abrogated": the negator reaches the end of its list.
_NEGATED_LIST = re.compile(rf"{_NEGATOR}(?:\s+[^\s,;:]+){{1,3}}(?:,\s*[^\s,;:]+)*,?\s+(?:or|nor|and)\s+$", re.IGNORECASE)
# "It is not the case that it was overruled": the claim after it is denied.
_NEGATED_CLAUSE = re.compile(r"\b(?:not|n[’']t)\s+(?:the\s+case|true)\s+that\b[^,;]*$", re.IGNORECASE)
# "not fixed in 2.4" says when; "not fixed in any release", "in the latest version" says whether.
_WHEN_NOT_WHETHER = (
    r"(?!\s+(?:in(?!\s+(?:any|the\s+(?:latest|current|newest|most\s+recent))\b)"
    r"|before|prior\s+to|until|below)\b)"
)
# What may stand between a negator and the term it denies: "hasn't yet been", "won't be",
# "doesn't have a", "haven't released a", "hasn't been a".
_NEGATED_FILLER = (
    r"(?:(?:yet|been|be|even|ever|already|actually|officially|currently|have|has|had|hold|holds|"
    r"released|published|shipped|issued|provided|offered|made|a|an|any)\s+){0,3}"
)
_AUX = r"(?:has|have|had|is|are|was|were|will|would|can|could)"
# "a fix has not been released", "patched versions aren't available", "the blackout isn't in effect"
_NOT_OUT = (
    r"(?:e?s)?\s+(?:is|are|was|were|has|have|had|will|does|do)(?:\s+not|\s*n[’']t)\s+"
    r"(?:(?:yet|been|be|currently|officially|publicly)\s+){0,2}"
    r"(?:available|released|published|shipped|issued|out|provided|in\s+effect|active|applicable|in\s+place)\b"
)
# Clause boundaries inside a sentence, for the scope of "earlier versions …" and negated clauses.
_CLAUSE = re.compile(r",|:|\b(?:but|although|though|while|whereas|however)\b", re.IGNORECASE)
# A clause about earlier versions or about installations not yet upgraded.
_EARLIER = re.compile(
    r"\b(?:(?:earlier|older|previous|prior|unpatched|outdated|vulnerable)\s+(?:\w+\s+)?(?:versions?|releases?|builds?|"
    r"installations?|deployments?|systems?)|(?:versions?|releases?|builds?)\s+(?:before|prior\s+to|older\s+than|"
    r"earlier\s+than|below|up\s+to|through|<)|(?:and|or)\s+(?:earlier|older|below|lower|prior)\b"
    r"|(?:you(?:'re|’re|\s+are)?|users?|systems?|installations?|deployments?|those)\s+(?:still\s+)?(?:on|running|using)\s+"
    r"(?:version\s+)?(?:v?\d|an?\s+older|older)"
    r"|(?:have|has|did)(?:\s+not|n[’']t)\s+(?:yet\s+)?(?:upgraded|updated|patched|applied))",
    re.IGNORECASE,
)
# A fronted conditional or adverbial clause scopes the clause after it.
_FRONTED = re.compile(r"\s*(?:if|unless|for|on|in|when|until)\b", re.IGNORECASE)
# "it was still good law in 2018": a state that persisted in the past.
_PAST_BEFORE = re.compile(r"\b(?:was|were|had\s+been|had)\s+(?:once\s+|then\s+)?$", re.IGNORECASE)
_PERSISTS = re.compile(r"(?:still|remain(?:s|ed)?|continue[sd]?)\b", re.IGNORECASE)
# "until a fix is released", "if a patch is available": a condition, not a claim (one that
# names a version, "until you upgrade to 2.4.1", says the release exists).
_CONDITION_BEFORE = re.compile(r"\b(?:until|unless|once|if)\b", re.IGNORECASE)
_PRESENT = re.compile(r"\b(?:is|are|be|gets?|becomes?)\b", re.IGNORECASE)
# "you remain vulnerable until you upgrade": conditional on what follows.
_UNTIL_AFTER = re.compile(r"^\s+(?:until|unless)\b", re.IGNORECASE)
# A conclusion after a hedge claims again: "the documents do not mention a fix, so it isn't patched".
_CONCLUSION = re.compile(r",\s*(?:and\s+)?(?:so|therefore|thus|hence)\b,?", re.IGNORECASE)

Polarity = Literal["asserts", "denies"]


@dataclass(frozen=True)
class Claim:
    """One claim in an answer: ``state`` asserted or denied, the ``rule`` that found it
    (``claim``, ``denied-term``, ``negated-claim``, ``claim-until``, or ``<rule> of <state>``
    for the opposite a denial asserts), the words it was found in, and its ``scope`` when it
    is about earlier versions (``earlier``), the past (``past``) or a condition (``until``)
    rather than about now."""

    state: str
    polarity: Polarity
    rule: str
    text: str
    sentence: int
    scope: str | None = None

    @property
    def asserts(self) -> bool:
        return self.polarity == "asserts"


@dataclass(frozen=True)
class ClaimReading:
    """Everything an answer claims, the hedges that cut its sentences, and its lead: the
    state asserted by the first sentence that claims anything (None when that sentence
    asserts two states)."""

    claims: tuple[Claim, ...]
    hedges: tuple[str, ...]
    lead: str | None

    def asserted(self) -> list[str]:
        """States asserted, in order of first appearance (scoped claims included)."""
        return list(dict.fromkeys(c.state for c in self.claims if c.asserts))

    def first(self, state: str) -> Claim | None:
        return next((c for c in self.claims if c.asserts and c.state == state), None)

    def in_force(self) -> list[Claim]:
        """The claims about now: a scoped claim is set aside where the answer asserts another
        state without a scope ("fixed in 2.4.1; earlier versions remain vulnerable")."""
        now = {c.state for c in self.claims if c.asserts and c.scope is None}
        pairs = {(c.sentence, c.text): c.state for c in self.claims if c.asserts}
        out = []
        for c in self.claims:
            says = pairs.get((c.sentence, c.text))  # what the claim asserts (a denial: its opposite)
            if c.scope is None or not now - {says}:
                out.append(c)
        return out

    def current(self) -> list[str]:
        """States the claims in force assert, in order of first appearance."""
        return list(dict.fromkeys(c.state for c in self.in_force() if c.asserts))

    def contradicted(self) -> list[str]:
        """States the claims in force both assert and deny ("may trade … is not permitted")."""
        denied = {c.state for c in self.in_force() if not c.asserts}
        return [s for s in self.current() if s in denied]


def sentences(text: str) -> list[str]:
    """The answer's sentences (markdown bold removed); numbered items are sentences too."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text.replace("**", "")) if s and s.strip()]


def _clause(span: str, start: int, end: int) -> tuple[int, int]:
    """The clause of ``span`` around ``span[start:end]`` (commas, colons, "but", "although" … end it)."""
    left = max((m.end() for m in _CLAUSE.finditer(span, 0, start)), default=0)
    right = next((m.start() for m in _CLAUSE.finditer(span, end)), len(span))
    return left, right


def _conditional(span: str, start: int, claim: str) -> bool:
    """Whether the claim at ``start`` is a condition ("until a fix is released")."""
    left, _ = _clause(span, start, start)
    return bool(_CONDITION_BEFORE.search(span[left:start]) and _PRESENT.search(claim) and not re.search(r"\d", claim))


def _reach(span: str, start: int, end: int) -> tuple[int, int]:
    """Where the claim at ``span[start:end]`` reads its subject: its clause, and a fronted
    conditional before it ("If you haven't upgraded, you remain vulnerable")."""
    left, right = _clause(span, start, end)
    if left:
        before = _clause(span, left - 1, left - 1)[0]
        if _FRONTED.match(span, before):
            return before, right
    return left, right


def _scope(span: str, start: int, end: int) -> str | None:
    """Why the claim at ``span[start:end]`` may not be about now, if it may not."""
    if _EARLIER.search(span[slice(*_reach(span, start, end))]):
        return "earlier"
    if _PERSISTS.match(span, start) and _PAST_BEFORE.search(span[_clause(span, start, end)[0] : start]):
        return "past"
    if _UNTIL_AFTER.match(span[end:]):
        return "until"
    return None


_Found = tuple[Claim, tuple[int, ...] | None, list[tuple[int, ...]]]
"""A claim read, the version its clause names before it (its subject), every version its clause names."""


def _number(version: str) -> tuple[int, ...]:
    normal = normalise_version(version)
    return normal[0] if normal else ()


def _below_another_version(found: list[_Found]) -> list[Claim]:
    """The claims, a claim about a named version scoped ``earlier`` where a claim of another
    state names a later one: "It was fixed in 1.15.0. Version 1.14 is not patched." """
    out = []
    for claim, subject, _ in found:
        if (
            claim.scope is None
            and subject is not None
            and any(other.state != claim.state and any(v > subject for v in named) for other, _, named in found if other.asserts)
        ):
            claim = replace(claim, scope="earlier")
        out.append(claim)
    return out


class ClaimReader:
    """Reads answers for one policy's states (see the module docstring)."""

    def __init__(self, policy: Policy):
        self.policy = policy

    @cached_property
    def _hedge(self) -> re.Pattern[str]:
        terms = [t for state in self.policy.states.values() for t in self._terms(state)]
        hedges = list(_HEDGES)
        if terms:
            words = "|".join(f"(?:{t})" for t in terms)
            # "whether it has been patched", "it may have been overruled": about the evidence.
            hedges.append(
                rf"\b(?:whether|if)\s+(?:or\s+not\s+)?(?:\w+\s+){{0,6}}?(?:has|have|is|was|were|had)\s+(?:been\s+)?(?:{words})\b"
            )
            hedges.append(
                rf"\b(?:(?:may|might|could)\s+(?:still\s+)?(?:have\s+been|been|be)(?:\s+able\s+to)?"
                rf"|(?:possibly|perhaps|probably|likely|presumably|appears?\s+to|seems?\s+to)"
                rf"(?:\s+have)?(?:\s+been)?)\s+(?:{words})\b"
            )  # "may have been fixed"; "may trade" claims
        return re.compile("|".join(f"(?:{h})" for h in hedges), re.IGNORECASE)

    @staticmethod
    def _terms(state: object) -> list[str]:
        terms = list(state.terms)  # type: ignore[attr-defined]
        if not terms and not state.claims:  # type: ignore[attr-defined]
            terms = [re.escape(state.label or "")] if state.label else []  # type: ignore[attr-defined]
        return terms

    @cached_property
    def _patterns(self) -> list[tuple[str, str, re.Pattern[str]]]:
        """(state, rule, regex) in policy order: claims, then negated terms."""
        out = []
        for name, state in self.policy.states.items():
            for pattern in state.claims:
                out.append((name, "claim", re.compile(pattern, re.IGNORECASE)))
            terms = self._terms(state)
            if not state.claims and state.label:
                # A state known only by its label: "is recalled", "remains approved".
                label = re.escape(state.label)
                out.append(
                    (
                        name,
                        "claim",
                        re.compile(
                            rf"\b(?:is|are|was|were|has\s+been|have\s+been|remains?|still)\s+(?:\w+\s+)?{label}\b", re.IGNORECASE
                        ),
                    )
                )
            if terms:
                words = "|".join(f"(?:{t})" for t in terms)
                # "not fixed until 2.4.1": fixed, in 2.4.1
                out.append(
                    (
                        name,
                        "claim-until",
                        re.compile(
                            rf"{_NEGATOR}\s+(?:(?:yet|been|be)\s+){{0,2}}(?:{words})\s+until\s+(?:version\s+|release\s+)?v?\d+\.\d",
                            re.IGNORECASE,
                        ),
                    )
                )
                out.append(
                    (
                        name,
                        "denied-term",
                        re.compile(
                            # "no longer binding", "no official patch"
                            rf"(?:\bno\s+(?:\w+\s+)?"
                            # "no court has ever overturned", "no subsequent decision has overruled"
                            rf"|\bno\s+(?:(?!(?:it|this|that|they|which|is|are|was|were|be|been|has|have|had)\b)\w+\s+){{1,3}}?"
                            rf"(?:has|have|had)\s+(?:(?:ever|yet|been)\s+){{0,2}}"
                            # "none of the releases fix it"
                            rf"|\bnone\s+of\s+(?:\w+\s+){{1,3}}?(?:{_AUX}\s+(?:(?:ever|yet|been|be)\s+){{0,2}})?"
                            # "has yet to be patched"
                            rf"|\b(?:has|have|had|is|are|was|were)\s+yet\s+to\s+(?:be\s+)?"
                            # "not patched", "hasn't yet been fixed", "won't be fixed", "haven't released a fix"
                            rf"|{_NEGATOR}\s+{_NEGATED_FILLER})"
                            rf"(?:{words})\b{_WHEN_NOT_WHETHER}",
                            re.IGNORECASE,
                        ),
                    )
                )
                # "a fix has not been released", "patched versions aren't available"
                out.append((name, "denied-term", re.compile(rf"\b(?:{words}){_NOT_OUT}", re.IGNORECASE)))
        return out

    def read(self, text: str) -> ClaimReading:
        """Every claim in ``text`` (see the module docstring)."""
        found: list[_Found] = []
        hedges: list[str] = []
        lead: str | None = None
        seen_claim = False
        for number, sentence in enumerate(sentences(text)):
            if sentence.endswith("?"):
                continue  # a question (often the user's, echoed) claims nothing
            here = self._claims_in(self._unhedged(sentence, hedges), number)
            found += here
            asserted = {c.state for c, _, _ in here if c.asserts}
            if not seen_claim and here:
                seen_claim = True
                lead = next(iter(asserted)) if len(asserted) == 1 else None
        return ClaimReading(tuple(_below_another_version(found)), tuple(hedges), lead)

    def _unhedged(self, text: str, hedges: list[str]) -> str:
        """``text`` up to its first hedge, and a conclusion after it (", so …") read the same
        way; each hedge found is added to ``hedges``."""
        cut = self._hedge.search(text)
        if cut is None:
            return text
        hedges.append(cut.group(0))
        then = _CONCLUSION.search(text, cut.end())
        return text[: cut.start()] + (" … " + self._unhedged(text[then.end() :], hedges) if then else "")

    def _claims_in(self, span: str, number: int) -> list[_Found]:
        """The claims of one sentence, each with the version its clause names before it (its
        subject: "Version 1.14 is not patched") and every version its clause names."""
        candidates: list[tuple[int, int, Claim]] = []
        for state, rule, rx in self._patterns:
            for m in rx.finditer(span):
                polarity: Polarity = "asserts" if rule.startswith("claim") else "denies"
                if rule == "claim":
                    if _NEGATED_CLAUSE.search(span[: m.start()]):
                        polarity, rule = "denies", "negated-claim"  # "it is not the case that it was overruled"
                    elif (
                        _NEGATOR_BEFORE.search(span[: m.start()])
                        or _NEGATED_LIST.search(span[: m.start()])
                        or _NEGATOR_INSIDE.search(m.group(0))
                    ):
                        # "without encoding has been fixed", "is not good law": not this claim; a
                        # denial, where there is one, is read by the state's negated terms.
                        continue
                    elif _conditional(span, m.start(), m.group(0)):
                        continue
                candidates.append((m.start(), m.end(), Claim(state, polarity, rule, m.group(0).strip(), number)))
                break
        # Where two readings share words, the longer one is the more specific ("a blackout is
        # in effect" is about the blackout, not "is in effect" about a clearance).
        kept: list[tuple[int, int, Claim]] = []
        for start, end, claim in sorted(candidates, key=lambda c: c[0] - c[1]):
            if not any(a < end and start < b for a, b, _ in kept):
                kept.append((start, end, claim))
        out: list[_Found] = []
        for start, end, claim in sorted(kept, key=lambda c: c[0]):
            claim = replace(claim, scope=_scope(span, start, end))
            left, right = _reach(span, start, end)
            before = [_number(v) for v in extract_versions(span[left:start])]
            subject = before[-1] if before else None
            named = [_number(v) for v in extract_versions(span[left:right])]
            out.append((claim, subject, named))
            opposite = self.policy.states[claim.state].opposite
            if not claim.asserts and opposite is not None:
                out.append(
                    (
                        Claim(opposite, "asserts", f"{claim.rule} of {claim.state}", claim.text, number, claim.scope),
                        subject,
                        named,
                    )
                )
        return out

    def states_claimed(self, texts: Iterable[str]) -> set[str]:
        """States asserted anywhere in ``texts``."""
        return {s for t in texts for s in self.read(t).asserted()}
