"""Latent-scope CAR (the CAR paper, Definition 8): when a question does not name its
scope, which entity it is about is a latent variable, estimated from the anchors.

Each Stage-1 candidate votes for its scope with its fused score (a probability under
:func:`~car_rag.channels.fusion.calibrated_fusion`), so ``P(scope | question)`` is the
mass of the candidates in that scope. What the question names is observed: the policy's
``scope_patterns`` and the scope values its words name (:mod:`car_rag.scope_linking`).
Then only scopes consistent with what it names keep probability: one scope named alone
has 1.0, several share it by Stage 1's evidence. The anchors handed to Stage 2 cover the
probable scopes rather than five records of one: a scope's second anchor counts for
``decay`` of its first, and scopes the question cannot tell apart (posterior within
``ties`` of each other) each get their first anchor before any gets a second, in an order
that carries no information about which one is meant (Stage-1 score, then newest, then a
hash of the id). When the question plausibly names several such scopes, the result says
so (:mod:`car_rag.ambiguity`) instead of the order pretending to know.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from car_rag.ambiguity import Ambiguity, AmbiguousScope
from car_rag.channels.fusion import FusedHit
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.records import Record
from car_rag.scope_linking import Link, accepted_links, candidate_links, merge, values_by_key

__all__ = [
    "AMBIGUITY_MARGIN",
    "ScopeKey",
    "ScopePosterior",
    "QuestionScope",
    "TieOrder",
    "read_question_scope",
    "estimate_scope_posterior",
    "select_anchors",
    "detect_ambiguity",
]

ScopeKey = tuple[str | None, ...]
"""A record's values for the policy's scope keys, in order (None where it has none)."""

AMBIGUITY_MARGIN = 0.5
"""Scopes within this fraction of the most probable one are ones the question does not tell
apart: with two or more, the result carries its ``ambiguity`` (chosen on the dev suites,
``evals/do_no_harm.py``)."""

TieOrder = Literal["score", "state"]
"""How scopes the question cannot tell apart are ordered: ``"score"`` (Stage-1 score, then
newest, then a hash of the id: nothing about which one is meant) or ``"state"`` (a different
current state first: the order of issue 22, kept only to be measured; it wins exactly where
a benchmark asks about the one changed scope among identical ones, and loses where most changed)."""


def scope_of(record: Record, keys: Sequence[str]) -> ScopeKey:
    return tuple(record.scope.get(k) for k in keys)


def _consistent(scope: ScopeKey, keys: Sequence[str], named: Mapping[str, Sequence[str]]) -> bool:
    """Whether ``scope`` has one of the named values for every named key."""
    return all(scope[i] in named[k] for i, k in enumerate(keys) if k in named)


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

    def support(self, key: str, value: str) -> float:
        """The probability mass on scopes with ``key`` = ``value``."""
        i = self.keys.index(key)
        return sum(p for scope, p in self.probabilities.items() if scope[i] == value)

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
    *,
    constraint: Mapping[str, Sequence[str]] | None = None,
) -> ScopePosterior:
    """Sum each candidate's fused score into its scope and normalise.

    Scopes holding the ``observed`` values (the Stage-2 lookups: policy patterns, or linked
    values that name whole scopes) are named: each gets as much mass again as all candidates
    together, so one Stage 1 missed is not left at 0. ``constraint`` (default ``observed``)
    is everything the question names, linked words included: only scopes consistent with it
    keep probability, so a scope named alone has 1.0. Where no candidate or named scope is
    consistent with it, the question's words named nothing Stage 1 or the store agrees with,
    and the candidates alone decide."""
    keys = policy.scope_keys
    mass: dict[ScopeKey, float] = {}
    for hit in candidates:
        record = graph.records.get(hit.doc_id)
        if record is not None:
            scope = scope_of(record, keys)
            mass[scope] = mass.get(scope, 0.0) + max(hit.score, 0.0)
    constraint = observed if constraint is None else constraint
    if observed:
        named_keys = [k for k in keys if k in observed]
        named: set[ScopeKey] = set()
        for values in itertools.product(*(observed[k] for k in named_keys)):
            named |= {scope_of(r, keys) for r in graph.lookup(dict(zip(named_keys, values))) if readable(r)}
        named = {s for s in named if _consistent(s, keys, constraint)}
        share = (sum(mass.values()) or 1.0) / max(len(named), 1)
        for scope in named:
            mass[scope] = mass.get(scope, 0.0) + share
    if constraint:
        kept = {s: m for s, m in mass.items() if _consistent(s, keys, constraint)}
        if sum(kept.values()) > 0:
            mass = {s: kept.get(s, 0.0) for s in mass}
    total = sum(mass.values())
    if total <= 0:
        probabilities = {s: 1.0 / len(mass) for s in mass} if mass else {}
    else:
        probabilities = {s: m / total for s, m in mass.items()}
    return ScopePosterior(keys, probabilities)


@dataclass(frozen=True)
class QuestionScope:
    """What the question says about its scope: the values Stage 2 looks up (``named``), the
    scope values its words name (``links``), and the posterior they and Stage 1 give."""

    named: dict[str, list[str]]
    posterior: ScopePosterior
    links: tuple[Link, ...] = field(default=())


def read_question_scope(
    query: str,
    candidates: Sequence[FusedHit],
    graph: AuthorityGraph,
    policy: Policy,
    *,
    readable: Callable[[Record], bool] | None = None,
    document_frequency: Callable[[str], int] | None = None,
    lookup_limit: int = 20,
) -> QuestionScope:
    """The scope ids the question names and the posterior over scopes.

    Values of several keys that together name a stored scope are linked as they are
    ("Is postfix still affected by CVE-2024-00001?", "Does EMP030-Harris's C transaction
    pass?"); every other candidate must convince on its own
    (:func:`~car_rag.scope_linking.accepted_links`, against the posterior before linking).
    Named for Stage 2: the policy's ``scope_patterns``; where they name nothing, linked values
    that name whole scopes of at most ``lookup_limit`` records (the lookup then brings the scope in whole);
    any other linked value only narrows the posterior: a lone ticker of a two-key scope, or
    "Ethereum" where every record is about Ethereum, would pull in an arbitrary slice of
    records ahead of the anchors. With ``readable``, only records the caller may
    read count, so nothing tells a caller that a value exists in records it may not see."""
    can_read = readable or (lambda _r: True)
    patterns = policy.scope_ids_in(query)
    found = candidate_links(query, graph, readable)
    # Values of two or more keys that name one stored scope together corroborate each other.
    together = _whole_scope_links(found, patterns, graph, policy, can_read) if len(policy.scope_keys) > 1 else []
    prior = estimate_scope_posterior(candidates, graph, policy, patterns, can_read)
    links = together + accepted_links([f for f in found if f not in together], graph, prior.support, document_frequency, readable)
    # Stage 2 looks up what the policy's patterns name (every record of a named CVE id, in any
    # package); only where they name nothing, the linked values that name whole scopes.
    looked_up = [] if patterns else _whole_scope_links(links, patterns, graph, policy, can_read, at_most=lookup_limit)
    named = {k: list(v) for k, v in patterns.items()} or values_by_key(looked_up)
    constraint = merge(named, values_by_key(links))
    posterior = estimate_scope_posterior(candidates, graph, policy, named, can_read, constraint=constraint)
    return QuestionScope(named, posterior, tuple(links))


def _whole_scope_links(
    found: Sequence[Link],
    patterns: Mapping[str, Sequence[str]],
    graph: AuthorityGraph,
    policy: Policy,
    readable: Callable[[Record], bool],
    at_most: int | None = None,
) -> list[Link]:
    """The linked values that, with the pattern-named ones, name every scope key of some
    record the caller may read (of a scope of at most ``at_most`` such records, if given):
    together they are one entity, not a stray word."""
    keys = policy.scope_keys
    pool = merge(patterns, values_by_key(found))
    if not found or not all(pool.get(k) for k in keys):
        return []
    used: set[tuple[str, str]] = set()
    for values in itertools.product(*(pool[k] for k in keys)):
        scope = dict(zip(keys, values))
        held = sum(1 for r in graph.lookup(scope) if readable(r))
        if held and (at_most is None or held <= at_most):
            used |= set(scope.items())
    return [f for f in found if (f.key, f.value) in used]


def _neutral(doc_id: str) -> str:
    """A tie-break from the id that says nothing about how ids were given (a benchmark's
    gold ids may sort before its distractors')."""
    return hashlib.blake2b(doc_id.encode(), digest_size=8).hexdigest()


def _frontier(
    graph: AuthorityGraph, policy: Policy, doc_id: str, readable: Callable[[Record], bool]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The records controlling ``doc_id``'s chain that the caller may read, and the states
    they assert in the policy's words (their doc types where the policy names no state)."""
    chain = {doc_id} | {d for d in graph.ancestors(doc_id) if readable(graph.records[d])}
    front = tuple(sorted(graph.frontier(chain)))
    states = set()
    for d in front:
        state = policy.state_of(graph.records[d].doc_type)
        states.add(policy.state_label(state) if state is not None else graph.records[d].doc_type)
    return front, tuple(sorted(states))


def _candidates_by_scope(
    candidates: Sequence[FusedHit], graph: AuthorityGraph, keys: Sequence[str]
) -> dict[ScopeKey, list[FusedHit]]:
    by_scope: dict[ScopeKey, list[FusedHit]] = {}
    for hit in candidates:
        record = graph.records.get(hit.doc_id)
        if record is not None:
            by_scope.setdefault(scope_of(record, keys), []).append(hit)
    return by_scope


def _tied_runs(order: Sequence[ScopeKey], posterior: ScopePosterior, ties: float) -> list[list[ScopeKey]]:
    """``order`` (most probable first) cut into runs of scopes within ``ties`` of their run's lead."""
    runs: list[list[ScopeKey]] = []
    for scope in order:
        p = posterior.probabilities.get(scope, 0.0)
        if runs and p >= posterior.probabilities.get(runs[-1][0], 0.0) * (1.0 - ties):
            runs[-1].append(scope)
        else:
            runs.append([scope])
    return runs


def select_anchors(
    candidates: Sequence[FusedHit],
    posterior: ScopePosterior,
    graph: AuthorityGraph,
    policy: Policy,
    k1: int,
    *,
    ties: float = 0.5,
    decay: float = 0.5,
    tie_order: TieOrder = "score",
    readable: Callable[[Record], bool] = lambda _r: True,
) -> list[FusedHit]:
    """The ``k1`` anchors for Stage 2, renumbered: scopes in posterior order, a scope's
    j-th candidate worth ``decay ** j`` of its scope's probability. A run of scopes within
    ``ties`` of the run's most probable one counts as one probability, so each gets its
    first anchor before any gets a second, ordered by ``tie_order``."""
    keys = policy.scope_keys
    by_scope = _candidates_by_scope(candidates, graph, keys)
    order = sorted(by_scope, key=lambda s: -posterior.probabilities.get(s, 0.0))  # stable: Stage-1 order on ties
    worth: dict[ScopeKey, float] = {}
    arranged: list[ScopeKey] = []
    for run in _tied_runs(order, posterior, ties):
        lead = posterior.probabilities.get(run[0], 0.0)
        if len(run) > 1:
            run = _arrange(run, by_scope, graph, policy, tie_order, readable)
        for scope in run:
            worth[scope] = lead
        arranged += run
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


def _arrange(
    run: list[ScopeKey],
    by_scope: Mapping[ScopeKey, list[FusedHit]],
    graph: AuthorityGraph,
    policy: Policy,
    tie_order: TieOrder,
    readable: Callable[[Record], bool],
) -> list[ScopeKey]:
    """Scopes the question cannot tell apart, in ``tie_order``."""

    def neutral(scope: ScopeKey) -> tuple[float, float, str]:
        best = by_scope[scope][0]
        when = graph.records[best.doc_id].sort_time.timestamp()
        return (-best.score, -when, _neutral(best.doc_id))

    if tie_order == "score":
        return sorted(run, key=neutral)
    states: dict[tuple[str, ...], list[ScopeKey]] = {}
    for scope in run:
        states.setdefault(_frontier(graph, policy, by_scope[scope][0].doc_id, readable)[1], []).append(scope)
    return [s for layer in itertools.zip_longest(*states.values()) for s in layer if s is not None]


def detect_ambiguity(
    candidates: Sequence[FusedHit],
    posterior: ScopePosterior,
    graph: AuthorityGraph,
    policy: Policy,
    *,
    margin: float = AMBIGUITY_MARGIN,
    readable: Callable[[Record], bool] = lambda _r: True,
) -> Ambiguity | None:
    """The scopes the question plausibly names, when it does not tell them apart: every scope
    of the candidates within ``margin`` of the most probable one (``p >= p1 * (1 - margin)``).
    None when the most probable scope stands alone, and when the policy has no scope keys."""
    if not policy.scope_keys:
        return None
    by_scope = _candidates_by_scope(candidates, graph, policy.scope_keys)
    order = sorted(by_scope, key=lambda s: -posterior.probabilities.get(s, 0.0))
    runs = _tied_runs(order, posterior, margin)
    if not runs or len(runs[0]) < 2 or posterior.probabilities.get(runs[0][0], 0.0) <= 0.0:
        return None
    members = []
    for scope in runs[0]:
        controlling, states = _frontier(graph, policy, by_scope[scope][0].doc_id, readable)
        members.append(
            AmbiguousScope(
                {k: v for k, v in zip(policy.scope_keys, scope) if v is not None},
                posterior.probabilities.get(scope, 0.0),
                " and ".join(states),
                controlling,
            )
        )
    counts: dict[str, int] = {}
    for member in members:
        counts[member.state] = counts.get(member.state, 0) + 1
    return Ambiguity(len(members), dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))), tuple(members))
