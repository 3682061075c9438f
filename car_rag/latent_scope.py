"""Latent-scope CAR (the CAR paper, Definition 8): when a question does not name its
scope, which entity it is about is a latent variable, estimated from the anchors.

Each Stage-1 candidate votes for its scope with its fused score (a probability under
:func:`~car_rag.channels.fusion.calibrated_fusion`), so ``P(scope | question)`` is the
mass of the candidates in that scope. Scope values the question names are observed, and
their scopes lead: the policy's ``scope_patterns`` or, where those find none and together
they name every scope key, identifier-like values the store holds (``EMP030-Harris`` and
``C`` in "Does EMP030-Harris's C transaction pass review?"). The anchors handed to
Stage 2 then cover the probable scopes rather than five records of one: a scope's second
anchor counts for ``decay`` of its first. Scopes the
question cannot tell apart (posterior within ``ties`` of each other) are ordered so that
different current states come first: five disclosures that all say "no patch" tell a
reader less than four of them and the one scope a patch has changed. Every returned record
carries its scope's probability, so a reader sees how sure the retriever is.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from car_rag.channels.fusion import FusedHit
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.records import Record

__all__ = ["ScopeKey", "ScopePosterior", "named_scope_ids", "estimate_scope_posterior", "select_anchors", "is_identifier"]

ScopeKey = tuple[str | None, ...]
"""A record's values for the policy's scope keys, in order (None where it has none)."""

_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9])?")


def is_identifier(token: str) -> bool:
    """Whether a question's token reads as an identifier it names verbatim: it has a digit
    (``CVE-2024-1234``, ``EMP030-Harris``, an NDC code) or is a short upper-case word (a
    ticker, ``C``, ``GOOGL``). Plain words (a package called ``express``) are left to BM25,
    which already weighs them: as scope evidence they would fire on ordinary prose."""
    return any(ch.isdigit() for ch in token) or (token.isalpha() and token.isupper() and len(token) <= 5)


def named_scope_ids(
    query: str, policy: Policy, graph: AuthorityGraph, readable: Callable[[Record], bool] | None = None
) -> dict[str, list[str]]:
    """Scope values the question names: the policy's ``scope_patterns``; where they find none,
    identifier-like tokens the store holds as scope values, when together they name every
    scope key of some stored record (a lone ticker is not a scope: it would pull in every
    record of the ticker). With ``readable``, only records the caller may read count, so the
    result never tells a caller that a value exists in records it may not see."""
    named = policy.scope_ids_in(query)
    if named:
        return named

    def held(scope: dict[str, str]) -> bool:
        if readable is None:
            return bool(graph.lookup(scope))
        return any(readable(r) for r in graph.lookup(scope))

    linked: dict[str, list[str]] = {}
    for match in _TOKEN.finditer(query):
        token = match.group(0)
        if not is_identifier(token):
            continue
        for key in policy.scope_keys:
            known = graph.holds(key, token) and (readable is None or held({key: token}))  # one probe, else a lookup
            if known and token not in linked.setdefault(key, []):
                linked[key].append(token)
    keys = policy.scope_keys
    if all(linked.get(key) for key in keys) and any(
        held(dict(zip(keys, values))) for values in itertools.product(*(linked[k] for k in keys))
    ):
        return linked
    return {}


def scope_of(record: Record, keys: Sequence[str]) -> ScopeKey:
    return tuple(record.scope.get(k) for k in keys)


@dataclass(frozen=True)
class ScopePosterior:
    """``P(scope | question)`` over the scopes of the Stage-1 candidates and of the scopes
    the question names."""

    keys: tuple[str, ...]
    probabilities: Mapping[ScopeKey, float]

    def probability(self, record: Record) -> float | None:
        """The probability of ``record``'s scope; None for a scope the posterior never saw."""
        return self.probabilities.get(scope_of(record, self.keys))

    def ranked(self) -> list[tuple[ScopeKey, float]]:
        return sorted(self.probabilities.items(), key=lambda item: -item[1])

    def to_dict(self, limit: int = 10) -> list[dict[str, object]]:
        """The most probable scopes, as JSON: ``[{"scope": {...}, "probability": p}, ...]``."""
        return [
            {"scope": {k: v for k, v in zip(self.keys, scope) if v is not None}, "probability": round(p, 4)}
            for scope, p in self.ranked()[:limit]
        ]


