"""Explicit citations in prose → supersession edges, with their direction and confidence.

The built-in generic extractor, on for every policy: a supersession verb ("supersedes",
"replaces", "obsoletes", "overrules", "abrogates", "repeals", "rescinds", "withdraws",
"revokes"), its passive ("is superseded by", "was replaced by"), or an abandonment "in favor
of", in one sentence with a citation of a known document (:mod:`car_rag.extract.identifiers`).
The verb gives the direction: "X replaces Y" is X ⊳ Y, "X is replaced by Y" and "X was
abandoned in favor of Y" are Y ⊳ X. The subject is the identifier just before the verb, or the
document itself ("This KEP", "it", "This standard is withdrawn and", nothing). Two forms name
the document itself as the superseder of a cited subject: "X is superseded by this policy" and
the agentless present "X is (hereby) rescinded" (a declaration; "X was rescinded" is history
and gives nothing). "Updates", "amends" and "supplements" are not supersession: no edge.

Documents cite each other far more often than they supersede, so a citation counts only
next to its verb (a few words away), and the confidence says how the sentence put it:

============================================  ==========
how                                           confidence
============================================  ==========
header field ("Replaces:", ``superseded-by``)  0.95 (:mod:`car_rag.extract.headers`)
stated, subject this document or a citation   0.90
"X is hereby repealed", "X is replaced by this"
abandoned / deprecated "in favor of"          0.80
"the previous version (EIP-190)", predecessor 0.60
"X is rescinded" (no agent, no "hereby")       0.60
stated, subject some other noun               0.40
hedged ("will replace", "proposes to")        0.30
============================================  ==========

Resolved by title rather than identifier: 0.05 less. A negated sentence ("does not
replace"), a quoted one (inside quotation marks, or a ``>`` block quote) and a partial one
("partially supersedes", "replaces EIP-1283's gas values", "replaces the nonce of an
EIP-8141 transaction", "the fee rule of POL-1 is repealed": a part of the cited document, not
the document) give no edge: they are counted as *skipped*.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from car_rag.extract.identifiers import Citation, IdentifierResolver

__all__ = [
    "ExtractedEdge",
    "Skipped",
    "prose_edges",
    "STATED",
    "IN_FAVOR",
    "UNCLEAR_SUBJECT",
    "HEDGED",
    "HEADER",
    "SUCCESSOR",
    "AGENTLESS",
]

HEADER = 0.95
STATED = 0.9
IN_FAVOR = 0.8
SUCCESSOR = 0.6
AGENTLESS = 0.6
UNCLEAR_SUBJECT = 0.4
HEDGED = 0.3
TITLE_PENALTY = 0.05

_VERBS = r"supersed|superced|replac|obsolet|overrul|abrogat|repeal|rescind|withdr[ae]w|revok"
_CUE = re.compile(
    rf"(?P<passive>\b(?:{_VERBS})(?:ed|n)\s+(?:(?:in\s+(?:full|part)|entirely|fully|formally)\s+)?by\b)"
    r"|(?P<favor>\bin\s+favou?r\s+of\b)"
    r"|(?P<successor>\b(?:previous|earlier|prior|former)\s+version\b|\bpredecessor\b)"
    rf"|(?P<active>\b(?:(?:has|have|had)\s+(?:{_VERBS})(?:ed|n)|supersedes?|supercedes?|replaces?|obsoletes?|"
    r"overrules?|abrogates?|repeals?|rescinds?|withdraws?|revokes?)\b)"
    rf"|(?P<agentless>\b(?:is|are)\s+(?:hereby\s+)?(?:{_VERBS})(?:ed|n)\b(?!\s+(?:(?:in\s+(?:full|part)|entirely|fully|formally)\s+)?by\b))",
    re.IGNORECASE,
)
_STEMS = (
    "supersed",
    "superced",
    "replac",
    "obsolet",
    "overrul",
    "abrogat",
    "repeal",
    "rescind",
    "withdr",
    "revok",
    "favo",
    "version",
    "predecessor",
)
"""What every cue contains: a document none of them occurs in (most) is passed over with
``str.find``, far faster than the cue regex."""
_BOUNDARY = re.compile(r"[.!?](?=\s)|\n")
_NEGATION = re.compile(r"\b(?:not|never|no|cannot|neither|nor|without)\b|n't\b", re.IGNORECASE)
_PART_OF = re.compile(r"\b(?:of|in|within|inside|from|for|on)\b", re.IGNORECASE)
_PARTIAL = re.compile(r"\b(?:partially|partly|in\s+part)\b", re.IGNORECASE)
_ATTRIBUTIVE = re.compile(
    r"[\])]*(?:['’]s\b|\s+(?!(?:"
    r"and|or|of|dated|which|that|who|with|as|in|into|to|from|for|by|on|at|is|was|are|were|has|had|have|will|but|so|"
    r"since|because|while|when|where|after|before|until|per|via|once|now|effective|immediately|today|here|herein|"
    r"upon|except|only|also|than|then|if|unless|the|a|an|its|their|this|these|those|[a-z]+ly"
    r")\b)[a-z][\w-]*)"
)
_HEDGE = re.compile(
    r"\b(?:may|might|could|would|should|will|can|if|whether|potentially|eventually|"
    r"propos(?:e|es|ed|ing)\s+to|intends?\s+to|plans?\s+to|aims?\s+to|to\s+be)\b",
    re.IGNORECASE,
)
_BASE_FORM = re.compile(rf"^(?:{_VERBS})e?$", re.IGNORECASE)
_MODAL_BEFORE = re.compile(
    r"\b(?:shall|will|would|may|might|could|should|to|must|can|not|never|hereby)\s*$|n't\s*$", re.IGNORECASE
)
_SHALL_BEFORE = re.compile(r"\b(?:shall|hereby)\s*$", re.IGNORECASE)
_AUXILIARY = re.compile(
    r"(?:\s*\b(?:is|was|are|were|be|been|being|has|have|had|hereby|also|now|fully|formally|officially|"
    r"entirely|therefore|thus|itself|shall|will|would|may|might|could|should|must|can|to|proposes?|intends?|"
    rf"plans?|aims?|(?:{_VERBS}|abandon|deprecat|retir|cancel)\w*\s+and)\b)+\s*$",
    re.IGNORECASE,
)
_SELF = re.compile(
    r"(?:^|\b(?:this|the\s+present|the\s+current|our)(?:\s+\w+){0,3}|\bit|\bwhich|\bthat|"
    r"^\W*(?:note|status|update|important|warning|deprecated|summary)\W*)\W*$",
    re.IGNORECASE,
)
_ABANDONED = re.compile(
    r"\b(?:abandon|deprecat|withdr[ae]w|supersed|replac|repeal|rescind|revok|drop|discontinu|reject|obsolet|retir|sunset|closed|stagnant)",
    re.IGNORECASE,
)
_LIST_GLUE = re.compile(r"^[\s,;&/]*(?:(?:and|or|as\s+well\s+as)\b)?[\s,;&/]*(?:the\s+)?$", re.IGNORECASE)
_WORDS = re.compile(r"\w+")
_SELF_OBJECT = re.compile(r"\s+(?:this|the\s+present)(?:\s+[a-z][\w-]*){0,2}\s*(?:[.,;:)]|$)", re.IGNORECASE)
"""A passive whose agent is the document itself: "… is superseded by this policy."."""
_HEREBY = re.compile(r"\bhereby\b", re.IGNORECASE)
_PART_BEFORE = re.compile(r"\b(?:of|in|within|from|under)\s+(?:the\s+)?$", re.IGNORECASE)
_OBJECT_GAP = {"passive": 6, "active": 6, "favor": 14, "successor": 4, "agentless": 0}
"""Words a cited document may stand from its verb ("replaced by the KEP tracked in #1739")."""
_SUBJECT_GAP = 3
_WINDOW = 300


@dataclass(frozen=True)
class ExtractedEdge:
    """``superseder`` ⊳ ``superseded`` as read from one span of ``found_in``."""

    superseder: str
    superseded: str
    confidence: float
    source: str
    """``header``, ``prose`` or ``llm``."""
    found_in: str
    evidence: str
    span: tuple[int, int]


@dataclass(frozen=True)
class Skipped:
    """A citation next to a supersession verb that gives no edge, and why (reported)."""

    doc_id: str
    reason: str
    """``negated``, ``quoted``, ``unresolved``, ``not a supersession`` (an "in favor of" that abandons nothing)."""
    evidence: str
    citation: str
    tried: tuple[str, ...] = ()


def _sentence(text: str, start: int, end: int) -> tuple[int, int]:
    lo = max(0, start - _WINDOW)
    begin = lo
    for match in _BOUNDARY.finditer(text, lo, start):
        begin = match.end()
    stop = _BOUNDARY.search(text, end, min(len(text), end + _WINDOW))
    return begin, stop.start() + 1 if stop else min(len(text), end + _WINDOW)


def _quoted(text: str, begin: int, cue: int) -> bool:
    before = text[begin:cue]
    line_start = text.rfind("\n", 0, cue) + 1
    return before.count('"') % 2 == 1 or before.count("“") > before.count("”") or text[line_start:cue].lstrip().startswith(">")


def _words_between(text: str, start: int, end: int) -> int:
    return len(_WORDS.findall(text, start, end)) if end > start else 0


def _objects(text: str, citations: list[Citation], after: int, gap: int) -> list[Citation]:
    """The cited documents right after the verb: the first within ``gap`` words, and those
    listed with it ("EIP-5003 and EIP-6913")."""
    later = [c for c in citations if c.start >= after]
    if not later or _words_between(text, after, later[0].start) > gap:
        return []
    chosen = [later[0]]
    for citation in later[1:]:
        if not _LIST_GLUE.match(text[chosen[-1].end : citation.start]):
            break
        chosen.append(citation)
    return chosen


def _cues(text: str) -> Iterator[re.Match[str]]:
    """The cue matches of ``text``, in order: the regex runs only around the stems' occurrences."""
    lowered = text.lower()
    hits = sorted(i for stem in _STEMS for i in _occurrences(lowered, stem))
    done = 0
    for at in hits:
        if at < done:
            continue
        match = _CUE.search(text, max(done, at - 16), min(len(text), at + 40))
        if match is not None:
            done = match.end()
            yield match


