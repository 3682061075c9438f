"""Supersession headers: structured fields written as text.

Many series keep supersession in a header rather than in prose: a preamble line
("Replaces: 5", "Superseded-By: EIP-161", an RFC's "Obsoletes: 2616" beside its author), YAML
front matter (``replaces:`` with a value or a ``- item`` list, ``superseded-by: [3074]``), a
document-control table: a row (``| Supersedes | Travel Policy (2019) |``) or a column of a
one-row table (``| Number | Supersedes |``, its rule, ``| POL-3 | POL-1 |``). Each value is resolved
like any citation (:meth:`~car_rag.extract.identifiers.IdentifierResolver.value`: identifier,
alias, title, or a bare number through the identifier templates). "Replaces", "Supersedes",
"Obsoletes", "Repeals", "Rescinds" make the document the superseder; "Replaced-By",
"Superseded-By", "Obsoleted-By", "Repealed-By", "Rescinded-By" the cited one. "Updates:" and
"Amends:" are not supersession and give nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from car_rag.extract.citations import HEADER, TITLE_PENALTY, ExtractedEdge, Skipped
from car_rag.extract.identifiers import IdentifierResolver

__all__ = ["header_edges"]

_KEYS = r"replaces|supersedes|obsoletes|repeals|rescinds|(?:superseded|replaced|obsoleted|repealed|rescinded)[-_ ]by"
_FIELD = re.compile(
    rf"^[ \t>*|-]*\**[ \t]*(?P<key>{_KEYS})[ \t]*\**[ \t]*[:|][ \t]*(?P<value>.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_ROW = re.compile(r"^[ \t]*\|(?P<cells>.*)\|[ \t]*$", re.MULTILINE)
_RULE = re.compile(r"[ \t]*\|?(?:[ \t]*:?-{3,}:?[ \t]*\|?)+[ \t]*")
_KEY_CELL = re.compile(rf"\**[ \t]*({_KEYS})[ \t]*:?\**", re.IGNORECASE)
_ITEM = re.compile(r"[ \t]*-[ \t]+(.+)")
_SPLIT = re.compile(r"[,;|]")
_COLUMN_GAP = re.compile(r"[ \t]{3,}")
"""Where a two-column header's left value ends: "Obsoletes: 2145, 2616      J. Reschke, Ed." (RFCs)."""
_QUOTES = "\"'`[]()* \t"
_STEMS = ("replac", "supersed", "obsolet", "repeal", "rescind")


def _values(text: str, match: re.Match[str]) -> tuple[list[str], int]:
    """The values of one header field (inline, or a YAML list on the lines after it) and where it ends."""
    value = _COLUMN_GAP.split(match.group("value").strip(), 1)[0]
    end = match.end()
    if value and value not in ("|", ">"):
        return [v.strip(_QUOTES) for v in _SPLIT.split(value) if v.strip(_QUOTES)], end
    items = []
    for line in text[end + 1 :].split("\n"):
        item = _ITEM.fullmatch(line)
        if item is None:
            break
        items.append(item.group(1).strip(_QUOTES))
        end += len(line) + 1
    return [i for i in items if i], end


def _columns(text: str, resolver: IdentifierResolver) -> Iterator[tuple[str, list[str], tuple[int, int]]]:
    """A document-control table with a supersession column and one row, the document's own
    (``| Number | Title | Supersedes |`` / ``|---|---|---|`` / ``| POL-3 | Travel | POL-1 |``):
    each such column's key, its values and the table's span. A table of several rows (a register,
    a revision history) does not say which row is this document: nothing. A two-cell row with the
    key first is a column header when its second cell names no document (``| Supersedes |
    Effective |``), else the first field of a key-value table (``| Supersedes | POL-1 |``)."""
    for header in _ROW.finditer(text):
        cells = [c.strip() for c in header.group("cells").split("|")]
        keys = {i: m.group(1) for i, c in enumerate(cells) if (m := _KEY_CELL.fullmatch(c))}
        if not keys:
            continue
        lines = text[header.end() + 1 :].split("\n")
        if len(lines) < 2 or not _RULE.fullmatch(lines[0]) or not _ROW.fullmatch(lines[1]):
            continue
        if len(lines) > 2 and _ROW.fullmatch(lines[2]):
            continue
        if len(cells) == 2 and 0 in keys and any(c.doc_id for c in resolver.value(cells[1].strip(_QUOTES))):
            continue  # a key and its value: a row of a key-value table, read as a field
        row = [c.strip() for c in lines[1].strip()[1:-1].split("|")]
        end = header.end() + 1 + len(lines[0]) + 1 + len(lines[1])
        for i, key in keys.items():
            if i < len(row):
                values = [v.strip(_QUOTES) for v in re.split(r"[,;]", row[i]) if v.strip(_QUOTES)]
                yield key, values, (header.start(), end)


def _cited(
    doc_id: str, key: str, values: list[str], text: str, span: tuple[int, int], resolver: IdentifierResolver
) -> Iterator[ExtractedEdge | Skipped]:
    """The edges one header field's values give, in the direction of its key."""
    evidence = text[span[0] : span[1]].strip()
    backwards = key.lower().endswith("by")
    for value in values:
        cited = resolver.value(value)
        if not cited:
            yield Skipped(doc_id, "unresolved", evidence, value)
        for citation in cited:
            if citation.doc_id is None:
                yield Skipped(doc_id, "unresolved", evidence, value, citation.candidates)
            elif citation.doc_id != doc_id:
                pair = (citation.doc_id, doc_id) if backwards else (doc_id, citation.doc_id)
                sure = HEADER - (TITLE_PENALTY if citation.via == "title" else 0.0)
                yield ExtractedEdge(pair[0], pair[1], sure, "header", doc_id, evidence, span)


def header_edges(
    doc_id: str, text: str, resolver: IdentifierResolver
) -> tuple[list[ExtractedEdge | Skipped], list[tuple[int, int]]]:
    """Edges from the header fields of ``text`` (document ``doc_id``), unresolved values as
    :class:`Skipped`, and the spans of the fields (prose reading skips them)."""
    found: list[ExtractedEdge | Skipped] = []
    spans: list[tuple[int, int]] = []
    lowered = text.lower()
    if not any(stem in lowered for stem in _STEMS):
        return found, spans
    tables = list(_columns(text, resolver))
    for match in _FIELD.finditer(text):
        if any(s <= match.start() < e for _, _, (s, e) in tables):
            continue  # a table's header row, read by column
        values, end = _values(text, match)
        spans.append((match.start(), end))
        found += _cited(doc_id, match.group("key"), values, text, (match.start(), end), resolver)
    for key, values, span in tables:
        spans.append(span)
        found += _cited(doc_id, key, values, text, span, resolver)
    return found, spans
