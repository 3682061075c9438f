"""Scoring one ranked list against one labelled query, and aggregating over a suite.

TCA@k follows the CAR paper's Definition 7 / Theorem 4: the top k must include the
controlling record (frontier inclusion) AND no record in the top k may be superseded,
within the example's authority chain, without something that supersedes it also in the
top k (no ignored superseder; supersession is transitive). Where a suite defines a
deterministic answer, ``tca_answer`` is the paper's table metric instead: the answer a
rule-following reader derives from the top k must be right AND no superseder ignored.

The answer reader sees only the top k: it keeps the records in the query's scope (the
anchor's scope), decides which are active by applying the suite policy's rules among them,
and applies the suite's answer priority. Retrieval-set metrics from the legal-RAG ablation
(LVR, ORR, CRR, CD) are computed against the corpus-wide authority graph.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from car_rag.eval.stats import Rate
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy
from car_rag.queries import Query
from car_rag.records import Record

__all__ = ["AnswerRule", "QueryScore", "score_query", "summarise"]


@dataclass(frozen=True)
class AnswerRule:
    """Derives a benchmark's deterministic answer from the active records a reader sees.

    ``priority`` lists (doc types, answer) pairs: the first pair any active record's type
    matches gives the answer; ``fallback`` when none does (never a gold label).
    """

    priority: tuple[tuple[frozenset[str], str], ...]
    fallback: str = "requires_review"

    def answer(self, active: Iterable[Record]) -> str:
        types = {r.doc_type for r in active}
        return next((answer for wanted, answer in self.priority if types & wanted), self.fallback)


@dataclass
class QueryScore:
    query_id: str
    hop_type: str | None
    tca: bool
    tca_answer: bool | None
    frontier_included: bool
    no_ignored_superseder: bool
    answer: str | None
    answer_correct: bool | None
    recall: float
    provenance_recall: float
    reciprocal_rank: float
    gold_rank: int | None
    anchor_hit: bool
    lvr: float
    orr: float
    crr: float
    cd: float
    ignored: list[str] = field(default_factory=list)
    """Top-k records superseded within the chain whose superseders are all missing."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reader_answer(top: Sequence[str], query: Query, records: dict[str, Record], policy: Policy, rule: AnswerRule) -> str:
    anchor = records.get(query.anchor_doc_ids[0]) if query.anchor_doc_ids else None
    scope = anchor.scope if anchor else {}
    seen = [records[d] for d in top if d in records and all(records[d].scope.get(k) == v for k, v in scope.items())]
    voided = {t.doc_id for t in seen for s in seen if s is not t and policy.edges_between(s, t)}
    return rule.answer(r for r in seen if r.doc_id not in voided)


def _set_metrics(top: Sequence[str], kb: AuthorityGraph) -> tuple[float, float, float, float]:
    """LVR (latest version recall, unknown-target form), ORR, CRR and CD of one retrieved set."""
    members = [d for d in top if d in kb]
    if not members:
        return 0.0, 0.0, 0.0, 0.0
    shown = set(members)
    above = {d: kb.ancestors(d) for d in members}
    latest_shown = sum(1 for d in members if not above[d] or (kb.frontier(above[d]) & shown))
    outdated = sum(1 for d in members if above[d])
    linked_pairs = {frozenset((d, e)) for d in members for e in above[d] & shown}
    in_pair = {d for pair in linked_pairs for d in pair}
    n = len(members)
    return latest_shown / n, outdated / n, len(in_pair) / n, len(linked_pairs) / n


def score_query(
    query: Query,
    ranked: Sequence[str],
    *,
    k: int,
    records: dict[str, Record],
    kb: AuthorityGraph,
    policy: Policy,
    answer_rule: AnswerRule | None,
    anchors: Sequence[str] | None = None,
) -> QueryScore:
    """Score one system's ranking (best first) for one query at cutoff ``k``."""
    top = list(ranked[:k])
    shown = set(top)
    gold = set(query.gold_doc_ids)
    chain = list(query.chain_doc_ids)
    ignored = [d for i, d in enumerate(chain[:-1]) if d in shown and not (set(chain[i + 1 :]) & shown)]
    frontier = bool(gold & shown)
    answer = _reader_answer(top, query, records, policy, answer_rule) if answer_rule else None
    correct = None if answer_rule is None else answer == (query.answer or "")
    gold_rank = next((i for i, d in enumerate(ranked, 1) if d in gold), None)
    stage1 = list(anchors[:k]) if anchors is not None else top
    lvr, orr, crr, cd = _set_metrics(top, kb)
    return QueryScore(
        query_id=query.query_id,
        hop_type=query.hop_type,
        tca=frontier and not ignored,
        tca_answer=None if correct is None else correct and not ignored,
        frontier_included=frontier,
        no_ignored_superseder=not ignored,
        answer=answer,
        answer_correct=correct,
        recall=len(gold & shown) / len(gold) if gold else 0.0,
        provenance_recall=len(set(chain) & shown) / len(chain) if chain else 0.0,
        reciprocal_rank=1.0 / gold_rank if gold_rank else 0.0,
        gold_rank=gold_rank,
        anchor_hit=bool(set(query.anchor_doc_ids) & set(stage1)),
        lvr=lvr,
        orr=orr,
        crr=crr,
        cd=cd,
        ignored=ignored,
    )


def _rates(scores: Sequence[QueryScore]) -> dict[str, Any]:
    n = len(scores)
    out: dict[str, Any] = {
        "n": n,
        "tca": Rate(sum(s.tca for s in scores), n).to_dict(),
        "hit": Rate(sum(s.frontier_included for s in scores), n).to_dict(),
        "no_ignored_superseder": Rate(sum(s.no_ignored_superseder for s in scores), n).to_dict(),
        "anchor_recall": Rate(sum(s.anchor_hit for s in scores), n).to_dict(),
    }
    judged = [s for s in scores if s.answer_correct is not None]
    if judged:
        out["answer_accuracy"] = Rate(sum(bool(s.answer_correct) for s in judged), len(judged)).to_dict()
        out["tca_answer"] = Rate(sum(bool(s.tca_answer) for s in judged), len(judged)).to_dict()
    for name in ("recall", "provenance_recall", "reciprocal_rank", "lvr", "orr", "crr", "cd"):
        mean = round(statistics.fmean(getattr(s, name) for s in scores), 4) if n else 0.0
        out["mrr" if name == "reciprocal_rank" else name] = mean
    ranks = [s.gold_rank for s in scores if s.gold_rank is not None]
    out["gold_rank"] = {
        "found": len(ranks),
        "mean": round(statistics.fmean(ranks), 2) if ranks else None,
        "median": statistics.median(ranks) if ranks else None,
    }
    return out


def summarise(scores: Sequence[QueryScore]) -> dict[str, Any]:
    """Overall rates (Wilson 95% intervals) and means, and the same per hop type."""
    by_hop: dict[str, list[QueryScore]] = defaultdict(list)
    for score in scores:
        by_hop[score.hop_type or "all"].append(score)
    summary = _rates(scores)
    if len(by_hop) > 1:
        summary["by_hop"] = {hop: _rates(group) for hop, group in sorted(by_hop.items())}
    return summary