def _occurrences(text: str, word: str) -> Iterator[int]:
    at = text.find(word)
    while at >= 0:
        yield at
        at = text.find(word, at + 1)


def _partial(text: str, kind: str, after: int, objects: list[Citation], clause: str) -> bool:
    """Whether the sentence supersedes a part of the cited document rather than all of it."""
    if _PARTIAL.search(clause) or (kind == "active" and _PART_OF.search(text, after, objects[0].start)):
        return True
    return kind in ("active", "successor") and _ATTRIBUTIVE.match(text, objects[-1].end) is not None


def _subject(text: str, citations: list[Citation], begin: int, subject_text: str) -> Citation | None:
    """The cited document a few words before the verb (its auxiliaries stripped), if any."""
    subjects = [c for c in citations if c.end <= len(subject_text) + begin]
    if subjects and _words_between(text, subjects[-1].end, begin + len(subject_text)) <= _SUBJECT_GAP:
        return subjects[-1]
    return None


def _self_superseding(
    doc_id: str, text: str, citations: list[Citation], span: tuple[int, int], cue: re.Match[str]
) -> Iterator[ExtractedEdge | Skipped]:
    """ "X is superseded by this policy", "X is hereby repealed": the document supersedes its cited subject."""
    begin, end = span
    before = text[begin : cue.start()]
    evidence = text[begin:end].strip()
    last = _subject(text, citations, begin, _AUXILIARY.sub("", before))
    if last is None:
        return
    subjects = [last]  # "POL-1 and POL-2 are hereby rescinded": each one listed
    for citation in reversed([c for c in citations if c.end <= last.start]):
        if not _LIST_GLUE.match(text[citation.end : subjects[0].start]):
            break
        subjects.insert(0, citation)
    clause = " ".join(before.split()[-5:])
    sure = STATED if cue.lastgroup == "passive" or _HEREBY.search(cue.group(0)) else AGENTLESS
    if _HEDGE.search(clause):
        sure = min(sure, HEDGED)
    for subject in subjects:
        if _quoted(text, begin, cue.start()):
            yield Skipped(doc_id, "quoted", evidence, subject.written)
        elif _NEGATION.search(clause) or _NEGATION.match(text, cue.end()):
            yield Skipped(doc_id, "negated", evidence, subject.written)
        elif _PART_BEFORE.search(text, begin, subjects[0].start) or _ATTRIBUTIVE.match(text, last.end):
            yield Skipped(doc_id, "partial", evidence, subject.written)
        elif subject.doc_id is None:
            yield Skipped(doc_id, "unresolved", evidence, subject.written, subject.candidates)
        elif subject.doc_id != doc_id:
            penalty = TITLE_PENALTY if subject.via == "title" else 0.0
            yield ExtractedEdge(doc_id, subject.doc_id, round(sure - penalty, 2), "prose", doc_id, evidence, span)


