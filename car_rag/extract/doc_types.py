"""``doc_type`` from the policy's ``[[extract.doc_types]]`` patterns.

Entries are tried in order; an entry matches when any of its regexes finds a match (in the
title, the text, or a metadata field's value), and the first that matches gives the type.
A document none matches gets ``default_doc_type`` and is reported as *untyped*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from car_rag.extract.documents import RawDocument
from car_rag.policy import Extraction

__all__ = ["DocTyper", "Typed"]


@dataclass(frozen=True)
class Typed:
    """A document's type and where it came from: ``input``, ``doc_types.<i>.<field>``, ``llm`` or ``default``."""

    doc_type: str
    source: str
    confidence: float | None
    """1.0 from the input or a pattern, the LLM route's own, None for the default (nothing typed it)."""


class DocTyper:
    """Applies the policy's doc-type patterns (see the module docstring)."""

    def __init__(self, config: Extraction):
        self.default = config.default_doc_type
        self._entries = []
        for i, entry in enumerate(config.doc_types):
            checks: list[tuple[str, str | None, re.Pattern[str]]] = []
            if entry.title is not None:
                checks.append((f"doc_types.{i}.title", None, re.compile(entry.title, re.IGNORECASE)))
            if entry.text is not None:
                checks.append((f"doc_types.{i}.text", "", re.compile(entry.text, re.IGNORECASE)))
            for name, pattern in entry.metadata.items():
                checks.append((f"doc_types.{i}.metadata.{name}", name, re.compile(pattern, re.IGNORECASE)))
            self._entries.append((entry.doc_type, checks))

    def type_of(self, document: RawDocument) -> Typed:
        """The document's type: its own, else the first pattern's that matches, else the default."""
        given = document.fields.get("doc_type")
        if isinstance(given, str) and given.strip():
            return Typed(given, "input", 1.0)
        for doc_type, checks in self._entries:
            for where, name, pattern in checks:
                if name is None:
                    value = document.title or ""
                elif name == "":
                    value = document.text
                else:
                    found = document.metadata.get(name)
                    value = found if isinstance(found, str) else "" if found is None else str(found)
                if pattern.search(value):
                    return Typed(doc_type, where, 1.0)
        return Typed(self.default, "default", None)
