"""Tenancy of `car-rag serve` under randomized requests: the generator and checks of
``evals/serve_tenancy_fuzz.py`` (the command line runs more) over a real store and two real
uvicorn servers (BM25 and hybrid anchors). No response, log line (root logger at INFO, uvicorn's
access log on) or metric label shows a tenant's record to a key that may not read it, every
status is one the request allows, and the store holds exactly what the accepted writes stored."""

from __future__ import annotations

import serve_tenancy_fuzz as fuzz  # evals/ is on pytest's pythonpath (pyproject.toml)

REQUESTS = 1200


def test_randomized_requests_show_no_tenant_a_record_it_may_not_read(tmp_path, embedder):
    report = fuzz.run_fuzz(REQUESTS, workdir=tmp_path, embedder=embedder)
    assert report.violations == [], "\n".join(report.violations[:20])
    # the requests reached what the gate guards, and met every kind of refusal
    assert report.counts["answers with a hidden superseder"] >= 100
    assert report.counts["answers showing a restricted record the key may read"] >= 100
    assert {status.rsplit(" ", 1)[1] for status in report.statuses} == {"200", "400", "401", "403", "422"}
    assert report.statuses["POST /records 200"] >= 20 and report.counts["records:taken-doc-id"] >= 20
    assert report.counts["log lines"] >= REQUESTS  # uvicorn's access log: a line per request


def test_the_checks_find_a_server_that_answers_without_the_keys_caller(tmp_path, embedder):
    report = fuzz.run_fuzz(150, workdir=tmp_path, embedder=embedder, leaky=True)
    assert any("the response shows marker" in v for v in report.violations)
