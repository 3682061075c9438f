"""Ambiguity: what a result says when the question cannot be tied to one scope.

A question such as "Has the XXE flaw in puppet been patched?" may fit nine puppet advisories
written alike, one patched and eight not. No order of those nine is knowledge of which one
is meant, so the result does not guess: it carries an :class:`Ambiguity` naming how many
scopes the question plausibly names, how many of them are in each current state (in the
policy's words), and each scope with its probability. Every evidence form states it in one
line, and the authority guard treats an answer that picks one of them as stating a state
the evidence does not support.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Ambiguity", "AmbiguousScope"]


@dataclass(frozen=True)
class AmbiguousScope:
    """One scope the question may be about: its values, its probability, its current state
    (the policy's label for what its controlling records assert; their doc type where the
    policy names no state) and those controlling records (only ones the caller may read)."""

    scope: Mapping[str, str]
    probability: float
    state: str
    controlling: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": dict(self.scope),
            "probability": round(self.probability, 4),
            "state": self.state,
            "controlling": list(self.controlling),
        }


@dataclass(frozen=True)
class Ambiguity:
    """The question plausibly names ``scopes`` (≥ 2) scopes it does not tell apart.

    ``states`` counts those scopes per current state (``{"patched": 1, "vulnerable": 8}``);
    ``members`` lists them, most probable first."""

    scopes: int
    states: Mapping[str, int]
    members: tuple[AmbiguousScope, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scopes": self.scopes,
            "states": dict(self.states),
            "members": [m.to_dict() for m in self.members],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ambiguity:
        """The inverse of :meth:`to_dict` (what framework annotations carry); ValueError names
        the field that is missing or of the wrong type."""
        try:
            members = tuple(
                AmbiguousScope(
                    {str(k): str(v) for k, v in m["scope"].items()},
                    float(m["probability"]),
                    str(m["state"]),
                    tuple(str(d) for d in m.get("controlling", ())),
                )
                for m in data["members"]
            )
            return cls(int(data["scopes"]), {str(k): int(v) for k, v in data["states"].items()}, members)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"ambiguity: not an ambiguity object ({type(exc).__name__}: {exc})") from exc
