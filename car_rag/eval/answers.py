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

How a status claim is found. The answer is split into sentences. In each sentence the
first *hedge* — a phrase that turns what follows into a statement about the evidence
rather than about the world ("the documents do not indicate that …", "I cannot confirm
whether …", "it is unclear if …", "not explicitly stated as …", "no version mentioned")
— cuts the sentence: only the text before it can make a claim. "The documents do not
indicate that it has been fixed" therefore claims nothing, while "…. Therefore, the
vulnerability is not patched" (a separate sentence) does. Negated forms are matched before
positive ones ("has not been patched", "remains unpatched", "no patch is available"), and
a positive match preceded by a negator ("no version that fixes it") is discarded. An
answer that claims both ways is labelled by its lead, the first sentence that claims
anything: "No, it is not patched. … fixed in 2.3.0" is a "no" whatever version follows; a
positive lead is checked for its version, and is ``uncertain`` without one, as is a lead
sentence that itself claims both ways and names no version.

:class:`LLMJudge` is an optional second classifier behind the same interface.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "LABELS",
    "Classification",
    "GoldAnswer",
    "classify",
    "extract_versions",
    "load_gold",
    "normalise_version",
    "suite_kind",
    "LLMJudge",
]

LABELS = ("correct", "patched_wrong_version", "patched_no_version", "confident_wrong", "uncertain")


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


# --------------------------------------------------------------------------- text helpers

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+|(?<=[.!?])$|\s*;\s+|\s+\(\d\)\s+|^\s*\(\d\)\s+")

# A hedge turns what follows it into a statement about the evidence.
_HEDGES = [
    r"\b(?:do|does|did)\s+not\s+(?:explicitly\s+|specifically\s+|directly\s+|clearly\s+)?"
    r"(?:indicate|mention|provide|contain|specify|state|say|show|confirm|include|address|discuss|describe|reference)"
    r"(?!\s+(?:this|the|that)\s+(?:vulnerability|flaw|bug|issue)\b)",
    r"\b(?:don't|doesn't|didn't)\s+(?:explicitly\s+)?(?:indicate|mention|provide|contain|specify|state|say|show|confirm)",
    r"\b(?:cannot|can't|can\s+not|could\s+not|couldn't|unable\s+to|not\s+able\s+to|impossible\s+to)\s+"
    r"(?:\w+\s+){0,2}?(?:confirm|determine|verify|tell|say|know|establish|ascertain|assess)",
    r"\b(?:unclear|not\s+clear|uncertain|unknown|not\s+known)\b",
    r"\b(?:no|not\s+any|insufficient|limited)\s+(?:specific\s+|explicit\s+|direct\s+|clear\s+)?"
    r"(?:information|mention|indication|evidence|details?|data|reference|record)\b",
    r"\bnot\s+(?:been\s+)?(?:explicitly\s+|specifically\s+|directly\s+|clearly\s+)?"
    r"(?:mentioned|stated|indicated|specified|documented|described|reported|confirmed|addressed\s+in\s+the\s+(?:provided\s+)?(?:documents|evidence|context))\b",
    r"\bno\s+(?:\w+\s+){0,3}?(?:mentioned|indicated|stated|specified|provided|given|listed|identified)\b",
    r"\b(?:whether|if)\s+(?:or\s+not\s+)?(?:\w+\s+){0,6}?(?:has|have|is|was|were|had)\s+(?:been\s+)?(?:patched|fixed|addressed|resolved)",
    r"\b(?:may|might|could|possibly|perhaps|likely|presumably|appears?\s+to|seems?\s+to)\s+(?:have\s+)?(?:been\s+)?(?:patched|fixed|addressed|resolved)",
    r"\bnot\s+(?:explicitly\s+)?mentioned\b",
]
_HEDGE_RE = re.compile("|".join(f"(?:{h})" for h in _HEDGES), re.IGNORECASE)

