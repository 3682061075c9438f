"""Hand labels under guideline v2 (issue 30): an answer that claims two statuses, and is not
a "was X, now Y" sequence, is ``mixed``, not its first claim.

    python evals/labels/relabel_mixed.py      # writes the *.v2.labels.jsonl files beside their v1

The v1 labels were made under a guideline that labelled such an answer by its lead (the
legal README: "they are labelled by their lead, as the classifier does"; the security
tuning notes: "self-contradicting, the direct answer is wrong"). v2 changes only those rows;
every other row is copied as it is. A changed row keeps ``label_v1`` (and ``claim_v1``)
and says why in ``v2``.

- Held-out files: only the annotator's own notes decide, no answer is read again: a note
  that records a first claim and a later one (``first claim: '…' (then …)`` / ``(later …)``)
  is an answer the annotator read as claiming both; these are the answers the legal README
  lists as opening with "has been modified" and later saying the ruling "remains binding".
- Tuning files: the same note rule, plus the rows listed in ``READ`` below, relabelled on
  reading the answer (tuning data; the reason is in the row).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("qwen_ghsa_tuning.labels.jsonl", "legal/tuning-freeform.labels.jsonl", "legal/heldout-freeform.labels.jsonl")
"""The label files with rows v2 changes (every other file is the same under both guidelines)."""

_BOTH_IN_NOTE = re.compile(r"^first claim: '[^']*' \((?:then|later)\b")

READ = {
    (
        "qwen_ghsa_tuning.labels.jsonl",
        "GHSA-p9ff-h696-f583",
        "car-xml",
    ): "read: 'No, the vulnerability is not patched' then 'The vulnerability was fixed in [EP-1]'",
    (
        "qwen_ghsa_tuning.labels.jsonl",
        "GHSA-48ch-p4gq-x46x",
        "car-xml",
    ): "read: 'No, the vulnerability is not patched' then 'The vulnerability was fixed in [EP-1]'",
    (
        "qwen_ghsa_tuning.labels.jsonl",
        "GHSA-48ch-p4gq-x46x",
        "car-xml-omit",
    ): "read: 'No, the vulnerability is not patched' then 'The latest version that fixes it is [GHSA-…]'",
    (
        "legal/tuning-freeform.labels.jsonl",
        "leg-t1-0047",
        "dense",
    ): "read: 'has been modified by subsequent court decisions' then 'This is the controlling precedent'",
    (
        "legal/tuning-freeform.labels.jsonl",
        "leg-t1-0167",
        "dense",
    ): "read: 'has been modified by subsequent court decisions' then 'This is the controlling precedent'",
}
"""Tuning rows relabelled on reading the answer: (file, query id, condition) -> why."""


def v2_path(name: str) -> Path:
    return HERE / name.replace(".labels.jsonl", ".v2.labels.jsonl")


def relabel(name: str) -> list[dict]:
    """The rows of ``name`` under guideline v2."""
    out = []
    for line in (HERE / name).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        key = (name, row.get("query_id", row.get("id")), row.get("condition", row.get("retrieval")))
        why = READ.get(key) if "tuning" in name else None
        if why is None and _BOTH_IN_NOTE.match(row.get("note", "")):
            why = "the annotator's note records a first claim and a later one"
        if why is not None:
            row = {**row, "label": "mixed", "label_v1": row["label"], "v2": why}
            if "claim" in row:
                row = {**row, "claim": "both", "claim_v1": row["claim"]}
        out.append(row)
    return out


def main() -> None:
    for name in FILES:
        rows = relabel(name)
        v2_path(name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{v2_path(name).relative_to(HERE)}: {sum('label_v1' in r for r in rows)} of {len(rows)} rows now mixed")


if __name__ == "__main__":
    main()
