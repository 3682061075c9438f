"""Rules: how one record voids another. A rule ``trigger ⊳ target within keys`` says a record
of type ``trigger`` voids a record of type ``target`` when both agree on every key in
``within`` (an empty ``within`` makes the rule global); ``order`` adds a temporal, version or
hierarchy condition (:class:`Hierarchy`: ordered levels of authority). Explicit ``supersedes``
edges on records always count, whatever the policy (:data:`EXPLICIT_RULE`). A
:class:`~car_rag.policy.Policy` holds a domain's rules.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from car_rag.records import Record

__all__ = ["EXPLICIT_RULE", "LEVEL_ORDERS", "WILDCARD", "Hierarchy", "Rule", "version_is_higher"]

EXPLICIT_RULE = "explicit"
"""Name reported for an edge that comes from a record's own ``supersedes`` list."""

WILDCARD = "*"
"""A rule's trigger or target that stands for every doc_type."""


def _version_key(label: str) -> Version | None:
    try:
        return Version(label)
    except InvalidVersion:
        numbers = re.findall(r"\d+", label)
        return Version(".".join(str(int(n)) for n in numbers)) if numbers else None


def version_is_higher(a: str, b: str) -> bool:
    """Whether version label ``a`` is strictly higher than ``b``: PEP 440 when a label parses,
    else a PEP 440 version built from its numeric parts ("2024-R3" > "2024-R2"); labels with no
    numbers are not ordered. One key per label keeps the order transitive (mixing two orders
    would let three versions of one document void each other in a cycle)."""
    ka, kb = _version_key(a), _version_key(b)
    return ka is not None and kb is not None and ka > kb


LEVEL_ORDERS = ("higher_level", "level_then_later")
"""Rule orders that compare records' levels in a hierarchy."""


class Hierarchy(BaseModel):
    """Ordered levels of authority, highest first (``["supreme", "appellate", "district"]``).

    A record's level is the string in its free ``metadata`` under ``field`` (not a scope
    key: a level says who issued a record, not what it is about, and a scope key would split
    the entity bucket the rules pair records in); ``default`` is the level of a record that
    carries none. A record with no level, or one not in ``levels``, is not ordered by it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: tuple[str, ...] = Field(min_length=1, description="Level names, highest authority first.")
    field: str = Field(min_length=1, description="The record metadata field holding its level.")
    default: str | None = Field(default=None, description="Level of a record without the field; None: unordered.")

    @field_validator("levels")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise ValueError(f"a level may appear once, repeated: {repeated}")
        return value

    @model_validator(mode="after")
    def _default_known(self) -> Hierarchy:
        if self.default is not None and self.default not in self.levels:
            raise ValueError(f"default: unknown level {self.default!r}; levels: {list(self.levels)}")
        return self

    @cached_property
    def _rank(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.levels)}

    def rank(self, record: Record) -> int | None:
        """0 for the highest level; None for a record the hierarchy does not order."""
        value = record.metadata.get(self.field, self.default)
        return self._rank.get(value) if isinstance(value, str) else None


class Rule(BaseModel):
    """``trigger ⊳ target`` within the named scope keys, optionally ordered."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Short id reported on every edge, e.g. 'R1'.")
    trigger: str = Field(min_length=1, description="doc_type that voids, or '*' for any.")
    target: str = Field(min_length=1, description="doc_type that is voided, or '*' for any.")
    within: tuple[str, ...] = Field(
        default=(), description="Scope keys both records must share with equal values; empty = global."
    )
    order: Literal["any", "later", "higher_version", "higher_level", "level_then_later"] = Field(
        default="any",
        description="'later': the trigger's date must be strictly later; 'higher_version': its version higher; "
        "'higher_level': its level higher in the rule's hierarchy; 'level_then_later': higher, or the same level "
        "and later. When the compared value is missing on either record the rule does not fire.",
    )
    hierarchy: str | None = Field(default=None, description="The hierarchy a level order compares in.")
    kind: Literal["supersedes", "exception"] = Field(
        default="supersedes",
        description="'exception': the trigger suspends the target only while the trigger is itself active; "
        "a record of type revoked_by revokes it.",
    )
    revoked_by: str | None = Field(
        default=None, description="For an exception: the doc_type whose later record in the same scope revokes it."
    )
    description: str = ""
    verb: str = Field(
        default="",
        description="What the trigger does to the target, in the domain's words ('fixes', 'overrules'); "
        "the reader digest says 'supersedes' without it.",
    )
    confidence: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="How sure an edge this rule makes is (Definition 9): below a query's min_confidence it leaves "
        "the target active and contested instead of superseded.",
    )

    @model_validator(mode="after")
    def _no_symmetric_any(self) -> Rule:
        overlaps = self.trigger == self.target or WILDCARD in (self.trigger, self.target)
        if overlaps and self.order == "any":
            raise ValueError(
                f"rule {self.name!r}: trigger and target can be the same type, so it needs an order "
                "('later', 'higher_version', 'higher_level', 'level_then_later'), or two such records would void each other"
            )
        if (self.order in LEVEL_ORDERS) != (self.hierarchy is not None):
            raise ValueError(
                f"rule {self.name!r}: hierarchy: a level order ({', '.join(LEVEL_ORDERS)}) names "
                "the hierarchy it compares in, and only a level order does"
            )
        if (self.kind == "exception") != (self.revoked_by is not None):
            raise ValueError(
                f"rule {self.name!r}: revoked_by: an exception rule names the doc_type that revokes "
                "it, and only an exception rule does"
            )
        return self

    def matches_types(self, trigger_type: str, target_type: str) -> bool:
        return self.trigger in (WILDCARD, trigger_type) and self.target in (WILDCARD, target_type)

    def fires(self, trigger: Record, target: Record, hierarchy: Hierarchy | None = None) -> bool:
        """Whether this rule makes ``trigger`` supersede ``target`` (a level order compares in
        ``hierarchy``, the policy's hierarchy of this rule)."""
        if trigger.doc_id == target.doc_id or not self.matches_types(trigger.doc_type, target.doc_type):
            return False
        for key in self.within:
            value = trigger.scope.get(key)
            if value is None or value != target.scope.get(key):
                return False
        if self.order == "later":
            return trigger.time is not None and target.time is not None and trigger.time > target.time
        if self.order == "higher_version":
            return (
                trigger.version is not None and target.version is not None and version_is_higher(trigger.version, target.version)
            )
        if self.order in LEVEL_ORDERS:
            high, low = (hierarchy.rank(trigger), hierarchy.rank(target)) if hierarchy is not None else (None, None)
            if high is None or low is None:
                return False
            if high != low or self.order == "higher_level":
                return high < low
            return trigger.time is not None and target.time is not None and trigger.time > target.time
        return True

    def revocation(self) -> Rule | None:
        """For an exception rule, the rule by which a later ``revoked_by`` record in the same
        scope voids the exception (so the target it suspended controls again)."""
        if self.kind != "exception" or self.revoked_by is None:
            return None
        return Rule(
            name=f"{self.name}_revoked",
            trigger=self.revoked_by,
            target=self.trigger,
            within=self.within,
            order="later",
            confidence=self.confidence,
            verb="revokes",
            description=f"A later {self.revoked_by.replace('_', ' ')} revokes the exception of rule {self.name}.",
        )

    def label(self) -> str:
        return f"{self.trigger}⊳{self.target}"