_FIX_WORDS = r"(?:patched|fixed|addressed|resolved|remediated|mitigated|corrected)"
_NEGATIVE = [
    ("negated_fix", rf"\b(?:not|never|n't)\s+(?:yet\s+|been\s+|yet\s+been\s+|been\s+yet\s+)?{_FIX_WORDS}\b(?!\s+(?:in|before|prior\s+to|until|below)\b)"),
    ("unpatched", r"\b(?:unpatched|unfixed|unresolved|unremediated|unmitigated|unaddressed)\b"),
    ("remains_vulnerable", r"\b(?:remains?|still)\s+(?:\w+\s+)?(?:vulnerable|exploitable|affected|at\s+risk|open)\b"),
    ("no_patch_available", r"\bno\s+(?:\w+\s+)?(?:patch|fix|update|remediation|patched\s+version|fixed\s+version)(?:es)?\b(?!\s+(?:is\s+)?(?:mentioned|indicated|stated|specified))"),
    ("no_fixing_version", r"\bno\s+(?:\w+\s+)?version\s+(?:that\s+|which\s+)?(?:fix|fixes|patch|patches|address|addresses|resolve|resolves)\b"),
]
_NEGATIVE_RE = [(name, re.compile(p, re.IGNORECASE)) for name, p in _NEGATIVE]

_POSITIVE = [
    ("states_fixed", rf"\b(?:is|are|has|have|was|were|been|be|got|gets)\s+(?:now\s+|already\s+|successfully\s+|since\s+)?(?:been\s+)?{_FIX_WORDS}\b"),
    ("fixed_in", rf"\b{_FIX_WORDS}\s+(?:in|by|with|as\s+of|since|starting\s+(?:in|with|from)|from)\b"),
    ("fixing_version", r"\b(?:version|release|update)s?\s+(?:that\s+|which\s+)?(?:fix|fixes|fixed|patch|patches|address|addresses|resolve|resolves|contains?\s+the\s+fix)\b"),
    ("fix_available", r"\b(?:patch|fix|update)(?:es)?\s+(?:is|are|has\s+been|have\s+been)\s+(?:now\s+)?(?:available|released|included|shipped)\b"),
    ("upgrade_to", r"\b(?:upgrade|update)\s+to\s+(?:version\s+)?v?\d"),
    ("not_affected", r"\b(?:does\s+not|doesn't|no\s+longer)\s+(?:contain|include|have)\s+(?:this|the|that)\s+(?:vulnerability|flaw|bug|issue)\b"
                     r"|\bno\s+longer\s+(?:vulnerable|affected|exploitable)\b"),
]
_POSITIVE_RE = [(name, re.compile(p, re.IGNORECASE)) for name, p in _POSITIVE]
_NEGATOR_BEFORE = re.compile(r"\b(?:no|not|never|without|nor|n't)\b(?:\s+\S+){0,2}\s*$", re.IGNORECASE)

_VERSION_RE = re.compile(
    r"(?<![\w.\-/#])v?(\d+(?:\.\d+)+(?:[-.]?(?:alpha|beta|rc|pre|post|dev|a|b)\.?\d*)?)(?![\w]|\.\d)", re.IGNORECASE
)
_BARE_VERSION_RE = re.compile(r"\bversion\s+(v?\d+)\b(?![.\d])", re.IGNORECASE)
_NOT_VERSION_BEFORE = re.compile(r"(?:\b(?:cvss|score|cwe|rfc|python|node(?:\.js)?|php|java|jdk|go|section|table|figure)|§)\s*v?(?:3\.\d\s*)?[:=]?\s*$", re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text.replace("**", "")) if s and s.strip()]


def _claim_span(sentence: str) -> tuple[str, str | None]:
    """The part of a sentence that can make a claim, and the hedge that cut it (if any)."""
    m = _HEDGE_RE.search(sentence)
    if m is None:
        return sentence, None
    return sentence[: m.start()], m.group(0)


def _find_claims(text: str, negative: list, positive: list) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str], str | None]:
    """Negative and positive claims, hedges, and the lead: the polarity of the first
    sentence that claims anything, when that sentence claims one way only."""
    negs, poss, hedges = [], [], []
    lead: str | None = None
    seen_claim = False
    for sentence in _sentences(text):
        span, hedge = _claim_span(sentence)
        if hedge:
            hedges.append(hedge)
        neg_here = [(name, m.group(0)) for name, rx in negative for m in [rx.search(span)] if m]
        negs += neg_here
        n_poss = len(poss)
        for name, rx in positive:
            for m in rx.finditer(span):
                if _NEGATOR_BEFORE.search(span[: m.start()]):
                    continue  # "no version that fixes it", "not been fixed"
                # a negated form of the same words already decided this clause
                if any(m.start() <= span.find(frag) + len(frag) and span.find(frag) <= m.end() for _, frag in neg_here):
                    continue
                poss.append((name, m.group(0)))
                break
        if not seen_claim and (neg_here or len(poss) > n_poss):
            seen_claim = True
            lead = None if neg_here and len(poss) > n_poss else "negative" if neg_here else "positive"
    return negs, poss, hedges, lead


