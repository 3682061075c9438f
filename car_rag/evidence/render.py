"""One way to turn a retrieval result into evidence text: ``render(evidence, form, ...)``.

=========  ================================================================================
``form``   what the reader gets
=========  ================================================================================
plain      the records as numbered plain documents in car-rag's order, the default for a
           model (:func:`~car_rag.evidence.plain.render_plain`: see there why)
reader     the reader-first form: the authority digest in the policy's words, then packets
           marked current or replaced (:func:`~car_rag.evidence.reader.render_reader`)
audit      the audit XML, with ranks, channel scores and conflict groups, for debugging and
           provenance (:func:`~car_rag.evidence.audit.render_audit`)
=========  ================================================================================

The CLI, the service, both integrations and ``eval-llm`` choose a form by its name here, so
the three names mean one thing everywhere. Options a form does not use are ignored, so one
call site can switch forms by name alone. ``"xml"`` (the audit form) and ``"evidence"`` (the
plain form), the names the CLI and the service used, still work for one release and warn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from car_rag.deprecation import warn_renamed
from car_rag.evidence.audit import render_audit
from car_rag.evidence.budget import TokenCounter
from car_rag.evidence.packets import EvidencePacket, SupersededMode
from car_rag.evidence.plain import render_plain
from car_rag.evidence.reader import render_reader

if TYPE_CHECKING:
    from car_rag.policy import Policy
    from car_rag.records import Record
    from car_rag.retriever import RetrievalResult

__all__ = ["EVIDENCE_FORMS", "RENAMED_FORMS", "EvidenceForm", "evidence_form", "render"]

EvidenceForm = Literal["plain", "reader", "audit"]
EVIDENCE_FORMS: tuple[EvidenceForm, ...] = ("plain", "reader", "audit")
RENAMED_FORMS: dict[str, EvidenceForm] = {"xml": "audit", "evidence": "plain"}
"""Former names of the forms, accepted for one release with a DeprecationWarning."""


def evidence_form(name: str, *, stacklevel: int = 2) -> EvidenceForm:
    """The form ``name`` names; a former name (:data:`RENAMED_FORMS`) warns, naming the new
    one, at ``stacklevel`` (2: the caller of this function). Anything else is a ValueError
    that lists the forms."""
    if name in EVIDENCE_FORMS:
        return name
    if isinstance(name, str) and name in RENAMED_FORMS:
        new = RENAMED_FORMS[name]
        warn_renamed(f"evidence form {name!r}", repr(new), stacklevel=stacklevel + 1)
        return new
    raise ValueError(f"form must be one of {', '.join(map(repr, EVIDENCE_FORMS))}, got {name!r}")


def render(
    evidence: RetrievalResult | Sequence[Record] | Iterable[EvidencePacket],
    form: EvidenceForm = "plain",
    *,
    policy: Policy | None = None,
    k: int | None = None,
    superseded: SupersededMode = "include",
    token_budget: float | None = None,
    token_counter: TokenCounter | None = None,
    query_id: str | None = None,
    indent: str | None = "  ",
    provenance: bool = True,
    rationale: bool = True,
    compact: bool = False,
    dated: bool = False,
    max_chars: int | None = None,
) -> str:
    """``evidence`` (a retrieval result; or records, for the plain form; or evidence packets,
    for the other two) as the reader sees it in ``form``.

    Every form: ``k`` (the first ``k`` records of a result), ``superseded`` (``"omit"`` leaves
    superseded records out), ``token_budget`` counted by ``token_counter`` (whole records
    left out, least useful first). The reader and audit forms: ``policy`` (whose words; the
    result's own by default), ``query_id``, ``indent`` (None: no line breaks), ``provenance``
    (with ``k``, also the records those ``k`` replaced). The audit form: ``rationale`` (ranks,
    scores, matched terms) and ``compact`` (the same facts in fewer tokens). The plain form:
    ``dated`` (dates shown, oldest first) and ``max_chars`` (every text cut, for comparisons).
    """
    form = evidence_form(form, stacklevel=3)
    budget: dict[str, Any] = {"k": k, "superseded": superseded, "token_budget": token_budget, "token_counter": token_counter}
    if form == "plain":
        records = cast("RetrievalResult | Sequence[Record]", evidence)
        return render_plain(records, **budget, dated=dated, max_chars=max_chars)
    packets = cast("RetrievalResult | Iterable[EvidencePacket]", evidence)
    common: dict[str, Any] = {**budget, "policy": policy, "query_id": query_id, "indent": indent, "provenance": provenance}
    if form == "reader":
        return render_reader(packets, **common)
    return render_audit(packets, **common, rationale=rationale, compact=compact)
