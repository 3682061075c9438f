"""A tiny XML element tree that treats every value as untrusted.

Characters XML 1.0 forbids (C0 controls other than tab, newline and carriage return, lone
surrogates, U+FFFE/U+FFFF) are replaced by U+FFFD; then ``&``, ``<`` and ``>`` are escaped
everywhere (so neither a tag nor the CDATA terminator ``]]>`` can appear), ``"`` and literal
tab/newline/CR are escaped in attribute values, and CR is escaped in text, so a conforming
parser reads back exactly the sanitized string. Both evidence renderings
(:mod:`car_rag.evidence.audit`, :mod:`car_rag.evidence.reader`) write through it.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, time

from car_rag.eligibility import as_of_label
from car_rag.evidence.wording import as_of_sentence

__all__ = ["REPLACEMENT", "Element", "as_of_element", "iso_date", "sanitize_xml_text", "short_number"]

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_TEXT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"}
_ATTR_ESCAPES = {**_TEXT_ESCAPES, '"': "&quot;", "\n": "&#10;", "\t": "&#9;"}
_TEXT_RE = re.compile("[&<>\r]")
_ATTR_RE = re.compile('[&<>\r"\n\t]')


def sanitize_xml_text(value: str) -> str:
    """``value`` with every character XML 1.0 cannot carry replaced by U+FFFD.

    A surrogate pair held as two code points is first joined into the character it encodes;
    a lone surrogate becomes U+FFFD. Everything else is returned unchanged.
    """
    if _SURROGATE.search(value):
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return _FORBIDDEN.sub(REPLACEMENT, value)


def _escape_text(value: str) -> str:
    return _TEXT_RE.sub(lambda m: _TEXT_ESCAPES[m.group()], sanitize_xml_text(value))


def _escape_attr(value: str) -> str:
    return _ATTR_RE.sub(lambda m: _ATTR_ESCAPES[m.group()], sanitize_xml_text(value))


class Element:
    """An element. Tag and attribute names must be constants of the calling module, never data;
    attribute values and text are escaped when written."""

    __slots__ = ("tag", "attrs", "children", "text")

    def __init__(self, tag: str, attrs: dict[str, str | None] | None = None, text: str | None = None):
        self.tag = tag
        self.attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        self.children: list[Element] = []
        self.text = text

    def add(self, child: Element) -> Element:
        self.children.append(child)
        return child

    def write(self, out: list[str], indent: str | None, level: int = 0) -> None:
        pad = "" if indent is None else "\n" + indent * level
        if level:
            out.append(pad)
        attrs = "".join(f' {name}="{_escape_attr(value)}"' for name, value in self.attrs.items())
        if not self.children and self.text is None:
            out.append(f"<{self.tag}{attrs}/>")
            return
        out.append(f"<{self.tag}{attrs}>")
        if self.text is not None:
            out.append(_escape_text(self.text))
        for child in self.children:
            child.write(out, indent, level + 1)
        if self.children and indent is not None:
            out.append(pad)
        out.append(f"</{self.tag}>")


def iso_date(value: datetime | None) -> str | None:
    """A date alone when the time is midnight UTC, else the full ISO timestamp."""
    if value is None:
        return None
    if value.time() == time(0) and value.utcoffset() in (None, UTC.utcoffset(None)):
        return value.date().isoformat()
    return value.isoformat()


def as_of_element(when: datetime) -> Element:
    """``<as-of date="…">`` and its sentence, first in both XML forms of a result asked as of a date."""
    label = as_of_label(when)
    return Element("as-of", {"date": label}, as_of_sentence(label))


def short_number(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value:.4g}" if math.isfinite(value) else str(value)
