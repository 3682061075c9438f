"""The trust model for authority: whose records may void whose.

The eligibility gate (:mod:`car_rag.eligibility`) keeps what a reader may *read*; this
module keeps what may *void* it. Every edge (a policy rule, an explicit ``supersedes``, a
waiting edge when its target arrives, whatever the dates) is linked only when its
superseder is trusted for its target:

=========================  =========================  ===============================
superseder                 target                     voids?
=========================  =========================  ===============================
tenant T                   tenant T                   yes (even one a reader cannot read)
public, from a publisher   tenant T                   yes
public, no publisher       tenant T                   only with ``public_voids_tenants = "any"``
public                     public                     yes
tenant T                   public or tenant U         never
=========================  =========================  ===============================

An untrusted edge is kept as a claim, never as an edge: it voids nothing for anyone, cannot
close a cycle, and is shown (as ``disputed_by``, with its reason) only to a reader who may
read both records. Without tenants every record is public, so nothing changes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from car_rag.records import Record

__all__ = ["TRUST_REASONS", "Trust"]

TRUST_REASONS = {
    "other_tenant": "a record of another tenant may not void this one",
    "tenant_over_public": "a tenant's record may not void a public record",
    "public_not_publisher": "a public record from no declared publisher may not void a tenant's record",
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

    def distrust(self, superseder: Record, target: Record) -> str | None:
        """The rule (a key of :data:`TRUST_REASONS`) by which ``superseder`` may not void
        ``target``; None when it may."""
        if superseder.tenant == target.tenant:
            return None
        if superseder.tenant is None:
            trusted = self.public_voids_tenants == "any" or superseder.publisher is not None
            return None if trusted else "public_not_publisher"
        return "tenant_over_public" if target.tenant is None else "other_tenant"
