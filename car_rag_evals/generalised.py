"""A seeded benchmark for generalised CAR (issue 18): noisy edges (Definition 9) and
multi-authority chains (Definition 10), with the ground truth the generator knows.

(a) **Noisy edges.** Each entity has a chain of notices, each explicitly voiding the one
before (true edges; a share of them given a low confidence, as an extractor unsure of a
real supersession would). A share of the chains (the *noise rate*) also gets a false edge:
a notice of another entity claims to void the chain's controlling notice, with a
confidence an imperfect extractor would give a wrong link (low by default; ``--overlap``
draws false and true confidences from overlapping ranges). The question names the
entity's first notice; Stage 1 is car-rag's BM25 (top 10 anchors), Stages 2-3 are
:func:`car_rag.adapters.resolve_authority` at threshold τ. The baseline treats every edge as certain
(τ = 0, which is today's behaviour). Scored: TCA@5 (the controlling notice in the top 5
and reported active; no truly superseded notice in the top 5 reported active without a
warning) and, over the chains with a false edge, how often the wrongly voided controlling
notice is hidden (reported superseded).

(b) **Multi-authority.** Legal questions under the built-in ``legal-precedent`` policy,
with court levels: a district overruling of an earlier supreme ruling (a deliberate
conflict: chronology against the hierarchy), a supreme overruling of a district ruling
and a later supreme ruling over a district one (the relations agree). Scored: the share
of generated conflicts shown as a ``<conflict-group kind="disputed-authority">`` in the
audit XML, and of records some relation keeps active that are reported superseded.

(c) **Exceptions.** Employee/ticker pairs under the built-in ``sec-204a1`` policy: a
blackout, then a trading exception granted (its rule ``blackout_exception``), and either
no revocation (the exception controls), a later revocation (the blackout controls again)
or a revocation dated before the grant (it revokes nothing: the exception controls).
Scored: the share of pairs whose controlling record is reported active and whose other
records carry the status the ground truth gives them.

Run:  python -m car_rag_evals.generalised --out evals/results/generalised
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from car_rag.channels import make_lexical_index
from car_rag.evidence import render_audit
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy, load_policy
from car_rag.records import Record
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE, Anchor, RetrievalResult, resolve_authority

__all__ = [
    "NoisyCorpus",
    "noisy_corpus",
    "score_noisy",
    "multi_authority_corpus",
    "score_multi_authority",
    "exception_corpus",
    "score_exceptions",
    "main",
]

K = 5
ANCHORS = 10
TAUS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
NOISE = (0.0, 0.1, 0.2, 0.3, 0.5)
NOTICES = Policy(name="notices", scope_keys=("entity",), rules=())
"""Supersession here is the records' own explicit edges, as an extractor would write them."""
TOPICS = ["dosage", "storage", "recall", "labeling", "shipping", "pricing", "warranty", "licensing"]
WORDS = "amended interim final revised corrected updated provisional consolidated".split()


def _day(n: int) -> datetime:
    return datetime(2020, 1, 1, tzinfo=UTC) + timedelta(days=n)


@dataclass
class NoisyCorpus:
    records: list[Record]
    queries: list[tuple[str, str, str, list[str]]] = field(default_factory=list)
    """(question, controlling id, the chain's first notice, the chain's ids)"""
    falsely_voided: set[str] = field(default_factory=set)
    """Controlling notices a false edge claims to void."""


