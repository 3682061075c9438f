"""Classify a reader's free-text answer against a suite's gold status, deterministically.

One interface for every suite::

    classify(answer_text, suite, gold) -> Classification(label, reason)

``reason`` names the rule that fired and quotes the text it fired on, so every label can
be checked by hand. Labels (the CAR paper, §6.11, refined):

``correct``                gold status claimed (security: patched *and* the fixing version named)
``patched_wrong_version``  security: says patched, names versions, none is the fixing one
``patched_no_version``     security: says patched, names no version
``confident_wrong``        explicitly claims a status other than gold (e.g. "not patched")
``uncertain``              hedged, or no status claimed at all

How a status claim is found: :class:`car_rag.claims.ClaimReader` with the domain's packaged
state vocabulary (``car_rag/vocabularies/``), the same reader the authority guard uses.
Sentences are cut at their first hedge ("the documents do not indicate that …" claims
nothing), questions are skipped, claims and negated terms are read ("has not been
patched", "hasn't been fixed", "no longer good law"), and an answer that claims both ways
is labelled by its lead, the first sentence that claims anything: "No, it is not patched.
… fixed in 2.3.0" is a "no" whatever version follows; a positive lead is checked for its
version, and is ``uncertain`` without one, as is a lead sentence that itself claims both
ways and names no version.

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
    "STATUS_LABELS",
    "Classification",
    "GoldAnswer",
    "classify",
    "extract_versions",
    "labels_for",
    "normalise_version",
    "suite_kind",
]

LABELS = ("correct", "patched_wrong_version", "patched_no_version", "confident_wrong", "uncertain")
STATUS_LABELS = ("correct", "confident_wrong", "uncertain")
"""Legal and compliance answers: the status is right, wrong, or not claimed."""


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


def _quote(claim: Claim | None) -> str:
    return "" if claim is None else f"{claim.rule}: '{claim.text}'"


def _classify_security(text: str, gold: GoldAnswer) -> Classification:
    reading = _reader("security").read(text)
    negs = [c for c in reading.claims if c.asserts and c.state == "vulnerable"]
    poss = [c for c in reading.claims if c.asserts and c.state == "patched"]
    hedges = reading.hedges
    versions = extract_versions(text)
    if gold.status in ("vulnerable", "unpatched"):
        if negs and not poss:
            return Classification("correct", f"asserts not patched ({_quote(negs[0])}), gold vulnerable")
        if poss and not negs:
            return Classification("confident_wrong", f"asserts patched ({_quote(poss[0])}), gold vulnerable")
        if poss and negs:
            return Classification("uncertain", f"contradictory: {_quote(poss[0])} vs {_quote(negs[0])}")
        return Classification(
            "uncertain", f"no patch status claimed (hedge: '{hedges[0]}')" if hedges else "no patch status claimed"
        )
    if poss and negs:
        # The reader acts on the direct answer: "No, it is not patched. ... fixed in 2.3.0" is a "no".
        if reading.lead == "vulnerable":
            return Classification("confident_wrong", f"leads with not patched ({_quote(negs[0])}), later {_quote(poss[0])}")
        if not versions:
            return Classification("uncertain", f"contradictory: {_quote(poss[0])} vs {_quote(negs[0])}")
    if negs and not poss:
        return Classification("confident_wrong", f"asserts not patched ({_quote(negs[0])})")
    if not poss:
        return Classification(
            "uncertain", f"no patch status claimed (hedge: '{hedges[0]}')" if hedges else "no patch status claimed"
        )
    claim = _quote(poss[0]) + (f"; also {_quote(negs[0])}" if negs else "")
    if gold.fixed_version is None:
        return Classification("correct", f"asserts patched ({claim}); no gold version to check")
    want = normalise_version(gold.fixed_version)
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
    vocabulary ranks them, else its lead."""
    reading = _reader(kind).read(text)
    found = reading.asserted()
    if not found:
        hedges = reading.hedges
        return Classification("uncertain", f"no status claimed (hedge: '{hedges[0]}')" if hedges else "no status claimed")
    decided = _conclusion(kind, found) if len(found) > 1 else None
    claimed = found[0] if len(found) == 1 else decided or reading.lead
    if claimed is None:
        return Classification("uncertain", f"contradictory: claims {', '.join(found)}")
    why = _quote(reading.first(claimed))
    if len(found) > 1:
        how = "decides" if decided else "leads with it"
        why += f"; {how}, also {', '.join(s for s in found if s != claimed)}"
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
    """``security`` / ``legal`` / ``compliance`` for a suite name (prefix match)."""
    name = getattr(suite, "name", suite)
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
