"""Version labels named in free text: find them, and compare them however they are written.

Used by the authority guard (is a version an answer names anywhere in its evidence?) and
by the answer classifier (is it the fixing version?). ``1.15``, ``v1.15.0`` and
``pkg@1.15.0`` are one version; CVSS scores, CWE ids, section numbers and the like are not
versions.
"""

from __future__ import annotations

import re

__all__ = ["extract_versions", "normalise_version"]

_VERSION_RE = re.compile(
    r"(?<![\w.\-/#])v?(\d+(?:\.\d+)+(?:[-.]?(?:alpha|beta|rc|pre|post|dev|a|b)\.?\d*)?)(?![\w]|\.\d)", re.IGNORECASE
)
_BARE_VERSION_RE = re.compile(r"\bversion\s+(v?\d+)\b(?![.\d])", re.IGNORECASE)
_NOT_VERSION_BEFORE = re.compile(
    r"(?:\b(?:cvss|score|cwe|rfc|python|node(?:\.js)?|php|java|jdk|go|section|table|figure)|§)\s*v?(?:3\.\d\s*)?[:=]?\s*$",
    re.IGNORECASE,
)


def normalise_version(value: str) -> tuple[tuple[int, ...], str] | None:
    """``"v1.15.0"``, ``"pkg@1.15"`` → ``((1, 15), "")``: numeric parts without trailing
    zeros, plus a lower-cased pre-release suffix; None when there is no version in it."""
    m = _VERSION_RE.search(value.strip().rsplit("@", 1)[-1])
    if not m:
        m = re.search(r"(\d+(?:\.\d+)*)(.*)$", value)
        if not m:
            return None
    raw = m.group(1).lower()
    leading = re.match(r"\d+(?:\.\d+)*", raw)
    assert leading is not None  # both patterns capture from a digit
    num = leading.group(0)
    suffix = re.sub(r"^[-.]", "", raw[len(num) :])
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
    # "version 4" counts; "Python version 3" names a language's version, not a fix.
    return out + [m.group(1) for m in _BARE_VERSION_RE.finditer(text) if not _NOT_VERSION_BEFORE.search(text[: m.start()][-24:])]
