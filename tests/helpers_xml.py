"""Reading rendered evidence XML in tests: an element or a text that is not there fails the
test where it is read (ElementTree's ``find`` and ``text`` may be None)."""

from __future__ import annotations

import xml.etree.ElementTree as ET


def child(el: ET.Element, path: str) -> ET.Element:
    """The first element at ``path`` under ``el``, which must exist."""
    found = el.find(path)
    assert found is not None, f"no {path!r} under <{el.tag}>"
    return found


def text_of(el: ET.Element, path: str | None = None) -> str:
    """The text of ``el``, or of its first element at ``path``; an element without text fails."""
    node = el if path is None else child(el, path)
    assert node.text is not None, f"<{node.tag}> has no text"
    return node.text
