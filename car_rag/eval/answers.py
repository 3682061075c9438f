"""Classify a reader's free-text answer against a suite's gold status, deterministically.

One interface for every suite::

    classify(answer_text, suite, gold) -> Classification(label, reason)

``reason`` names the rule that fired and quotes the text it fired on, so every label can
be checked by hand. Labels (the CAR paper, §6.11, refined):

``correct``                gold status claimed (security: patched *and* the fixing version named)
``patched_wrong_version``  security: says patched, names versions, none is the fixing one
``patched_no_version``     security: says patched, names no version
``confident_wrong``        explicitly claims a status other than gold (e.g. "not patched")
``mixed``                  claims two statuses, or asserts and denies one, and nothing in
                           the answer decides between them
``uncertain``              hedged, or no status claimed at all

``mixed`` is never right and never confidently wrong (:data:`NOT_CONFIDENT`): a reader that
says both has not committed to the wrong status, and has not given the right one. It is
kept apart from ``uncertain`` because it is a different failure: ``uncertain`` is a reader
that declined to claim (what it should do when the evidence cannot decide); ``mixed`` is a
reader that contradicted itself, and a user who reads only one of its sentences is misled.

How a status claim is found: :class:`car_rag.claims.ClaimReader` with the domain's packaged
state vocabulary (``car_rag/vocabularies/``), the same reader the authority guard uses.
Sentences are cut at their first hedge ("the documents do not indicate that …" claims
nothing), questions are skipped, claims and negated terms are read ("has not been
patched", "hasn't been fixed", "isn't patched in any release", "no longer good law"), and
claims about earlier versions or the past ("earlier versions remain vulnerable", "it was
still good law in 2018") are set aside where the answer asserts another status about now.
What is left decides: one status is that status; two are ``mixed``, except where the
vocabulary ranks them (compliance: an emergency exception over a blackout over a
pre-clearance), where the highest concludes — unless the answer also denies a status it
asserts ("may trade … is not permitted"), which no rank decides. A security answer that
says patched is checked for the fixing version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from car_rag.claims import Claim, ClaimReader
from car_rag.versions import extract_versions, normalise_version

__all__ = [
    "LABELS",
    "NOT_CONFIDENT",
    "STATUS_LABELS",
    "Classification",
    "GoldAnswer",
    "classify",
    "extract_versions",
    "labels_for",
    "normalise_version",
    "suite_kind",
]

LABELS = ("correct", "patched_wrong_version", "patched_no_version", "confident_wrong", "mixed", "uncertain")
STATUS_LABELS = ("correct", "confident_wrong", "mixed", "uncertain")
"""Legal and compliance answers: the status is right, wrong, claimed both ways, or not claimed."""
NOT_CONFIDENT = ("mixed", "uncertain")
"""Labels of answers that commit to no single status: neither right nor confidently wrong."""


@dataclass(frozen=True)
class Classification:
    label: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "reason": self.reason}


@dataclass(frozen=True)
class GoldAnswer:
    """What a correct answer says: ``status`` in the suite's vocabulary (``patched`` /
    ``vulnerable``, ``active`` / ``compliant`` / ``non_compliant``, ``good_law`` /
    ``overruled``) and, for a patched security question, the fixing version when known."""

    status: str
    fixed_version: str | None = None


# --------------------------------------------------------------------------- per-suite rules


@cache
def _reader(kind: str) -> ClaimReader:
    """The claim reader of a domain: the states of its packaged vocabulary."""
    from car_rag.policy import Policy

    return ClaimReader(Policy(name=f"answers-{kind}", scope_keys=("subject",), vocabulary=(_VOCABULARY[kind],)))


def _quote(claims: list[Claim], state: str, asserts: bool = True) -> str:
    """The first claim in ``claims`` that asserts (or denies) ``state``, as rule and words."""
    claim = next(c for c in claims if c.state == state and c.asserts == asserts)
    return f"{claim.rule}: '{claim.text}'"


def _mixed(claims: list[Claim], states: list[str]) -> Classification:
    return Classification("mixed", f"claims {' and '.join(states)} ({'; '.join(_quote(claims, s) for s in states)})")


def _no_claim(hedges: tuple[str, ...], what: str) -> Classification:
    return Classification("uncertain", f"no {what} claimed (hedge: '{hedges[0]}')" if hedges else f"no {what} claimed")


def _classify_security(text: str, gold: GoldAnswer) -> Classification:
    reading = _reader("security").read(text)
    claims = reading.in_force()
    found = reading.current()
    if len(found) > 1:
        return _mixed(claims, found)
    if not found:
        return _no_claim(reading.hedges, "patch status")
    claim = _quote(claims, found[0])
    if gold.status in ("vulnerable", "unpatched"):
        if found == ["vulnerable"]:
            return Classification("correct", f"asserts not patched ({claim}), gold vulnerable")
        return Classification("confident_wrong", f"asserts patched ({claim}), gold vulnerable")
    if found == ["vulnerable"]:
        return Classification("confident_wrong", f"asserts not patched ({claim})")
    if gold.fixed_version is None:
        return Classification("correct", f"asserts patched ({claim}); no gold version to check")
    want = normalise_version(gold.fixed_version)
    versions = extract_versions(text)
    if not versions:
        return Classification("patched_no_version", f"asserts patched ({claim}); names no version")
    if any(normalise_version(v) == want for v in versions):
        return Classification("correct", f"asserts patched ({claim}); names {gold.fixed_version}")
    return Classification(
        "patched_wrong_version", f"asserts patched ({claim}); names {', '.join(versions)}, fix is {gold.fixed_version}"
    )


def _classify_status(kind: str, text: str, gold: GoldAnswer) -> Classification:
    """Suites whose answer is one status out of a few (legal, compliance): the state the
    answer asserts; when it asserts several, the one of highest precedence where the
    vocabulary ranks them all and the answer denies none of them, else ``mixed``."""
    reading = _reader(kind).read(text)
    claims = reading.in_force()
    found = reading.current()
    if not found:
        return _no_claim(reading.hedges, "status")
    contradicted = reading.contradicted()
    if contradicted:
        state = contradicted[0]
        return Classification("mixed", f"asserts and denies {state} ({_quote(claims, state)}; {_quote(claims, state, False)})")
    claimed = found[0] if len(found) == 1 else _conclusion(kind, found)
    if claimed is None:
        return _mixed(claims, found)
    why = _quote(claims, claimed)
    if len(found) > 1:
        why += f"; decides, also {', '.join(s for s in found if s != claimed)}"
    if claimed == gold.status:
        return Classification("correct", f"claims {claimed} ({why})")
    return Classification("confident_wrong", f"claims {claimed} ({why}), gold {gold.status}")


def _conclusion(kind: str, found: list[str]) -> str | None:
    """The asserted state of highest precedence, where the vocabulary ranks every one found."""
    states = _reader(kind).policy.states
    ranks = {s: states[s].precedence for s in found}
    if any(r is None for r in ranks.values()):
        return None
    return max(found, key=lambda s: ranks[s] or 0)


_SECURITY_SUITES = ("ghsa", "cvepatchqa")
_LEGAL_SUITES = ("legalprecedentqa", "legal")
_COMPLIANCE_SUITES = ("finsuperqa",)


def labels_for(suite: Any) -> tuple[str, ...]:
    """The labels :func:`classify` can give on ``suite``."""
    return LABELS if suite_kind(suite) == "security" else STATUS_LABELS


def suite_kind(suite: str) -> str:
    """``security`` / ``legal`` / ``compliance`` for a suite name (prefix match), or that kind named itself."""
    name = getattr(suite, "name", suite)
    if name in _VOCABULARY:  # a user's own corpus names its domain, not a suite
        return str(name)
    for prefixes, kind in ((_SECURITY_SUITES, "security"), (_LEGAL_SUITES, "legal"), (_COMPLIANCE_SUITES, "compliance")):
        if any(name.startswith(p) for p in prefixes):
            return kind
    raise ValueError(f"no answer classifier for suite {name!r}")


_VOCABULARY = {"security": "security", "legal": "legal", "compliance": "compliance"}
_BY_KIND: dict[str, Callable[[str, GoldAnswer], Classification]] = {
    "security": _classify_security,
    "legal": lambda text, gold: _classify_status("legal", text, gold),
    "compliance": lambda text, gold: _classify_status("compliance", text, gold),
}


def classify(answer_text: str, suite: Any, gold: GoldAnswer | dict[str, Any] | str) -> Classification:
    """Label ``answer_text`` for ``suite`` (a name, or anything with a ``name``, such as a benchmark suite) against ``gold``."""
    if isinstance(gold, str):
        gold = GoldAnswer(gold)
    elif isinstance(gold, dict):
        gold = GoldAnswer(gold["status"], gold.get("fixed_version"))
    if not isinstance(answer_text, str) or not answer_text.strip():
        return Classification("uncertain", "empty answer")
    return _BY_KIND[suite_kind(suite)](answer_text, gold)
