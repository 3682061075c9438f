"""The answer classifier against every committed hand-label file (evals/labels/index.json):
agreement may not fall below the committed figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INDEX = json.loads((ROOT / "evals" / "labels" / "index.json").read_text())


@pytest.mark.parametrize("entry", INDEX, ids=[e["labels"] for e in INDEX])
def test_agreement_not_below_the_committed_figure(entry, corpora, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "evals"))
    from classifier_agreement import compare

    source = entry["answers"]
    answers = corpora.parent / source.split(":", 1)[1] if source.startswith("shared:") else ROOT / source
    rows = compare(answers, ROOT / "evals" / "labels" / entry["labels"], entry["suite"])
    agree = sum(hand["label"] == auto.label for _, hand, auto in rows)
    assert len(rows) == entry["of"]
    assert agree >= entry["agree"], [
        (a["id"], a["retrieval"], h["label"], c.label, c.reason) for a, h, c in rows if h["label"] != c.label
    ]
