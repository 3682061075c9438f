"""The plain rendering of evidence: car-rag's records as numbered documents, the default
context for a language model.

    [Document 1] (patch_release)
    lodash 4.17.12 fixes prototype pollution in defaultsDeep …

    [Document 2] (vulnerability_disclosure)
    …

Why plain is the default: on the offline reader (Qwen2.5-Coder-1.5B) the reader-first form
(:mod:`car_rag.evidence.reader`) was never better than these same records as plain text, and
on held-out legal questions it was worse (confidently wrong 31/120 against 7/120): when
Stage 1 misses the question's case, the digest's confident "good law" about the cases it
did find is read as the answer (README, "Does the reader-first evidence make the reader
right?"). Superseded records are filtered or ranked after the records that void them by
car-rag's resolution, so the order itself carries authority.

Each record's text is whole; a ``token_budget`` keeps whole documents in rank order while
they fit, and cuts the first only when it alone does not fit. A record's text cannot forge
a document header: a line of it that starts like one is marked as quoted, after every Unicode
line break is made a line feed; a value in a header (type, label, rule, scope value) is folded
onto one line and quoted where it holds one of the header's delimiters; control and
bidirectional characters are written as ``<U+XXXX>`` everywhere. A record voided
only by a record the caller may not read says so in its header, without naming it. ``dated=True``
adds each record's date and orders them oldest first, as FreshPrompt does (Vu et al. 2023;
the ``fresh-plain`` condition of ``car-rag eval-llm``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

from car_rag.eligibility import as_of_label
from car_rag.evidence.budget import TokenCounter, approx_tokens
from car_rag.evidence.packets import SupersededMode
from car_rag.evidence.wording import (
    CUT_MARK,
    FILTERED_REPLACER_NOTE,
    HIDDEN_REPLACER_NOTE,
    ambiguity_note,
    as_of_sentence,
    disputed_note,
    document_header,
    plain_line,
    plain_text,
    plain_value,
    possibly_superseded_note,
    record_label,
    replaced_note,
    scope_probability_note,
    subject_phrase,
    uncertain_scope,
)
from car_rag.evidence.xml_tree import iso_date

if TYPE_CHECKING:
    from car_rag.records import Record
    from car_rag.retriever import RetrievalResult

__all__ = ["clip_text", "oldest_first", "render_plain"]


def clip_text(text: str, max_chars: int | None) -> str:
    """Line endings become LF (XML escapes a CR as ``&#13;``, a token per line for nothing);
    with ``max_chars``, the text is cut (the same cut for every form compared)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars] + " …"


def _text(record: Record, max_chars: int | None) -> str:
    """The record's text, cut as :func:`clip_text` does, escaped (:func:`plain_text`)."""
    return plain_text(clip_text(record.text, max_chars))


def oldest_first(records: Iterable[Record]) -> list[Record]:
    """FreshPrompt's order: undated records first (their age is unknown), then oldest to
    newest; ties keep the given order."""
    records = list(records)
    undated = [r for r in records if r.time is None]
    return undated + sorted((r for r in records if r.time is not None), key=lambda r: r.time)  # type: ignore[arg-type,return-value]


def _label(result: RetrievalResult, doc_id: str) -> str:
    other = result.get(doc_id)
    return plain_value(record_label(other.record.doc_type, other.record.version, doc_id) if other else doc_id)