def normalise_version(value: str) -> tuple[tuple[int, ...], str] | None:
    """``"v1.15.0"``, ``"pkg@1.15"`` → ``((1, 15), "")``: numeric parts without trailing
    zeros, plus a lower-cased pre-release suffix; None when there is no version in it."""
    m = _VERSION_RE.search(value.strip().rsplit("@", 1)[-1])
    if not m:
        m = re.search(r"(\d+(?:\.\d+)*)(.*)$", value)
        if not m:
            return None
    raw = m.group(1).lower()
    num = re.match(r"\d+(?:\.\d+)*", raw).group(0)
    suffix = re.sub(r"^[-.]", "", raw[len(num):])
    parts = [int(p) for p in num.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts), suffix


def extract_versions(text: str) -> list[str]:
    """Version-like tokens (``1.2``, ``v3.4.5-beta.1``, a bare number after "version") in
    ``text``, skipping CVSS scores and the like."""
    text = text.replace("**", "")
    out = []
    for m in _VERSION_RE.finditer(text):
        if _NOT_VERSION_BEFORE.search(text[: m.start()][-24:]):
            continue
        out.append(m.group(0))
    return out + [m.group(1) for m in _BARE_VERSION_RE.finditer(text)]


def _quote(pairs: list[tuple[str, str]]) -> str:
    name, frag = pairs[0]
    return f"{name}: '{frag.strip()}'"


# --------------------------------------------------------------------------- per-suite rules

def _classify_security(text: str, gold: GoldAnswer) -> Classification:
    negs, poss, hedges, lead = _find_claims(text, _NEGATIVE_RE, _POSITIVE_RE)
    versions = extract_versions(text)
    if gold.status in ("vulnerable", "unpatched"):
        if negs and not poss:
            return Classification("correct", f"asserts not patched ({_quote(negs)}), gold vulnerable")
        if poss and not negs:
            return Classification("confident_wrong", f"asserts patched ({_quote(poss)}), gold vulnerable")
        if poss and negs:
            return Classification("uncertain", f"contradictory: {_quote(poss)} vs {_quote(negs)}")
        return Classification("uncertain", f"no patch status claimed (hedge: '{hedges[0]}')" if hedges else "no patch status claimed")
    if poss and negs:
        # The reader acts on the direct answer: "No, it is not patched. ... fixed in 2.3.0" is a "no".
        if lead == "negative":
            return Classification("confident_wrong", f"leads with not patched ({_quote(negs)}), later {_quote(poss)}")
        if not versions:
            return Classification("uncertain", f"contradictory: {_quote(poss)} vs {_quote(negs)}")
    if negs and not poss:
        return Classification("confident_wrong", f"asserts not patched ({_quote(negs)})")
    if not poss:
        return Classification("uncertain", f"no patch status claimed (hedge: '{hedges[0]}')" if hedges else "no patch status claimed")
    claim = _quote(poss) + (f"; also {_quote(negs)}" if negs else "")
    if gold.fixed_version is None:
        return Classification("correct", f"asserts patched ({claim}); no gold version to check")
    want = normalise_version(gold.fixed_version)
    if not versions:
        return Classification("patched_no_version", f"asserts patched ({claim}); names no version")
    if any(normalise_version(v) == want for v in versions):
        return Classification("correct", f"asserts patched ({claim}); names {gold.fixed_version}")
    return Classification("patched_wrong_version", f"asserts patched ({claim}); names {', '.join(versions)}, fix is {gold.fixed_version}")


