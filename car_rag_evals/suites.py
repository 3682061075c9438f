"""Benchmark suites: a corpus, its queries, the policy that governs it, and how to score it.

The built-in suites are the CAR paper's released benchmarks in the neutral record format
(``../shared/data/car-benchmarks/corpora/`` beside a checkout, or ``--corpora DIR``): the
paper's eight (:data:`SUITES`, what ``make bench`` runs). :data:`DEV_SUITES` are the other
suites defaults are chosen on: the free-form CVE and legal suites mirrored (written by
``evals/mirror_suites.py`` into ``evals/mirrors/``; their stores start as copies of the base
suite's) and the real design proposals of ``../shared/data/real-supersession/``, scored by
gold inclusion. A user corpus in the same format is a suite too (:func:`custom_suite`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from car_rag.eval.metrics import AnswerRule
from car_rag.policy import Policy, load_policy
from car_rag.store import CONFIG_FILE, CARStore

__all__ = [
    "Suite",
    "SUITES",
    "DEV_SUITES",
    "MIRRORS",
    "MirrorSpec",
    "load_suite",
    "custom_suite",
    "default_corpora_dir",
    "default_mirrors_dir",
    "default_real_dir",
    "open_suite_store",
    "store_path",
]


def _rule(*pairs: tuple[Sequence[str], str], fallback: str = "requires_review") -> AnswerRule:
    return AnswerRule(tuple((frozenset(types), answer) for types, answer in pairs), fallback)


# Paper, Appendix C "answer derivation priority"; CVEPatchQA and LegalPrecedentQA as in its scorer.
FINSUPERQA_ANSWER = _rule(
    (["emergency_exception"], "compliant"),
    (["blackout_announced", "watchlist_added"], "non_compliant"),
    (["pre_clearance_approved"], "active"),
    (["blackout_lifted"], "non_compliant"),
)
CVE_ANSWER = _rule(
    (["patch_released", "patch_release"], "patched"),
    (["cve_disclosed", "vulnerability_disclosure"], "vulnerable"),
    fallback="no_active_record",
)
LEGAL_ANSWER = _rule(
    (["ruling_overruled", "overruling"], "overruled"),
    (["ruling_issued", "ruling"], "good_law"),
    fallback="no_active_record",
)


@dataclass(frozen=True)
class Suite:
    """One benchmark: files, policy, and the answer rule when answers are deterministic."""

    name: str
    corpus: Path
    queries: Path
    policy_ref: str
    answer_rule: AnswerRule | None = None
    description: str = ""
    reference: dict[str, float] = field(default_factory=dict)
    """The paper's published figures for this suite (TCA@5 unless the key says otherwise)."""
    extends: str | None = None
    """A mirror's base corpus stem: its store starts as a copy of that corpus's store (see
    :func:`open_suite_store`)."""

    @property
    def policy(self) -> Policy:
        return load_policy(_policy_path(self.policy_ref))


def _policy_path(ref: str) -> str:
    if ref.startswith("eval:"):
        return str(resources.files("car_rag_evals") / "policies" / f"{ref[5:]}.toml")
    if ref.startswith("real:"):
        return str(default_real_dir() / ref[5:])
    return ref


class _Spec(NamedTuple):
    corpus: str
    """Corpus stem, in the folder ``home`` names."""
    queries: str
    """Query-set stem, in the corpora folder (the real corpora's own folder for ``home="real"``)."""
    policy: str
    answer: AnswerRule | None
    description: str
    reference: dict[str, float]
    home: str = "corpora"
    """Where the corpus is: ``corpora`` (the paper's), ``mirrors`` (evals/mirror_suites.py) or ``real``."""
    extends: str | None = None