def render_plain(
    evidence: RetrievalResult | Sequence[Record],
    *,
    k: int | None = None,
    superseded: SupersededMode = "include",
    token_budget: float | None = None,
    token_counter: TokenCounter | None = None,
    dated: bool = False,
    max_chars: int | None = None,
    marked: bool = False,
) -> str:
    """Numbered plain-text documents for a retrieval result's first ``k`` records (in rank
    order) or for records as given. ``superseded="omit"`` leaves a result's superseded
    records out; ``dated`` adds dates and orders oldest first; ``max_chars`` cuts every text
    (for comparisons with cut contexts only); ``marked`` names in each replaced record's header
    what replaced it (for an agent's tool output, which is read apart from car-rag's order)."""
    if superseded not in ("include", "omit"):
        raise ValueError(f"superseded must be 'include' or 'omit', got {superseded!r}")
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k}")
    if token_budget is not None and token_budget <= 0:
        raise ValueError(f"token_budget must be > 0, got {token_budget}")
    if isinstance(evidence, (str, bytes)):
        raise TypeError("render_plain takes a RetrievalResult or Record objects, not text")
    hidden: set[str] = set()  # voided only by records the caller may not read: nothing shown says so
    filtered: set[str] = set()  # voided only by records the query's filters leave out
    guessed: dict[str, str] = {}  # doc_id -> its scope's probability, where the scope is a guess
    possibly: dict[str, list[tuple[str, float]]] = {}  # contested doc_id -> (its weak voider's label, confidence)
    disputed: dict[str, list[tuple[str, str]]] = {}  # doc_id -> the records disputing its authority, with their rule
    replaced: dict[str, list[str]] = {}  # doc_id -> the labels of what replaces it, when ``marked``
    lead = ""  # the ambiguity sentence, where the question names several subjects it does not tell apart
    if hasattr(evidence, "top"):
        result = cast("RetrievalResult", evidence)
        if result.as_of is not None:
            lead = f"{as_of_sentence(as_of_label(result.as_of))}\n\n"
        if result.ambiguity is not None:
            lead += f"{plain_line(ambiguity_note(result.ambiguity, result.policy))}\n\n"
        shown = [r for r in result.top(k) if superseded == "include" or r.status == "active"]
        # Named by label, not by document number: a token budget can renumber the documents.
        possibly = {
            r.doc_id: [(_label(result, e.superseder), e.confidence) for e in r.contested_by] for r in shown if r.contested
        }
        disputed = {
            r.doc_id: [(_label(result, e.superseder), plain_value(e.rule)) for e in r.disputed_by] for r in shown if r.disputed_by
        }
        hidden = {r.doc_id for r in shown if r.hidden_superseder and not r.superseded_by}
        filtered = {r.doc_id for r in shown if r.filtered_superseder and not r.hidden_superseder and not r.superseded_by}
        if marked:  # every replaced record the caller may see what replaced (a hidden or filtered-out one has its own note)
            replaced = {
                r.doc_id: [_label(result, s) for s in r.superseded_by or [e.superseder for e in r.voided_by]]
                for r in shown
                if r.status == "superseded" and r.doc_id not in hidden and r.doc_id not in filtered
            }
        guessed = {r.doc_id: p for r in shown if (p := uncertain_scope(r.scope_probability)) is not None}
        records = [r.record for r in shown]
    else:
        records = list(evidence)[:k]
    if dated:
        records = oldest_first(records)
    count = token_counter or approx_tokens

    def doc(i: int, rec: Record, text: str) -> str:
        notes = [HIDDEN_REPLACER_NOTE] if rec.doc_id in hidden else [FILTERED_REPLACER_NOTE] if rec.doc_id in filtered else []
        if rec.doc_id in replaced:
            notes.append(replaced_note(replaced[rec.doc_id]))
        notes += [possibly_superseded_note(voider, confidence) for voider, confidence in possibly.get(rec.doc_id, ())]
        if rec.doc_id in disputed:
            notes.append(disputed_note(disputed[rec.doc_id]))
        if rec.doc_id in guessed:
            scope = {key: plain_value(value) for key, value in rec.scope.items()}
            notes.append(scope_probability_note(guessed[rec.doc_id], subject_phrase(scope)))
        return f"{document_header(i, plain_value(rec.doc_type), notes, dated=dated, date=iso_date(rec.time))}\n{text}"

    texts = [_text(rec, max_chars) for rec in records]
    kept: list[str] = []
    for rec, text in zip(records, texts):
        trial = doc(len(kept) + 1, rec, text)
        if token_budget is None or not kept or count(lead + "\n\n".join([*kept, trial])) <= token_budget:
            kept.append(trial)
    if token_budget is not None and kept and count(lead + kept[0]) > token_budget:
        words = texts[0].split(" ")
        keep = max(1, int(len(words) * max(token_budget - count(lead), 1) / count(kept[0])))
        kept[0] = doc(1, records[0], " ".join(words[:keep]) + CUT_MARK)
    return lead + "\n\n".join(kept)
