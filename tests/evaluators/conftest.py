"""The evaluator tier (``make test-evaluators``): RAGAS and DeepEval, which do not install beside the
main test venv's pins, run in a venv of their own with ``--confcutdir tests/evaluators`` (the core's
conftest needs the store extra, which this venv lacks). Both frameworks report usage unless told
not to: opted out here before either is imported, and pytest-socket (pyproject's settings) fails
any test that reaches past loopback. Without them (the main venv) these tests are skipped."""

from __future__ import annotations

import os

os.environ["RAGAS_DO_NOT_TRACK"] = "true"
os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] = "1"
os.environ["DEEPEVAL_UPDATE_WARNING_OPT_IN"] = "0"
os.environ["DEEPEVAL_DISABLE_DOTENV"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import car_rag  # noqa: E402
from car_rag import Policy, Record, load_policy, load_records  # noqa: E402

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
DISCLOSURE = "sec-lodash-cve-2099-10001-disclosure"
RELEASE = "sec-lodash-4.17.12-release"
"""A demo chain: the 4.17.12 release fixes (supersedes) the CVE-2099-10001 disclosure."""


@pytest.fixture(scope="session")
def demo_records() -> list[Record]:
    return load_records(DEMO / "corpus.jsonl").records


@pytest.fixture(scope="session")
def demo_policy() -> Policy:
    return load_policy(DEMO / "policy.toml")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepEval writes its run cache (.deepeval/) in the working directory: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)