_SPEC: dict[str, _Spec] = {
    "ghsa-freeform": _Spec(
        "ghsa-freeform",
        "ghsa-freeform",
        "security-advisory",
        None,
        "159 real GitHub advisories + their release notes, 2,000 distractors; free-form questions",
        {"BM25": 0.138, "Dense (MiniLM)": 0.270, "Two-Stage (BM25 anchor)": 0.975},
    ),
    "ghsa-structured": _Spec(
        "ghsa-structured",
        "ghsa-structured",
        "security-advisory",
        None,
        "the same advisories; template questions naming product and CVE",
        {"BM25": 0.641, "Dense (MiniLM)": 0.132, "Regex-NER probe": 1.000},
    ),
    "finsuperqa": _Spec(
        "finsuperqa",
        "finsuperqa",
        "eval:finsuperqa",
        FINSUPERQA_ANSWER,
        "1,000 SEC Rule 204A-1 compliance examples, 250 per hop type, entity-disjoint distractors",
        {"BM25": 0.305, "TF-IDF": 0.254, "Dense (MiniLM)": 0.214, "TwoStage": 1.000},
    ),
    "finsuperqa-contaminated": _Spec(
        "finsuperqa-contaminated",
        "finsuperqa-contaminated",
        "eval:finsuperqa",
        FINSUPERQA_ANSWER,
        "FinSuperQA with same-scope distractors (823 of 1,000 queries affected)",
        {"TwoStage (anchor only)": 0.911, "TwoStage (anchor only) T3": 0.652, "TwoStage+RSSG": 0.942, "TwoStage+RSSG T3": 0.776},
    ),
    "cvepatchqa": _Spec(
        "cvepatchqa",
        "cvepatchqa",
        "security-advisory",
        CVE_ANSWER,
        "500 synthetic CVE examples (T0 disclosure / T1 disclosure + patch), template questions",
        {"BM25": 0.500, "TwoStage": 1.000},
    ),
    "cvepatchqa-freeform": _Spec(
        "cvepatchqa",
        "cvepatchqa-freeform",
        "security-advisory",
        CVE_ANSWER,
        "the 250 T1 CVE examples with LLM-written free-form questions",
        {},
    ),
    "legalprecedentqa": _Spec(
        "legalprecedentqa",
        "legalprecedentqa",
        "legal-precedent",
        LEGAL_ANSWER,
        "500 synthetic precedent examples (T0 ruling / T1 ruling + overruling), template questions",
        {"BM25": 0.500, "TwoStage": 1.000},
    ),
    "legalprecedentqa-freeform": _Spec(
        "legalprecedentqa",
        "legalprecedentqa-freeform",
        "legal-precedent",
        LEGAL_ANSWER,
        "the 250 T1 precedent examples with free-form questions",
        {},
    ),
}

SUITES = tuple(_SPEC)
"""The paper's eight suites (``make bench``)."""


@dataclass(frozen=True)
class MirrorSpec:
    """A mirrored suite: the free-form questions of ``base`` over its corpus with voiding
    records added to ``variant`` (``half`` or ``all``) of their other template scopes."""

    base: str
    variant: str

    @property
    def corpus(self) -> str:
        return f"{self.base}-mirror-{self.variant}"


MIRRORS = {
    f"{base}-freeform-mirror-{variant}": MirrorSpec(base, variant)
    for base in ("cvepatchqa", "legalprecedentqa")
    for variant in ("half", "all")
}


def _dev_specs() -> dict[str, _Spec]:
    """The mirrors (a free-form suite's spec over its mirrored corpus) and the real corpora."""
    specs = {}
    added = {"cvepatchqa": "patches", "legalprecedentqa": "overrulings"}
    for name, mirror in MIRRORS.items():
        base = _SPEC[f"{mirror.base}-freeform"]
        specs[name] = base._replace(
            corpus=mirror.corpus,
            home="mirrors",
            extends=mirror.base,
            reference={},
            description=f"{base.description}; {added[mirror.base]} added to {mirror.variant} of the other template "
            "scopes of each question (evals/mirror_suites.py)",
        )
    for series, what in (("keps", "653 Kubernetes Enhancement Proposals"), ("eips", "1,195 Ethereum EIPs and ERCs")):
        specs[f"real-{series}"] = _Spec(
            series,
            series,
            "real:proposals.policy.toml",
            None,
            f"{what} with their own supersession edges; 30 hand-written dev questions, scored by gold inclusion",
            {},
            home="real",
        )
    return specs


