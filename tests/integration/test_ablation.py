"""`car-rag bench --ablation` on the report fixture's small corpus: every variant that can run
does, with the seed's metrics; the status filter leaves no outdated record in the top k;
the model-dependent variants say why they did not run."""

from __future__ import annotations

import json
from pathlib import Path

from car_rag.cli import main

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "report_run"


def test_ablation_matrix_runs_and_states_what_it_skipped(tmp_path, capsys):
    assert main([
        "bench", "--corpus", str(RUN / "ghsa-mini.corpus.jsonl"), "--queries", str(RUN / "ghsa-mini.queries.jsonl"),
        "--policy", "security-advisory", "--ablation", "--stores", str(tmp_path / "stores"), "--out", str(tmp_path),
    ]) == 0
    result = json.loads((tmp_path / "ghsa-mini-ablation.json").read_text())
    variants = result["variants"]
    assert list(variants) == ["V0", "V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9", "C1", "C2", "C3"]
    # the seed's contrast: the status filter drops every outdated record and, with them, the chain's provenance;
    # car-rag keeps the superseded records it shows beside their superseders (TCA) and more of the chain
    assert variants["V4"]["orr"] == 0.0 < variants["V2"]["orr"]
    assert variants["V4"]["chain_recall"] < variants["C3"]["chain_recall"] and variants["C3"]["tca"]["value"] == 1.0
    assert variants["V1"]["k"] == 10 and variants["V2"] == {**variants["C1"], "what": variants["V2"]["what"]}
    assert result["date_filter"] == "cutoff 2026-02-01 (median record date)"
    assert variants["V3"]["recall"]["n"] == 4
    for vid in ("V5", "V6", "V7", "V8", "V9"):
        assert "needs" in variants[vid]["skipped"]
    table = (tmp_path / "ghsa-mini-ablation.md").read_text()
    assert "| V6 | dense + HyDE | – | skipped: needs a language model" in table
    assert "The seed's central contrast" in capsys.readouterr().out