def _status_classifier(patterns: dict[str, list[tuple[str, str]]]) -> Callable[[str, GoldAnswer], Classification]:
    """A classifier for suites whose answer is one status out of a few (compliance, legal)."""
    compiled = {status: [(name, re.compile(p, re.IGNORECASE)) for name, p in pats] for status, pats in patterns.items()}

    def classify_status(text: str, gold: GoldAnswer) -> Classification:
        found: dict[str, tuple[str, str]] = {}
        hedges = []
        for sentence in _sentences(text):
            span, hedge = _claim_span(sentence)
            if hedge:
                hedges.append(hedge)
            taken: list[tuple[int, int]] = []
            for status, pats in compiled.items():  # earlier statuses are the more specific (negated) forms
                for name, rx in pats:
                    m = rx.search(span)
                    if m and not any(a < m.end() and m.start() < b for a, b in taken):
                        taken.append((m.start(), m.end()))
                        found.setdefault(status, (name, m.group(0)))
                        break
        if not found:
            return Classification("uncertain", f"no status claimed (hedge: '{hedges[0]}')" if hedges else "no status claimed")
        if len(found) > 1 and gold.status in found:
            others = [s for s in found if s != gold.status]
            return Classification("uncertain", f"contradictory: claims {gold.status} and {', '.join(others)}")
        if gold.status in found:
            name, frag = found[gold.status]
            return Classification("correct", f"claims {gold.status} ({name}: '{frag}')")
        status, (name, frag) = next(iter(found.items()))
        return Classification("confident_wrong", f"claims {status} ({name}: '{frag}'), gold {gold.status}")

    return classify_status


_classify_legal = _status_classifier({
    # order matters: negated forms first, so "has not been overruled" is not read as "overruled"
    "good_law": [
        ("not_overruled", r"\b(?:not|never)\s+(?:been\s+)?(?:overruled|overturned|abrogated|reversed|superseded)\b"),
        ("still_good_law", r"\b(?:still|remains?|is)\s+(?:\w+\s+)?(?:good\s+law|valid|binding|controlling|authoritative|in\s+force)\b"),
    ],
    "overruled": [
        ("no_longer_good_law", r"\b(?:no\s+longer|not|isn't)\s+(?:\w+\s+)?(?:good\s+law|valid|binding|controlling|authoritative)\b"),
        ("overruled", r"\b(?:overruled|overturned|abrogated|superseded|reversed)\b"),
    ],
})

_classify_compliance = _status_classifier({
    "non_compliant": [
        ("non_compliant", r"\b(?:non-?compliant|not\s+compliant|in\s+violation|violat\w*|prohibited|not\s+(?:permitted|allowed)|cannot\s+(?:rely|trade|proceed)|must\s+not\s+trade|blackout\s+(?:is\s+)?(?:in\s+effect|applies|active))\b"),
        ("voided", r"\b(?:no\s+longer\s+valid|voided|void|revoked|invalidated|suspended)\b"),
    ],
    "compliant": [
        ("compliant", r"\b(?:compliant|permitted\s+under\s+(?:an?\s+|the\s+)?(?:emergency\s+)?exception|emergency\s+exception\s+(?:applies|allows|permits|was\s+granted))\b"),
    ],
    "active": [
        ("active", r"\b(?:still\s+(?:valid|active|in\s+effect)|remains?\s+(?:valid|active|in\s+effect)|is\s+(?:valid|active)|can\s+rely|may\s+(?:trade|proceed|rely))\b"),
    ],
})

_SECURITY_SUITES = ("ghsa", "cvepatchqa")
_LEGAL_SUITES = ("legalprecedentqa", "legal")
_COMPLIANCE_SUITES = ("finsuperqa",)


def suite_kind(suite: str) -> str:
    """``security`` / ``legal`` / ``compliance`` for a suite name (prefix match)."""
    name = getattr(suite, "name", suite)
    for prefixes, kind in ((_SECURITY_SUITES, "security"), (_LEGAL_SUITES, "legal"), (_COMPLIANCE_SUITES, "compliance")):
        if any(name.startswith(p) for p in prefixes):
            return kind
    raise ValueError(f"no answer classifier for suite {name!r}")


_BY_KIND = {"security": _classify_security, "legal": _classify_legal, "compliance": _classify_compliance}


