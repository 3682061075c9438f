"""The trust model for authority: whose records may void whose.

The eligibility gate (:mod:`car_rag.eligibility`) keeps what a reader may *read*; this
module keeps what may *void* it. Every edge (a policy rule, an explicit ``supersedes``, a
waiting edge when its target arrives, whatever the dates) is linked only when its
superseder is trusted for its target:

=========================  =========================  ===============================
superseder                 target                     voids?
=========================  =========================  ===============================
tenant T                   tenant T                   yes (even one a reader cannot read)
public, from a publisher   tenant T                   yes, in the scopes it publishes for
public, no publisher       tenant T                   only with ``public_voids_tenants = "any"``
public                     public                     yes
tenant T                   public or tenant U         never
=========================  =========================  ===============================

An untrusted edge is kept as a claim, never as an edge: it voids nothing for anyone, cannot
close a cycle, and is shown (as ``disputed_by``, with its reason) only to a reader who may
read both records. One write keeps at most ``claims_per_write`` of them per pair of tenants,
so one writer's rules cannot grow the graph without bound. Without tenants every record is
public, so nothing changes.

A publisher is trusted for every scope unless ``publisher_scopes`` names it: then only for
the records whose scope holds one of the values it lists (a server takes them from its keys
file, :mod:`car_rag.serve.keys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from car_rag.records import Record

__all__ = ["TRUST_REASONS", "PublisherScopes", "Trust"]

PublisherScopes = Mapping[str, tuple[str, ...]]
"""The scopes one publisher publishes for: scope key -> the values it is trusted for."""

TRUST_REASONS = {
    "other_tenant": "a record of another tenant may not void this one",
    "tenant_over_public": "a tenant's record may not void a public record",
    "public_not_publisher": "a public record from no declared publisher may not void a tenant's record",
    "publisher_out_of_scope": "a publisher's record may not void a tenant's record outside the scopes it publishes for",
}
"""Each rule an untrusted edge breaks, and what a reader (or a refused writer) is told."""


class Trust(BaseModel):
    """A policy's ``[trust]`` section: who may void tenants' records, and what an untrusted
    write gets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    public_voids_tenants: Literal["publishers", "any"] = Field(
        default="publishers",
        description="Which public records may void a tenant's: those with a 'publisher' (written by a publisher key), or any.",
    )
    untrusted: Literal["record", "refuse"] = Field(
        default="record",
        description="A write whose record would void another's without trust: kept as a claim that voids "
        "nothing ('record'), or refused whole with a 403 naming the rule ('refuse').",
    )
    claims_per_write: int = Field(
        default=16,
        ge=0,
        description="The most untrusted claims one write keeps per pair of tenants (its record's claims over "
        "another tenant's records, or their claims over it): the surest first, then those with the newest other "
        "record. The rest are dropped, so one writer cannot grow the graph, or a reader's 'disputed_by', without bound.",
    )
    publisher_scopes: dict[str, dict[str, tuple[str, ...]]] = Field(
        default_factory=dict,
        description="Publisher name -> {scope key: values}: the scopes that publisher may void tenants' records in "
        "(a record whose scope holds one of those values). A publisher not named here may void them in every scope.",
    )

    @field_validator("publisher_scopes")
    @classmethod
    def _scopes_name_values(cls, value: dict[str, dict[str, tuple[str, ...]]]) -> dict[str, dict[str, tuple[str, ...]]]:
        # An empty list or table would read as "trusted for nothing": say so with no publisher instead.
        for name, scopes in value.items():
            if not scopes:
                raise ValueError(f"{name!r}: names no scope key (a publisher for no scope is no publisher)")
            for key, values in scopes.items():
                if not values or any(not v.strip() for v in values):
                    raise ValueError(f"{name!r}.{key}: needs a list of non-blank scope values")
        return value

    def distrust(self, superseder: Record, target: Record) -> str | None:
        """The rule (a key of :data:`TRUST_REASONS`) by which ``superseder`` may not void
        ``target``; None when it may."""
        if superseder.tenant == target.tenant:
            return None
        if superseder.tenant is None:
            if self.public_voids_tenants == "any":
                return None
            if superseder.publisher is None:
                return "public_not_publisher"
            return None if self.publishes_for(superseder.publisher, target) else "publisher_out_of_scope"
        return "tenant_over_public" if target.tenant is None else "other_tenant"

    def publishes_for(self, publisher: str, target: Record) -> bool:
        """Whether ``publisher`` may void ``target`` by its scope (every scope where it is not named)."""
        scopes = self.publisher_scopes.get(publisher)
        return scopes is None or any(target.scope.get(key) in values for key, values in scopes.items())

    def with_publishers(self, scopes: Mapping[str, PublisherScopes]) -> Trust:
        """This trust with the scopes of the publishers ``scopes`` names replaced (a server's keys file)."""
        merged = {**self.publisher_scopes, **{name: dict(s) for name, s in scopes.items()}}
        return Trust.model_validate({**self.model_dump(), "publisher_scopes": merged})