def prose_edges(
    doc_id: str, text: str, resolver: IdentifierResolver, skip: Sequence[tuple[int, int]] = ()
) -> Iterator[ExtractedEdge | Skipped]:
    """Edges stated in ``text`` (the document ``doc_id``), and the cited documents next to a
    verb that give none; ``skip``: spans already read as headers."""
    for cue in _cues(text):
        if any(s <= cue.start() < e for s, e in skip):
            continue
        kind = cue.lastgroup or "active"
        verb = cue.group(0).split()[-1]
        begin, end = _sentence(text, cue.start(), cue.end())
        before = text[begin : cue.start()]
        if kind == "active" and _BASE_FORM.match(verb) and not _MODAL_BEFORE.search(before):
            continue  # "Replace the SSTORE gas cost": an instruction, not a statement about documents
        citations = resolver.all(text, begin, end)
        objects = _objects(text, citations, cue.end(), _OBJECT_GAP[kind])
        self_agent = kind == "agentless" or (kind == "passive" and not objects and _SELF_OBJECT.match(text, cue.end()))
        if not objects and not self_agent:
            continue
        evidence = text[begin:end].strip()
        if kind == "favor" and not _ABANDONED.search(before):
            yield from (Skipped(doc_id, "not a supersession", evidence, c.written) for c in objects)
            continue
        if self_agent:
            yield from _self_superseding(doc_id, text, citations, (begin, end), cue)
            continue
        if _quoted(text, begin, cue.start()):
            yield from (Skipped(doc_id, "quoted", evidence, c.written) for c in objects)
            continue
        clause = " ".join(before.split()[-5:])
        if _NEGATION.search(clause) or _NEGATION.match(text, cue.end(), end):
            yield from (Skipped(doc_id, "negated", evidence, c.written) for c in objects)
            continue
        if _partial(text, kind, cue.end(), objects, " ".join(before.split()[-12:])):
            yield from (Skipped(doc_id, "partial", evidence, c.written) for c in objects)
            continue
        subject_text = _AUXILIARY.sub("", before)
        subject = _subject(text, citations, begin, subject_text)
        if subject is not None and subject.doc_id is None:
            yield Skipped(doc_id, "unresolved", evidence, subject.written, subject.candidates)
            continue
        subject_id = subject.doc_id if subject is not None else doc_id
        if kind == "favor":
            confidence = IN_FAVOR
        elif kind == "successor":
            confidence = SUCCESSOR
        elif subject is not None or _SELF.search(subject_text) or _SHALL_BEFORE.search(before):
            confidence = STATED
        else:
            confidence = UNCLEAR_SUBJECT
        if _HEDGE.search(clause) and not _SHALL_BEFORE.search(before):
            confidence = min(confidence, HEDGED)
        for cited in objects:
            if cited.doc_id is None:
                yield Skipped(doc_id, "unresolved", evidence, cited.written, cited.candidates)
                continue
            if cited.doc_id == subject_id or subject_id is None:
                continue
            sure = confidence - (TITLE_PENALTY if "title" in (cited.via, subject.via if subject else "") else 0.0)
            pair = (cited.doc_id, subject_id) if kind in ("passive", "favor") else (subject_id, cited.doc_id)
            yield ExtractedEdge(pair[0], pair[1], round(sure, 2), "prose", doc_id, evidence, (begin, end))