def noisy_corpus(seed: int, noise: float, *, entities: int = 200, low_true: float = 0.2, overlap: bool = False) -> NoisyCorpus:
    """Chains of 2-4 notices per entity; ``noise`` of the chains get a false edge onto their
    controlling notice; ``low_true`` of the true edges a confidence in [0.5, 0.9]."""
    rng = random.Random(seed)
    false_range = (0.3, 0.7) if overlap else (0.05, 0.45)
    chains: list[list[dict[str, Any]]] = []
    for e in range(entities):
        topic = rng.choice(TOPICS)
        name = f"entity-{e:04d}"
        chain: list[dict[str, Any]] = []
        for v in range(rng.randint(2, 4)):
            doc: dict[str, Any] = {
                "doc_id": f"{name}-v{v}",
                "doc_type": "notice",
                "scope": {"entity": name},
                "published_at": _day(100 * v + rng.randint(0, 50)),
                # The first notice restates the question's words; later ones share few of them.
                "text": (
                    f"{name} {topic} notice: the {topic} requirements for {name} are as follows."
                    if v == 0
                    else f"{rng.choice(WORDS).capitalize()} notice {v} for {name}: replaces the previous terms."
                ),
            }
            if v:
                sure = rng.uniform(0.5, 0.9) if rng.random() < low_true else 1.0
                doc["supersedes"] = [{"id": chain[-1]["doc_id"], "confidence": round(sure, 2)}]
            chain.append(doc)
        chains.append(chain)
    corpus = NoisyCorpus([])
    noisy = set(rng.sample(range(entities), round(noise * entities)))
    for e in sorted(noisy):
        # A notice of another entity falsely claims to void this chain's controlling notice.
        source = chains[(e + rng.randint(1, entities - 1)) % entities][0]
        source.setdefault("supersedes", []).append(
            {"id": chains[e][-1]["doc_id"], "confidence": round(rng.uniform(*false_range), 2)}
        )
        corpus.falsely_voided.add(chains[e][-1]["doc_id"])
    for chain in chains:
        corpus.records += [Record.model_validate(d) for d in chain]
        first = chain[0]
        topic = first["text"].split()[1]
        corpus.queries.append(
            (
                f"What are the current {topic} requirements for {first['scope']['entity']}?",
                chain[-1]["doc_id"],
                first["doc_id"],
                [d["doc_id"] for d in chain],
            )
        )
    return corpus


def _index(records: list[Record]) -> Any:
    index = make_lexical_index("bm25-incremental")
    index.build([r.doc_id for r in records], [r.text for r in records])
    return index


def score_noisy(corpus: NoisyCorpus, taus: tuple[float, ...] = TAUS) -> dict[float, dict[str, float]]:
    """TCA@5 and the hidden rate of wrongly voided controlling notices at each τ."""
    graph = AuthorityGraph(NOTICES)
    for record in corpus.records:
        graph.add(record)
    index = _index(corpus.records)
    runs = [(q, index.search(q[0], ANCHORS)) for q in corpus.queries]
    out = {}
    for tau in taus:
        tca = hidden = 0
        for (question, controlling, _first, chain), hits in runs:
            result = resolve_authority(
                graph, NOTICES, question, [Anchor(h.doc_id, h.rank, h.score, "bm25") for h in hits], min_confidence=tau
            )
            tca += _tca(result, controlling, chain)
            item = result.get(controlling)
            hidden += controlling in corpus.falsely_voided and (item is None or item.status == "superseded")
        out[tau] = {"tca": tca / len(runs), "hidden": hidden / max(1, len(corpus.falsely_voided))}
    return out


def _tca(result: RetrievalResult, controlling: str, chain: list[str]) -> bool:
    """The controlling notice in the top k and reported active; every truly superseded notice
    of the chain in the top k reported superseded or contested (never as plainly current)."""
    top = {r.doc_id: r for r in result.top(K)}
    if controlling not in top or top[controlling].status != "active":
        return False
    return all(r.status == "superseded" or r.contested for d, r in top.items() if d in chain and d != controlling)


# --------------------------------------------------------------------------- (b)
@dataclass
class MultiCorpus:
    records: list[Record]
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """Pairs the generator made disputed: (the later lower-court overruling, the higher-court ruling)."""
    active: set[str] = field(default_factory=set)
    """Records some relation keeps active (ground truth)."""
    questions: list[tuple[str, list[str]]] = field(default_factory=list)


def multi_authority_corpus(seed: int, questions: int = 150) -> MultiCorpus:
    """Per legal question one pattern: a conflict (a district overruling of an earlier supreme
    ruling), a supreme overruling of a district ruling, or a later supreme ruling over an
    earlier district one; levels in metadata ``court_level``."""
    rng = random.Random(seed)
    corpus = MultiCorpus([])
    for q in range(questions):
        scope = {"case": f"case-{q:03d}", "question_id": f"Q-{q:03d}"}
        pattern = rng.choice(["conflict", "overruled_from_above", "bound_from_above"])
        t0 = rng.randint(0, 3000)
        first: dict[str, Any] = {
            "doc_id": f"q{q:03d}-a",
            "doc_type": "ruling",
            "scope": scope,
            "published_at": _day(t0),
            "text": f"Ruling in case {q} on question {q}: the court holds the standard applies.",
        }
        second: dict[str, Any] = {
            "doc_id": f"q{q:03d}-b",
            "scope": scope,
            "published_at": _day(t0 + rng.randint(30, 900)),
            "text": f"Later decision in case {q}: the earlier holding on question {q} is reconsidered.",
        }
        if pattern == "conflict":
            first["metadata"], second["metadata"] = {"court_level": "supreme"}, {"court_level": "district"}
            second["doc_type"] = "overruling"
            corpus.conflicts.append((second["doc_id"], first["doc_id"]))
            corpus.active |= {first["doc_id"], second["doc_id"]}
        else:
            first["metadata"], second["metadata"] = {"court_level": "district"}, {"court_level": "supreme"}
            second["doc_type"] = "overruling" if pattern == "overruled_from_above" else "ruling"
            corpus.active.add(second["doc_id"])
        corpus.records += [Record.model_validate(first), Record.model_validate(second)]
        corpus.questions.append((f"Does the standard still apply to question {q} in case {q}?", [first["doc_id"]]))
    return corpus


