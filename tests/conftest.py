"""Shared fixtures: the real MiniLM embedder, the demo policy and a demo store built once.

The environment is pinned before anything can import torch or transformers: the packaged
MiniLM copy is loaded offline, one OpenMP thread keeps CPU timings stable and avoids
oversubscription when Chroma and tokenizers spin up their own threads, and Chroma sends no
telemetry (the network is off but loopback: pyproject.toml's pytest settings).

Property tests run without Hypothesis's per-example deadline (or its too-slow health check):
on a loaded machine an example's time says nothing about the code, and pytest-timeout bounds
every test.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["ANONYMIZED_TELEMETRY"] = "False"

import json  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CARStore, Embedder, Policy, load_policy  # noqa: E402

if TYPE_CHECKING:
    from car_rag.postgres.fixture import ThrowawayPostgres

settings.register_profile("car-rag", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("car-rag")
# The evidence renderings' invariants are asserts in the harness (evals/fuzz_xml.py runs them too):
# rewritten like a test's, a failure shows the values compared.
pytest.register_assert_rewrite("car_rag_evals.xml_fuzz", "car_rag_evals.plain_fuzz")


SUITE_STORE_MODULES = ("tests/integration/test_bench_rows.py", "tests/integration/test_ghsa_smoke.py")
"""The modules that query the session's ghsa-freeform store (``suite_store``): under pytest-xdist one
worker runs them all, so that the store is built once."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n N --dist loadfile`` (``make test-integration``) a module's tests run on one worker (its
    module-scoped stores and servers are built once), and so do all of :data:`SUITE_STORE_MODULES`.
    (xdist's own ``--dist loadgroup`` groups nothing under pytest 9.2: it renames test ids through
    ``item._nodeid``, which pytest no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "suite-stores" if module in SUITE_STORE_MODULES else module

    return ModuleScheduling(config, log)


DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
"""The demo corpus shipped in the package (security advisories + case law)."""

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "data" / "car-benchmarks" / "corpora"
"""The CAR benchmark corpora; CI runs a fresh clone with ``../shared`` beside it."""


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session")
def corpora() -> Path:
    """The benchmark corpora folder. Missing, the tests that need it fail (a skip would let CI
    pass without them): check out the project with ``../shared`` beside it."""
    if not CORPORA.is_dir():
        pytest.fail(f"benchmark corpora not found at {CORPORA}: the tests need ../shared/data/car-benchmarks beside the checkout")
    return CORPORA


@pytest.fixture(scope="session")
def suite_store(tmp_path_factory: pytest.TempPathFactory, corpora: Path) -> Iterator[Callable[[str], CARStore]]:
    """A benchmark suite's store by suite name, built on first use and shared by the whole session
    (a GHSA store embeds 2,318 long records: minutes of CPU). Suites of one corpus and policy share a
    store, as under ``make bench``. Treat them as read-only; a module that uses one is one of
    :data:`SUITE_STORE_MODULES`, run on one worker, so that its store is built once."""
    from car_rag_evals.suites import load_suite, open_suite_store, store_path

    folder = tmp_path_factory.mktemp("suite-stores")
    opened: dict[Path, CARStore] = {}

    def open_store(name: str) -> CARStore:
        suite = load_suite(name, corpora)
        path = store_path(suite, folder)
        if path not in opened:
            opened[path] = open_suite_store(suite, folder, progress=False)
        return opened[path]

    yield open_store
    for store in opened.values():
        store.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    """One throwaway PostgreSQL with pgvector for the session (each start runs initdb: seconds of CPU).
    A module takes a database of its own from it (``postgres.new_database()``); a test that stops
    PostgreSQL starts a server of its own."""
    from car_rag.postgres.fixture import throwaway_postgres

    with throwaway_postgres() as running:
        yield running


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real all-MiniLM-L6-v2 (packaged copy, offline), loaded once per session."""
    emb = Embedder()
    _ = emb.model  # load now so that no test's timing includes it
    return emb


@pytest.fixture(scope="session")
def security_policy() -> Policy:
    return load_policy("security-advisory")


@pytest.fixture(scope="session")
def legal_policy() -> Policy:
    return load_policy("legal-precedent")


@pytest.fixture(scope="session")
def demo_policy(security_policy: Policy, legal_policy: Policy) -> Policy:
    """The built-in security-advisory and legal-precedent policies, combined."""
    sec, leg = security_policy, legal_policy
    return Policy(
        name="demo",
        scope_keys=sec.scope_keys + leg.scope_keys,
        rules=sec.rules + leg.rules,
        hierarchies=leg.hierarchies,
        scope_patterns=sec.scope_patterns,
        case_insensitive_keys=sec.case_insensitive_keys,
    )


@pytest.fixture(scope="session")
def demo_corpus_path() -> Path:
    return DEMO / "corpus.jsonl"


@pytest.fixture(scope="session")
def demo_records() -> list[dict]:
    return read_jsonl(DEMO / "corpus.jsonl")


@pytest.fixture(scope="session")
def demo_queries() -> list[dict]:
    return read_jsonl(DEMO / "queries.jsonl")


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory, demo_policy: Policy, embedder: Embedder):
    """The demo corpus in an embedded-Chroma store, built once. Treat it as read-only."""
    path = tmp_path_factory.mktemp("demo-store")
    store = CARStore.open(path, demo_policy, embedder=embedder)
    report = store.ingest(DEMO / "corpus.jsonl", progress=False)
    assert report.errors == [], [str(e) for e in report.errors]
    assert len(report.added) == len(read_jsonl(DEMO / "corpus.jsonl"))
    yield store
    store.close()
