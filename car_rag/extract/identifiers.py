"""Identifier resolution: which document a citation names.

A cited document is found three ways, in this order: a policy-declared identifier pattern
(``KEP[- ]?(\\d+)`` → ``kep-{1}``; the first template that names a known document wins), an
alias the policy declares (``"Travel Policy of March 2019" = "travel-2019"``), or the exact
title of a known document. A pattern match whose doc_id no known document has is an
*unresolved* citation: reported, never an edge.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from car_rag.policy import Extraction

__all__ = ["Citation", "IdentifierResolver"]

_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\s*#?(\d+)\s*")
MIN_TITLE_CHARS = 8
"""A title shorter than this ("Summary", "Intro") names too many things to resolve a citation."""


@dataclass(frozen=True)
class Citation:
    """One mention of a document in a text: where, as written, and what it resolves to."""

    start: int
    end: int
    written: str
    doc_id: str | None
    """The known document it names; None: unresolved (``candidates`` says what was tried)."""
    via: str
    """``identifier``, ``alias``, ``title`` or ``number`` (a bare number in a header value)."""
    candidates: tuple[str, ...] = ()


class IdentifierResolver:
    """Finds citations of known documents in a span of text (see the module docstring).

    ``known``: every doc_id a citation may resolve to (the input's, and a store's for
    ``ingest --extract``); ``titles``: doc_id -> title of the documents a title may name.
    """

    def __init__(self, config: Extraction, known: Collection[str], titles: Mapping[str, str] | None = None):
        self.known = known
        self._patterns = [(re.compile(p.pattern, re.IGNORECASE if p.ignore_case else 0), p.doc_id) for p in config.identifiers]
        names: dict[str, tuple[str, str]] = {}
        if config.titles and titles:
            for doc_id, title in titles.items():
                key = " ".join(_WORD.findall(title))
                if len(key) >= MIN_TITLE_CHARS:
                    # Two documents with one title: the title names neither.
                    names[key] = ("", "title") if key in names and names[key][0] != doc_id else (doc_id, "title")
        for alias, doc_id in config.aliases.items():
            names[" ".join(_WORD.findall(alias.lower()))] = (doc_id, "alias")
        self._names = {k: v for k, v in names.items() if k and v[0]}
        self._by_first: dict[str, list[str]] = {}
        for key in sorted(self._names, key=len, reverse=True):
            self._by_first.setdefault(key.split(" ", 1)[0], []).append(key)

    def _resolve(self, match: re.Match[str], templates: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
        groups = (match.group(0), *match.groups(default=""))
        tried = []
        for template in templates:
            try:
                doc_id = template.format(*groups)
            except (IndexError, KeyError, ValueError):
                continue
            tried.append(doc_id)
            if doc_id in self.known:
                return doc_id, tuple(tried)
        return None, tuple(tried)

    def identifiers(self, text: str, start: int = 0, end: int | None = None) -> Iterator[Citation]:
        """Citations by identifier pattern in ``text[start:end]``, in text order (overlapping
        matches of two patterns: the earlier, then longer, wins)."""
        found: list[Citation] = []
        stop = len(text) if end is None else end
        for pattern, templates in self._patterns:
            for match in pattern.finditer(text, start, stop):
                doc_id, tried = self._resolve(match, templates)
                found.append(Citation(match.start(), match.end(), match.group(0), doc_id, "identifier", tried))
        found.sort(key=lambda c: (c.start, -(c.end - c.start)))
        last = -1
        for citation in found:
            if citation.start >= last:
                last = citation.end
                yield citation

    def names(self, text: str, start: int = 0, end: int | None = None) -> Iterator[Citation]:
        """Citations by alias or exact title in ``text[start:end]`` (whole words, case-insensitive)."""
        if not self._names:
            return
        words = list(_WORD.finditer(text, start, len(text) if end is None else end))
        written = [w.group(0) for w in words]
        lowered = [w.lower() for w in written]
        i = 0
        while i < len(words):
            hit = None
            keys = self._by_first.get(written[i], [])
            if lowered[i] != written[i]:
                keys = keys + self._by_first.get(lowered[i], [])
            for key in keys:
                size = key.count(" ") + 1
                if " ".join((written if self._names[key][1] == "title" else lowered)[i : i + size]) == key:
                    hit = key, size
                    break
            if hit is None:
                i += 1
                continue
            key, size = hit
            doc_id, via = self._names[key]
            first, last = words[i], words[i + size - 1]
            yield Citation(first.start(), last.end(), text[first.start() : last.end()], doc_id, via, (doc_id,))
            i += size

    def all(self, text: str, start: int = 0, end: int | None = None) -> list[Citation]:
        """Identifier, alias and title citations in the span, in text order, overlaps dropped."""
        found = sorted([*self.identifiers(text, start, end), *self.names(text, start, end)], key=lambda c: c.start)
        kept: list[Citation] = []
        for citation in found:
            if not kept or citation.start >= kept[-1].end:
                kept.append(citation)
        return kept

    def value(self, value: str) -> list[Citation]:
        """The documents a header value names ("KEP-2433, KEP-536", a title, a bare number)."""
        found = self.all(value)
        if found:
            return found
        number = _NUMBER.fullmatch(value)
        if number is None:
            return []
        tried: list[str] = []
        for _, templates in self._patterns:
            for template in templates:
                if "{1}" in template:
                    doc_id = template.replace("{1}", number.group(1))
                    tried.append(doc_id)
                    if doc_id in self.known:
                        return [Citation(0, len(value), value.strip(), doc_id, "number", tuple(tried))]
        return [Citation(0, len(value), value.strip(), None, "number", tuple(tried))] if tried else []