def score_multi_authority(corpus: MultiCorpus, policy: Policy) -> dict[str, Any]:
    graph = AuthorityGraph(policy)
    for record in corpus.records:
        graph.add(record)
    surfaced = wrongly_superseded = kept_active = 0
    conflicts = dict(corpus.conflicts)
    for _question, anchors in corpus.questions:
        result = resolve_authority(graph, policy, _question, [Anchor(d, i) for i, d in enumerate(anchors, 1)])
        xml = render_audit(result)
        for item in result:
            if item.doc_id in corpus.active:
                kept_active += 1
                wrongly_superseded += item.status == "superseded"
        lower = next((low for low, high in conflicts.items() if high in anchors or low in anchors), None)
        if lower is not None:
            group = [g for g in xml.split("<conflict-group ")[1:] if g.startswith('kind="disputed-authority"')]
            surfaced += any(f'doc-id="{lower}"' in g and f'doc-id="{conflicts[lower]}"' in g for g in group)
    return {
        "conflicts": len(corpus.conflicts),
        "conflicts_surfaced": surfaced / max(1, len(corpus.conflicts)),
        "kept_active_records": kept_active,
        "kept_active_reported_superseded": wrongly_superseded / max(1, kept_active),
    }


# --------------------------------------------------------------------------- (c)
EXCEPTION_PATTERNS = ("active", "revoked", "revocation_before_grant")


@dataclass
class ExceptionCorpus:
    records: list[Record]
    cases: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """Per employee/ticker pair: its pattern and the status each of its records must have."""


def exception_corpus(seed: int, pairs: int = 150) -> ExceptionCorpus:
    """Per employee/ticker pair a blackout, an exception granted after it and, by pattern,
    no revocation, a later one, or one dated before the grant."""
    rng = random.Random(seed)
    corpus = ExceptionCorpus([])
    for p in range(pairs):
        scope = {"employee": f"E{p:03d}", "ticker": f"T{p:03d}"}
        pattern = rng.choice(EXCEPTION_PATTERNS)
        t0 = rng.randint(0, 3000)
        grant_at = t0 + rng.randint(1, 60)
        revoked_at = grant_at + rng.randint(1, 60) if pattern == "revoked" else t0 + rng.randint(-30, 0)
        made = [("blackout", "blackout_announced", t0), ("grant", "trading_exception_granted", grant_at)]
        if pattern != "active":
            made.append(("revocation", "trading_exception_revoked", revoked_at))
        for role, doc_type, at in made:
            corpus.records.append(
                Record(
                    doc_id=f"p{p:03d}-{role}",
                    doc_type=doc_type,
                    scope=scope,
                    published_at=_day(at),
                    text=f"{doc_type.replace('_', ' ')} for {scope['employee']} in {scope['ticker']}",
                )
            )
        revoked = pattern == "revoked"
        truth = {
            f"p{p:03d}-blackout": "active" if revoked else "superseded",
            f"p{p:03d}-grant": "superseded" if revoked else "active",
        }
        if revoked:  # one dated before the grant revokes nothing, so nothing relates it to the pair
            truth[f"p{p:03d}-revocation"] = "active"
        corpus.cases.append((pattern, truth))
    return corpus


def score_exceptions(corpus: ExceptionCorpus, policy: Policy) -> dict[str, Any]:
    """Stages 2-3 from the pair's blackout as the only anchor (a question about trading in
    the blackout): the pair is right when every record of it has its ground-truth status."""
    graph = AuthorityGraph(policy)
    for record in corpus.records:
        graph.add(record)
    right = {pattern: [0, 0] for pattern in EXCEPTION_PATTERNS}
    for pattern, truth in corpus.cases:
        blackout = next(d for d in truth if d.endswith("-blackout"))
        result = resolve_authority(graph, policy, "May I trade?", [Anchor(blackout, 1)])
        got = {d: (item.status if (item := result.get(d)) is not None else "missing") for d in truth}
        right[pattern][0] += got == truth
        right[pattern][1] += 1
    return {
        "pairs": len(corpus.cases),
        "resolved_correctly": sum(r for r, _ in right.values()) / max(1, len(corpus.cases)),
        "by_pattern": {p: {"pairs": n, "resolved_correctly": r / max(1, n)} for p, (r, n) in right.items()},
    }