def estimate_scope_posterior(
    candidates: Sequence[FusedHit],
    graph: AuthorityGraph,
    policy: Policy,
    observed: Mapping[str, Sequence[str]],
    readable: Callable[[Record], bool] = lambda _r: True,
) -> ScopePosterior:
    """Sum each candidate's fused score into its scope and normalise. Scopes the question
    names (``observed``) share as much mass again as all candidates together: a named scope
    leads, and one Stage 1 missed is not left at 0, while a scope the question describes
    without naming it keeps its place after them ("is the jsonwebtoken bypass fixed, and
    what about CVE-2099-10005?" asks about both)."""
    keys = policy.scope_keys
    mass: dict[ScopeKey, float] = {}
    for hit in candidates:
        record = graph.records.get(hit.doc_id)
        if record is not None:
            scope = scope_of(record, keys)
            mass[scope] = mass.get(scope, 0.0) + max(hit.score, 0.0)
    if observed:
        named_keys = [k for k in keys if k in observed]
        named: set[ScopeKey] = set()
        for values in itertools.product(*(observed[k] for k in named_keys)):
            named |= {scope_of(r, keys) for r in graph.lookup(dict(zip(named_keys, values))) if readable(r)}
        share = (sum(mass.values()) or 1.0) / max(len(named), 1)
        for scope in named:
            mass[scope] = mass.get(scope, 0.0) + share
    total = sum(mass.values())
    if total <= 0:
        probabilities = {s: 1.0 / len(mass) for s in mass} if mass else {}
    else:
        probabilities = {s: m / total for s, m in mass.items()}
    return ScopePosterior(keys, probabilities)


def _frontier_state(graph: AuthorityGraph, policy: Policy, doc_id: str, readable: Callable[[Record], bool]) -> tuple[str, ...]:
    """What the controlling records above ``doc_id`` assert: their states (else types)."""
    chain = {doc_id} | {d for d in graph.ancestors(doc_id) if readable(graph.records[d])}
    front = graph.frontier(chain)
    return tuple(sorted({policy.state_of(graph.records[d].doc_type) or graph.records[d].doc_type for d in front}))


def select_anchors(
    candidates: Sequence[FusedHit],
    posterior: ScopePosterior,
    graph: AuthorityGraph,
    policy: Policy,
    k1: int,
    *,
    ties: float = 0.5,
    decay: float = 0.5,
    readable: Callable[[Record], bool] = lambda _r: True,
) -> list[FusedHit]:
    """The ``k1`` anchors for Stage 2, renumbered: scopes in posterior order, a scope's
    j-th candidate worth ``decay ** j`` of its scope's probability. A run of scopes within
    ``ties`` of the run's most probable one counts as one probability, ordered so each
    distinct current state appears once before any repeats (first appearance first)."""
    keys = policy.scope_keys
    by_scope: dict[ScopeKey, list[FusedHit]] = {}
    for hit in candidates:
        record = graph.records.get(hit.doc_id)
        if record is not None:
            by_scope.setdefault(scope_of(record, keys), []).append(hit)
    order = sorted(by_scope, key=lambda s: -posterior.probabilities.get(s, 0.0))  # stable: Stage-1 order on ties
    worth: dict[ScopeKey, float] = {}
    arranged: list[ScopeKey] = []
    start = 0
    while start < len(order):
        lead = posterior.probabilities.get(order[start], 0.0)
        end = start + 1
        while end < len(order) and posterior.probabilities.get(order[end], 0.0) >= lead * (1.0 - ties):
            end += 1
        run = order[start:end]
        if len(run) > 1:
            states: dict[tuple[str, ...], list[ScopeKey]] = {}
            for scope in run:
                states.setdefault(_frontier_state(graph, policy, by_scope[scope][0].doc_id, readable), []).append(scope)
            run = [s for layer in itertools.zip_longest(*states.values()) for s in layer if s is not None]
        for scope in run:
            worth[scope] = lead
        arranged += run
        start = end
    position = {scope: i for i, scope in enumerate(arranged)}
    slots = sorted(
        ((scope, j) for scope in arranged for j in range(len(by_scope[scope]))),
        key=lambda slot: (-worth[slot[0]] * decay ** slot[1], position[slot[0]], slot[1]),
    )
    chosen = [by_scope[scope][j] for scope, j in slots[:k1]]
    return [
        FusedHit(h.doc_id, h.score, rank, h.channel_scores, h.channel_ranks, h.channel_contributions)
        for rank, h in enumerate(chosen, 1)
    ]