_SPEC.update(_dev_specs())
DEV_SUITES = tuple(name for name in _SPEC if name not in SUITES)
"""The mirrors and the real corpora: with :data:`SUITES`, the suites defaults must do no harm on."""


def _checkout() -> Path:
    return Path(__file__).resolve().parents[1]


def default_corpora_dir() -> Path:
    """``../shared/data/car-benchmarks/corpora`` beside the checkout this package runs from."""
    return _checkout().parent / "shared" / "data" / "car-benchmarks" / "corpora"


def default_real_dir() -> Path:
    """``../shared/data/real-supersession`` beside the checkout: the KEP and EIP corpora."""
    return _checkout().parent / "shared" / "data" / "real-supersession"


def default_mirrors_dir() -> Path:
    """``evals/mirrors`` in the checkout: where ``evals/mirror_suites.py`` writes the mirrors."""
    return _checkout() / "evals" / "mirrors"


def load_suite(name: str, corpora_dir: str | Path | None = None, mirrors_dir: str | Path | None = None) -> Suite:
    if name not in _SPEC:
        raise ValueError(
            f"unknown suite {name!r}; choose one of {list(SUITES) + list(DEV_SUITES)} or give --corpus/--queries/--policy"
        )
    spec = _SPEC[name]
    corpora = Path(corpora_dir) if corpora_dir else default_corpora_dir()
    mirrors = Path(mirrors_dir) if mirrors_dir else default_mirrors_dir()
    homes = {"corpora": corpora, "real": default_real_dir(), "mirrors": mirrors}
    suite = Suite(
        name,
        homes[spec.home] / f"{spec.corpus}.corpus.jsonl",
        (homes["real"] if spec.home == "real" else corpora) / f"{spec.queries}.queries.jsonl",
        spec.policy,
        spec.answer,
        spec.description,
        spec.reference,
        spec.extends,
    )
    for path in (suite.corpus, suite.queries):
        if path.is_file():
            continue
        if spec.home == "mirrors" and path == suite.corpus:
            raise FileNotFoundError(
                f"suite {name!r}: {path} not found; write the mirrors with `python evals/mirror_suites.py --out {path.parent}`"
            )
        if spec.home == "real":
            raise FileNotFoundError(f"suite {name!r}: {path} not found (the real-supersession data, beside the checkout)")
        raise FileNotFoundError(f"suite {name!r}: {path} not found (pass --corpora DIR)")
    return suite


def custom_suite(corpus: str | Path, queries: str | Path, policy: str, name: str | None = None) -> Suite:
    """A user corpus and query set in the neutral format; scored by gold inclusion (no answer rule)."""
    corpus, queries = Path(corpus), Path(queries)
    return Suite(name or corpus.stem.split(".")[0], corpus, queries, policy, description=f"user corpus {corpus.name}")


def store_path(suite: Suite, stores_dir: Path, policy: Policy | None = None) -> Path:
    """Where a suite's store is kept: keyed by corpus and policy, so suites that share both share it."""
    return stores_dir / f"{suite.corpus.name.split('.')[0]}--{(policy or suite.policy).name}"


def open_suite_store(suite: Suite, stores_dir: Path, progress: bool = True) -> CARStore:
    """The suite's store, built on first use (keyed by corpus and policy).

    A mirror's store starts as a copy of its base suite's store when that one exists: the
    mirror's corpus is the base's, line for line, then the records it adds, so ingest skips
    every record already stored (same fingerprint) and embeds only the added ones, in the
    order a store built from scratch would hold them."""
    policy = suite.policy
    path = store_path(suite, stores_dir, policy)
    base = stores_dir / f"{suite.extends}--{policy.name}"
    if suite.extends and not (path / CONFIG_FILE).is_file() and (base / CONFIG_FILE).is_file():
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(base, partial)
        shutil.rmtree(path, ignore_errors=True)
        partial.rename(path)
    store = CARStore.open(path, policy)
    report = store.ingest(suite.corpus, progress=progress)
    if report.errors:
        raise ValueError(f"{suite.corpus}: {len(report.errors)} records rejected, first: {report.errors[0]}")
    return store
