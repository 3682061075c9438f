"""Supersession headers: structured fields written as text.

Many series keep supersession in a header rather than in prose: a preamble line
("Replaces: 5", "Superseded-By: EIP-161", an RFC's "Obsoletes: 2616" beside its author), YAML
front matter (``replaces:`` with a value or a ``- item`` list, ``superseded-by: [3074]``), a
document-control table row (``| Supersedes | Travel Policy (2019) |``). Each value is resolved
like any citation (:meth:`~car_rag.extract.identifiers.IdentifierResolver.value`: identifier,
alias, title, or a bare number through the identifier templates). "Replaces", "Supersedes",
"Obsoletes", "Repeals", "Rescinds" make the document the superseder; "Replaced-By",
"Superseded-By", "Obsoleted-By", "Repealed-By", "Rescinded-By" the cited one. "Updates:" and
"Amends:" are not supersession and give nothing.
"""

from __future__ import annotations

import re

from car_rag.extract.citations import HEADER, TITLE_PENALTY, ExtractedEdge, Skipped
from car_rag.extract.identifiers import IdentifierResolver

__all__ = ["header_edges"]

_FIELD = re.compile(
    r"^[ \t>*|-]*\**[ \t]*(?P<key>replaces|supersedes|obsoletes|repeals|rescinds|"
    r"(?:superseded|replaced|obsoleted|repealed|rescinded)[-_ ]by)"
    r"[ \t]*\**[ \t]*[:|][ \t]*(?P<value>.*)$",
    re.IGNORECASE | re.MULTILINE,
)
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
    for match in _FIELD.finditer(text):
        values, end = _values(text, match)
        spans.append((match.start(), end))
        evidence = text[match.start() : end].strip()
        backwards = match.group("key").lower().endswith("by")
        for value in values:
            cited = resolver.value(value)
            if not cited:
                found.append(Skipped(doc_id, "unresolved", evidence, value))
            for citation in cited:
                if citation.doc_id is None:
                    found.append(Skipped(doc_id, "unresolved", evidence, value, citation.candidates))
                elif citation.doc_id != doc_id:
                    pair = (citation.doc_id, doc_id) if backwards else (doc_id, citation.doc_id)
                    sure = HEADER - (TITLE_PENALTY if citation.via == "title" else 0.0)
                    found.append(ExtractedEdge(pair[0], pair[1], sure, "header", doc_id, evidence, (match.start(), end)))
    return found, spans
