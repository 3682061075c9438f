"""Where a query's terms occur in a record's text: the verbatim spans an evidence packet
lists (``content.exact_matching_spans``), so an audit shows why Stage 1 matched a record."""

from __future__ import annotations

import re

__all__ = ["matching_spans"]

_MAX_SPANS = 24
_WORD = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from has have how i if in into is it
    its may might must not of on or our should so still than that the their them then there these they
    this those to was we were what when where which who whom why will with would you your""".split()
)


def matching_spans(text: str, query: str, limit: int = _MAX_SPANS) -> list[str]:
    """Distinct verbatim spans of ``text`` made of consecutive query terms (case-insensitive,
    stop words ignored), in order of first appearance."""
    terms = {w.casefold() for w in _WORD.findall(query)} - _STOPWORDS
    terms = {t for t in terms if len(t) > 1 or t.isdigit()}
    if not terms:
        return []
    spans: list[str] = []
    run: tuple[int, int] | None = None

    def close() -> None:
        if run is not None:
            span = text[run[0] : run[1]]
            if span not in spans:
                spans.append(span)

    for match in _WORD.finditer(text):
        if match.group().casefold() in terms:
            gap = text[run[1] : match.start()] if run else None
            if run is not None and gap is not None and gap.strip(" -") == "" and len(gap) <= 2:
                run = (run[0], match.end())
            else:
                close()
                run = (match.start(), match.end())
        else:
            close()
            run = None
        if len(spans) >= limit:
            return spans
    close()
    return spans[:limit]
