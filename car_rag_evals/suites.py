"""Benchmark suites: a corpus, its queries, the policy that governs it, and how to score it.

The built-in suites are the CAR paper's released benchmarks in the neutral record format
(``../shared/data/car-benchmarks/corpora/`` beside a checkout, or ``--corpora DIR``). A
user corpus in the same format is a suite too (:func:`custom_suite`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from car_rag.eval.metrics import AnswerRule
from car_rag.policy import Policy, load_policy
from car_rag.store import CARStore

__all__ = ["Suite", "SUITES", "load_suite", "custom_suite", "default_corpora_dir", "open_suite_store"]


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

    @property
    def policy(self) -> Policy:
        return load_policy(_policy_path(self.policy_ref))


def _policy_path(ref: str) -> str:
    if ref.startswith("eval:"):
        return str(resources.files("car_rag_evals") / "policies" / f"{ref[5:]}.toml")
    return ref


_SPEC: dict[str, tuple[str, str, str, AnswerRule | None, str, dict[str, float]]] = {
    # name: (corpus stem, queries stem, policy, answer rule, description, paper figures)
    "ghsa-freeform": (
        "ghsa-freeform", "ghsa-freeform", "security-advisory", None,
        "159 real GitHub advisories + their release notes, 2,000 distractors; free-form questions",
        {"BM25": 0.138, "Dense (MiniLM)": 0.270, "Two-Stage (BM25 anchor)": 0.975},
    ),
    "ghsa-structured": (
        "ghsa-structured", "ghsa-structured", "security-advisory", None,
        "the same advisories; template questions naming product and CVE",
        {"BM25": 0.641, "Dense (MiniLM)": 0.132, "Regex-NER probe": 1.000},
    ),
    "finsuperqa": (
        "finsuperqa", "finsuperqa", "eval:finsuperqa", FINSUPERQA_ANSWER,
        "1,000 SEC Rule 204A-1 compliance examples, 250 per hop type, entity-disjoint distractors",
        {"BM25": 0.305, "TF-IDF": 0.254, "Dense (MiniLM)": 0.214, "TwoStage": 1.000},
    ),
    "finsuperqa-contaminated": (
        "finsuperqa-contaminated", "finsuperqa-contaminated", "eval:finsuperqa", FINSUPERQA_ANSWER,
        "FinSuperQA with same-scope distractors (823 of 1,000 queries affected)",
        {"TwoStage (anchor only)": 0.911, "TwoStage (anchor only) T3": 0.652, "TwoStage+RSSG": 0.942, "TwoStage+RSSG T3": 0.776},
    ),
    "cvepatchqa": (
        "cvepatchqa", "cvepatchqa", "security-advisory", CVE_ANSWER,
        "500 synthetic CVE examples (T0 disclosure / T1 disclosure + patch), template questions",
        {"BM25": 0.500, "TwoStage": 1.000},
    ),
    "cvepatchqa-freeform": (
        "cvepatchqa", "cvepatchqa-freeform", "security-advisory", CVE_ANSWER,
        "the 250 T1 CVE examples with LLM-written free-form questions",
        {},
    ),
    "legalprecedentqa": (
        "legalprecedentqa", "legalprecedentqa", "legal-precedent", LEGAL_ANSWER,
        "500 synthetic precedent examples (T0 ruling / T1 ruling + overruling), template questions",
        {"BM25": 0.500, "TwoStage": 1.000},
    ),
    "legalprecedentqa-freeform": (
        "legalprecedentqa", "legalprecedentqa-freeform", "legal-precedent", LEGAL_ANSWER,
        "the 250 T1 precedent examples with free-form questions",
        {},
    ),
}

SUITES = tuple(_SPEC)


def default_corpora_dir() -> Path:
    """``../shared/data/car-benchmarks/corpora`` beside the checkout this package runs from."""
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "car-benchmarks" / "corpora"


def load_suite(name: str, corpora_dir: str | Path | None = None) -> Suite:
    if name not in _SPEC:
        raise ValueError(f"unknown suite {name!r}; choose one of {list(SUITES)} or give --corpus/--queries/--policy")
    folder = Path(corpora_dir) if corpora_dir else default_corpora_dir()
    corpus, queries, policy, answer, description, reference = _SPEC[name]
    suite = Suite(
        name, folder / f"{corpus}.corpus.jsonl", folder / f"{queries}.queries.jsonl", policy, answer, description, reference
    )
    for path in (suite.corpus, suite.queries):
        if not path.is_file():
            raise FileNotFoundError(f"suite {name!r}: {path} not found (pass --corpora DIR)")
    return suite


def custom_suite(corpus: str | Path, queries: str | Path, policy: str, name: str | None = None) -> Suite:
    """A user corpus and query set in the neutral format; scored by gold inclusion (no answer rule)."""
    corpus, queries = Path(corpus), Path(queries)
    return Suite(name or corpus.stem.split(".")[0], corpus, queries, policy, description=f"user corpus {corpus.name}")


def open_suite_store(suite: Suite, stores_dir: Path, progress: bool = True) -> CARStore:
    """The suite's store, built on first use (keyed by corpus and policy)."""
    policy = suite.policy
    store = CARStore.open(stores_dir / f"{suite.corpus.name.split('.')[0]}--{policy.name}", policy)
    report = store.ingest(suite.corpus, progress=progress)
    if report.errors:
        raise ValueError(f"{suite.corpus}: {len(report.errors)} records rejected, first: {report.errors[0]}")
    return store