def classify(answer_text: str, suite: Any, gold: GoldAnswer | dict | str) -> Classification:
    """Label ``answer_text`` for ``suite`` (a name or :class:`~car_rag.eval.suites.Suite`) against ``gold``."""
    if isinstance(gold, str):
        gold = GoldAnswer(gold)
    elif isinstance(gold, dict):
        gold = GoldAnswer(gold["status"], gold.get("fixed_version"))
    if not isinstance(answer_text, str) or not answer_text.strip():
        return Classification("uncertain", "empty answer")
    return _BY_KIND[suite_kind(suite)](answer_text, gold)


# --------------------------------------------------------------------------- gold

_VERSION_IN_RECORD = re.compile(r"\b(?:version|release|v)\s*(\d+(?:\.\d+)+(?:[-.]?(?:alpha|beta|rc)\.?\d*)?)", re.IGNORECASE)


def version_from_record(text: str) -> str | None:
    """The version a release record announces: the first "version X" / "release X" / "vX" in it."""
    m = _VERSION_IN_RECORD.search(text or "")
    return m.group(1) if m else None


def load_gold(suite: Any, corpora_dir: str | Path | None = None) -> dict[str, GoldAnswer]:
    """Gold answers by query id for a built-in suite.

    Security: every GHSA query is ``patched`` and its fixing version is the release tag of
    the paired release note (``ghsa_real_pairs.json`` beside the corpora folder: the release
    records' text does not reliably state its own version, the tag does); CVEPatchQA's
    status is the query's ``answer`` and the version is the one its gold patch record
    announces ("published version 35.1"). Legal and compliance: the query's ``answer``.
    """
    from car_rag.eval.suites import load_suite
    from car_rag.queries import load_queries

    s = load_suite(suite, corpora_dir) if isinstance(suite, str) else suite
    kind = suite_kind(s.name)
    queries = load_queries(s.queries)
    if kind != "security":
        return {q.query_id: GoldAnswer(q.answer) for q in queries if q.answer}
    tags: dict[str, str] = {}
    pairs = s.corpus.parent.parent / "ghsa_real_pairs.json"
    if s.name.startswith("ghsa") and pairs.is_file():
        tags = {p["id"]: p["tag"] for p in json.loads(pairs.read_text(encoding="utf-8"))}
    gold_ids = {d for q in queries for d in q.gold_doc_ids}
    texts: dict[str, str] = {}
    with open(s.corpus, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["doc_id"] in gold_ids:
                texts[rec["doc_id"]] = rec.get("text", "")
    out = {}
    for q in queries:
        status = q.answer or "patched"
        version = tags.get(q.query_id)
        if version is None and status == "patched" and q.gold_doc_ids:
            version = version_from_record(texts.get(q.gold_doc_ids[0], ""))
        out[q.query_id] = GoldAnswer(status, version if status == "patched" else None)
    return out


# --------------------------------------------------------------------------- optional LLM judge

class LLMJudge:
    """A model as the classifier, same interface: ``judge.classify(answer_text, suite, gold)``.

    ``complete(messages) -> str`` is any chat call (e.g. :meth:`car_rag.eval.llm.ChatClient.complete`).
    The judge must reply with one label; anything else falls back to the rule classifier.
    """

    def __init__(self, complete: Callable[[list[dict[str, str]]], str]):
        self.complete = complete

    def classify(self, answer_text: str, suite: Any, gold: GoldAnswer | dict | str) -> Classification:
        if isinstance(gold, str):
            gold = GoldAnswer(gold)
        elif isinstance(gold, dict):
            gold = GoldAnswer(gold["status"], gold.get("fixed_version"))
        labels = ", ".join(LABELS)
        prompt = (
            f"Gold status: {gold.status}" + (f"; fixing version: {gold.fixed_version}" if gold.fixed_version else "")
            + f"\nAnswer to judge:\n<<<\n{answer_text}\n>>>\nReply with exactly one of: {labels}. "
            "correct = claims the gold status (and, if patched, names the fixing version); patched_wrong_version = says "
            "patched but names other versions; patched_no_version = says patched, no version; confident_wrong = claims a "
            "different status; uncertain = hedged or claims nothing."
        )
        reply = self.complete([{"role": "user", "content": prompt}]).strip().lower()
        label = next((lab for lab in LABELS if lab in reply), None)
        if label is None:
            fallback = classify(answer_text, suite, gold)
            return Classification(fallback.label, f"judge reply unusable ({reply[:40]!r}); rules: {fallback.reason}")
        return Classification(label, f"llm judge: {reply[:80]}")