# --------------------------------------------------------------------------- report
def _plot(curves: dict[str, dict[float, dict[float, dict[str, float]]]], out: Path) -> list[Path]:
    from car_rag_evals.plots import _pyplot

    plt = _pyplot()
    written = []
    for name, by_noise in curves.items():
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        for noise, by_tau in by_noise.items():
            taus = sorted(by_tau)
            left.plot(taus, [by_tau[t]["tca"] for t in taus], marker="o", label=f"{noise:.0%} false edges")
            if noise:
                right.plot(taus, [by_tau[t]["hidden"] for t in taus], marker="o", label=f"{noise:.0%} false edges")
        for ax, what in ((left, "TCA@5"), (right, "wrongly voided controlling record hidden")):
            ax.axvline(DEFAULT_MIN_CONFIDENCE, color="grey", linestyle="--", linewidth=1)
            ax.set_xlabel("min_confidence τ (0 = every edge certain, the baseline)")
            ax.set_ylabel(what)
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=8)
        fig.suptitle(f"Noisy edges ({name}): BM25 anchors, Stages 2-3 at τ")
        fig.tight_layout()
        path = out / f"noisy-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _table(by_noise: dict[float, dict[float, dict[str, float]]], what: str) -> list[str]:
    taus = sorted(next(iter(by_noise.values())))
    lines = ["| false edges | " + " | ".join(f"τ={t:g}" for t in taus) + " |", "|---" * (len(taus) + 1) + "|"]
    for noise, by_tau in by_noise.items():
        if what == "hidden" and not noise:
            continue
        lines.append(f"| {noise:.0%} | " + " | ".join(f"{by_tau[t][what]:.3f}" for t in taus) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("evals/results/generalised"))
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--entities", type=int, default=200)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    curves = {
        setting: {
            noise: score_noisy(noisy_corpus(args.seed, noise, entities=args.entities, overlap=setting == "overlapping"))
            for noise in NOISE
        }
        for setting in ("separated", "overlapping")
    }
    multi = score_multi_authority(multi_authority_corpus(args.seed), load_policy("legal-precedent"))
    exceptions = score_exceptions(exception_corpus(args.seed), load_policy("sec-204a1"))
    results = {
        "seed": args.seed,
        "entities": args.entities,
        "k": K,
        "anchors": ANCHORS,
        "noisy": {s: {str(n): {str(t): v for t, v in c.items()} for n, c in by.items()} for s, by in curves.items()},
        "multi_authority": multi,
        "exceptions": exceptions,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Generalised CAR benchmark (seed {args.seed}, {args.entities} entities per corpus)",
        "",
        f"Reproduce: `python -m car_rag_evals.generalised --out {args.out}`.",
        "",
    ]
    for setting, by_noise in curves.items():
        lines += [
            f"## Noisy edges, {setting} confidences",
            "",
            "TCA@5:",
            "",
            *_table(by_noise, "tca"),
            "",
            "Wrongly voided controlling record hidden (reported superseded):",
            "",
            *_table(by_noise, "hidden"),
            "",
        ]
    lines += [
        "## Multi-authority (legal-precedent, court hierarchy × chronology)",
        "",
        f"- generated conflicts: {multi['conflicts']}; surfaced as disputed-authority conflict groups: "
        f"{multi['conflicts_surfaced']:.1%}",
        f"- records some relation keeps active, reported superseded: {multi['kept_active_reported_superseded']:.1%} "
        f"of {multi['kept_active_records']}",
        "",
        "## Exceptions (sec-204a1, blackout_exception granted and revoked)",
        "",
        f"- employee/ticker pairs resolved correctly: {exceptions['resolved_correctly']:.1%} of {exceptions['pairs']}",
        *(
            f"  - {pattern.replace('_', ' ')}: {v['resolved_correctly']:.1%} of {v['pairs']}"
            for pattern, v in exceptions["by_pattern"].items()
        ),
        "",
    ]
    (args.out / "README.md").write_text("\n".join(lines))
    _plot(curves, args.out)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
