"""A small security-advisory corpus shared by the tests, and how they read the evidence XML.

``lodash``: a disclosure and the patch release that voids it, worded with no shared
content word (the release note never names the vulnerability, the package or the CVE).
``zipcraft``: a three-record chain (disclosure ⊳ 2.3.1 by rule, 2.3.1 ⊳ 2.3.4 by rule and
by an explicit ``supersedes`` edge). The rest are distractors, several about prototype
pollution and merging, so relevance search ranks them above the lodash release note.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from car_rag import Record
from langchain_core.documents import Document

QUERY = "Is the prototype pollution in lodash merge still exploitable?"
ANCHOR = "lodash-disclosure"
SUPERSEDER = "lodash-4.17.99-release"
CHAIN_QUERY = "Is zipcraft archive extraction still open to Zip Slip path traversal?"

RECORDS: list[dict[str, Any]] = [
    {
        "doc_id": ANCHOR,
        "text": "CVE-2099-20001: prototype pollution in lodash merge. An attacker who controls an object "
        "passed to merge can add properties to Object.prototype; still exploitable wherever untrusted "
        "JSON is merged into configuration.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "lodash", "cve_id": "CVE-2099-20001"},
        "published_at": "2024-03-04",
        "source": "GitHub Advisory Database",
        "authority": 0.85,
    },
    {
        "doc_id": SUPERSEDER,
        "text": "Release 4.17.99. Bumped development dependencies and refreshed the build toolchain. Constructor "
        "keys are now skipped when assigning nested sources. Faster typed-array equality checks.",
        "doc_type": "patch_release",
        "scope": {"package": "lodash", "cve_id": "CVE-2099-20001"},
        "published_at": "2024-03-19",
        "version": "4.17.99",
        "source": "project release notes",
        "uri": "https://example.invalid/lodash/releases/4.17.99",
        "authority": 0.9,
    },
    {
        "doc_id": "zipcraft-disclosure",
        "text": "CVE-2099-20005: Zip Slip path traversal in zipcraft archive extraction. Entry names with ../ "
        "segments or symlinks escape the output folder.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "zipcraft", "cve_id": "CVE-2099-20005"},
        "published_at": "2024-05-02",
    },
    {
        "doc_id": "zipcraft-2.3.1-release",
        "text": "2.3.1 - member names are normalised before writing; a warning is logged for odd members.",
        "doc_type": "patch_release",
        "scope": {"package": "zipcraft", "cve_id": "CVE-2099-20005"},
        "published_at": "2024-05-20",
        "version": "2.3.1",
    },
    {
        "doc_id": "zipcraft-2.3.4-release",
        "text": "2.3.4 - hardening follow-up to 2.3.1: link members are resolved first and refused when they "
        "land outside the chosen folder.",
        "doc_type": "patch_release",
        "scope": {"package": "zipcraft", "cve_id": "CVE-2099-20005"},
        "published_at": "2024-06-27",
        "version": "2.3.4",
        "supersedes": ["zipcraft-2.3.1-release"],
    },
    {
        "doc_id": "deepmerge-disclosure",
        "text": "CVE-2099-20101: prototype pollution in deepmerge-plus merge of untrusted objects; no fix yet.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "deepmerge-plus", "cve_id": "CVE-2099-20101"},
        "published_at": "2024-07-01",
    },
    {
        "doc_id": "setvalue-disclosure",
        "text": "CVE-2099-20107: prototype pollution through crafted paths in setvalue-path; merge helpers exploitable.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "setvalue-path", "cve_id": "CVE-2099-20107"},
        "published_at": "2024-08-12",
    },
    {
        "doc_id": "mergeobj-disclosure",
        "text": "CVE-2099-20111: merge-objects lets still-untrusted input pollute the prototype chain of merged objects.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "merge-objects", "cve_id": "CVE-2099-20111"},
        "published_at": "2024-09-03",
    },
    {
        "doc_id": "axios-disclosure",
        "text": "CVE-2099-20003: axios follows protocol-relative URLs past baseURL, enabling server-side request forgery.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "axios", "cve_id": "CVE-2099-20003"},
        "published_at": "2024-02-11",
    },
    {
        "doc_id": "axios-1.7.4-release",
        "text": "v1.7.4: absolute URLs without a scheme are now resolved against the configured base.",
        "doc_type": "patch_release",
        "scope": {"package": "axios", "cve_id": "CVE-2099-20003"},
        "published_at": "2024-03-01",
        "version": "1.7.4",
    },
    {
        "doc_id": "jsonwebtoken-disclosure",
        "text": "CVE-2099-20004: jsonwebtoken accepts unsigned tokens when the algorithm list is empty.",
        "doc_type": "vulnerability_disclosure",
        "scope": {"package": "jsonwebtoken", "cve_id": "CVE-2099-20004"},
        "published_at": "2024-01-15",
    },
]

STOPWORDS = frozenset("a an and are as at be by for from in is it of on or still the to with".split())


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def records() -> list[Record]:
    return [Record.model_validate(r) for r in RECORDS]


def child(el: ET.Element, path: str) -> ET.Element:
    """The first element at ``path`` under ``el``, which must exist (``find`` may be None)."""
    found = el.find(path)
    assert found is not None, f"no {path!r} under <{el.tag}>"
    return found


def text_of(el: ET.Element, path: str | None = None) -> str:
    """The text of ``el``, or of its first element at ``path``; an element without text fails."""
    node = el if path is None else child(el, path)
    assert node.text is not None, f"<{node.tag}> has no text"
    return node.text


def doc_id(document: Document) -> str:
    """The id of a document made from a record (``Document.id`` may be None)."""
    assert document.id is not None, document
    return document.id
