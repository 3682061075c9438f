"""What an answer claims about the state of its subject, read with a policy's state words.

One reader of free text for the authority guard and the answer classifier: the answer is
split into sentences; questions are skipped; in each sentence the first *hedge* — a phrase
that turns what follows into a statement about the evidence rather than about the world
("the documents do not indicate that …", "I cannot confirm whether …", "it is unclear if
…") — cuts it, so only the text before the hedge can claim anything. In what remains, a
state's ``claims`` assert it ("remains vulnerable", "has been overruled"), and a negated
claim or a negated ``term`` denies it ("has not been patched", "hasn't been fixed", "no
longer good law", "no patch"); a denial asserts the state's ``opposite`` where the policy
names one. Negators: not, never, no, nor, without, cannot, no longer and the contraction
n't; "No," followed by punctuation is an interjection, not a negator. A negated term
followed by "in", "until", "before", "prior to" or "below" ("not fixed until 2.4") says
when, not whether, and denies nothing.

The English of hedges and negation lives here; every domain word comes from the policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

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
]
_NEGATOR = r"(?:\b(?:not|never|no|nor|without|cannot)\b|n[’']t\b)"
# A negator directly followed by punctuation ("No, it is patched") is an interjection.
_NEGATOR_BEFORE = re.compile(rf"{_NEGATOR}(?:\s+\S+){{0,2}}\s*$", re.IGNORECASE)
_NEGATOR_INSIDE = re.compile(rf"{_NEGATOR}(?!\s*[,.;:!])", re.IGNORECASE)
_WHEN_NOT_WHETHER = r"(?!\s+(?:in|before|prior\s+to|until|below)\b)"

Polarity = Literal["asserts", "denies"]


@dataclass(frozen=True)
class Claim:
    """One claim in an answer: ``state`` asserted or denied, the ``rule`` that found it
    (``claim``, ``denied-term``, or ``denied-term of <state>`` for the opposite a denial
    asserts) and the words it was found in."""

    state: str
    polarity: Polarity
    rule: str
    text: str
    sentence: int

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
        """States asserted, in order of first appearance."""
        return list(dict.fromkeys(c.state for c in self.claims if c.asserts))

    def first(self, state: str) -> Claim | None:
        return next((c for c in self.claims if c.asserts and c.state == state), None)


def sentences(text: str) -> list[str]:
    """The answer's sentences (markdown bold removed); numbered items are sentences too."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text.replace("**", "")) if s and s.strip()]


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
            hedges.append(rf"\b(?:whether|if)\s+(?:or\s+not\s+)?(?:\w+\s+){{0,6}}?(?:has|have|is|was|were|had)\s+(?:been\s+)?(?:{words})\b")
            hedges.append(rf"\b(?:(?:may|might|could)\s+(?:have\s+been|been|be)|(?:possibly|perhaps|likely|presumably|appears?\s+to|seems?\s+to)"
                          rf"(?:\s+have)?(?:\s+been)?)\s+(?:{words})\b")  # "may have been fixed"; "may trade" claims
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
                out.append((name, "claim", re.compile(
                    rf"\b(?:is|are|was|were|has\s+been|have\s+been|remains?|still)\s+(?:\w+\s+)?{label}\b", re.IGNORECASE)))
            if terms:
                words = "|".join(f"(?:{t})" for t in terms)
                # "not patched", "hasn't yet been fixed", "no longer binding", "no official patch"
                out.append((name, "denied-term", re.compile(
                    rf"(?:\bno\s+(?:\w+\s+)?|{_NEGATOR}\s+(?:(?:yet|been|even|ever|already|actually|officially)\s+){{0,2}})"
                    rf"(?:{words})\b{_WHEN_NOT_WHETHER}", re.IGNORECASE)))
        return out

    def read(self, text: str) -> ClaimReading:
        """Every claim in ``text`` (see the module docstring)."""
        claims: list[Claim] = []
        hedges: list[str] = []
        lead: str | None = None
        seen_claim = False
        for number, sentence in enumerate(sentences(text)):
            if sentence.endswith("?"):
                continue  # a question (often the user's, echoed) claims nothing
            cut = self._hedge.search(sentence)
            span = sentence if cut is None else sentence[: cut.start()]
            if cut is not None:
                hedges.append(cut.group(0))
            here = self._claims_in(span, number)
            claims += here
            asserted = {self._asserted_state(c) for c in here} - {None}
            if not seen_claim and here:
                seen_claim = True
                lead = next(iter(asserted)) if len(asserted) == 1 else None
        return ClaimReading(tuple(claims), tuple(hedges), lead)

    def _asserted_state(self, claim: Claim) -> str | None:
        if claim.asserts:
            return claim.state
        return None

    def _claims_in(self, span: str, number: int) -> list[Claim]:
        candidates: list[tuple[int, int, Claim]] = []
        for state, rule, rx in self._patterns:
            for m in rx.finditer(span):
                if rule == "claim" and (_NEGATOR_BEFORE.search(span[: m.start()]) or _NEGATOR_INSIDE.search(m.group(0))):
                    # "without encoding has been fixed", "is not good law": not this claim; a
                    # denial, where there is one, is read by the state's negated terms.
                    continue
                polarity: Polarity = "denies" if rule == "denied-term" else "asserts"
                candidates.append((m.start(), m.end(), Claim(state, polarity, rule, m.group(0).strip(), number)))
                break
        # Where two readings share words, the longer one is the more specific ("a blackout is
        # in effect" is about the blackout, not "is in effect" about a clearance).
        kept: list[tuple[int, int, Claim]] = []
        for start, end, claim in sorted(candidates, key=lambda c: c[0] - c[1]):
            if not any(a < end and start < b for a, b, _ in kept):
                kept.append((start, end, claim))
        out = []
        for _, _, claim in sorted(kept, key=lambda c: c[0]):
            out.append(claim)
            opposite = self.policy.states[claim.state].opposite
            if not claim.asserts and opposite is not None:
                out.append(Claim(opposite, "asserts", f"{claim.rule} of {claim.state}", claim.text, number))
        return out

    def states_claimed(self, texts: Iterable[str]) -> set[str]:
        """States asserted anywhere in ``texts``."""
        return {s for t in texts for s in self.read(t).asserted()}
