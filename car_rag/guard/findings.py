"""What the guard says about an answer: each inconsistency it finds, and its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Finding", "FindingKind", "GuardReport"]

FindingKind = Literal[
    "stale_state", "stale_citation", "unknown_citation", "unknown_version", "superseded_version", "ambiguous_state"
]


@dataclass(frozen=True)
class Finding:
    """One inconsistency: its kind, a plain sentence a user (or the model) can act on, the
    records it concerns (as the evidence numbers them) and the answer's words it was found in."""

    kind: FindingKind
    message: str
    packet_ids: tuple[str, ...] = ()
    quote: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "packet_ids": list(self.packet_ids), "quote": self.quote}


@dataclass(frozen=True)
class GuardReport:
    """The guard's verdict on one answer."""

    judged: bool
    findings: tuple[Finding, ...] = ()
    reason: str = ""
    """Why the answer could not be judged, when ``judged`` is False."""
    claims: tuple[str, ...] = field(default=())
    """States the answer asserts, in order."""
    basis: str = ""
    """What it was judged against: ``evidence`` (what the reader saw) or ``scopes`` (re-retrieved, whole scopes)."""

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "judged": self.judged,
            "flagged": self.flagged,
            "reason": self.reason,
            "claims": list(self.claims),
            "basis": self.basis,
            "findings": [f.to_dict() for f in self.findings],
        }
