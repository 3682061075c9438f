"""Draw the held-out query samples of the reader protocol (see README.md beside this file).

    python evals/reader_protocol/draw.py            # writes plan.json and heldout-<suite>.txt here

The draw depends only on the seed and the query files' ids, so anyone re-running it gets
the same samples; the committed plan.json is the record of what was fixed, and when.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SEED = 20261123
SIZE = 120
HELDOUT_SUITES = ("cvepatchqa-freeform", "legalprecedentqa-freeform")
CORPORA = Path(__file__).resolve().parents[3] / "shared" / "data" / "car-benchmarks" / "corpora"
HERE = Path(__file__).resolve().parent


def query_ids(suite: str) -> list[str]:
    lines = (CORPORA / f"{suite}.queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query_id"] for line in lines if line.strip()]


def draw(suite: str) -> tuple[list[str], list[str]]:
    """(held-out sample, the rest) in file order; one Random per suite, seeded by SEED and the name."""
    ids = query_ids(suite)
    chosen = set(random.Random(f"{SEED}:{suite}").sample(ids, SIZE))
    return [q for q in ids if q in chosen], [q for q in ids if q not in chosen]


def main() -> None:
    plan: dict[str, Any] = {"seed": SEED, "size": SIZE, "dev": "ghsa-freeform", "heldout": {}, "outside_sample": {}}
    for suite in HELDOUT_SUITES:
        plan["heldout"][suite], plan["outside_sample"][suite] = draw(suite)
    (HERE / "plan.json").write_text(json.dumps(plan, indent=1) + "\n", encoding="utf-8")
    for suite, ids in plan["heldout"].items():  # the form `car-rag eval-llm --query-ids` reads
        (HERE / f"heldout-{suite}.txt").write_text(
            f"# held-out sample of {suite} (plan.json, seed {SEED})\n" + "\n".join(ids) + "\n"
        )
    print({s: len(v) for s, v in plan["heldout"].items()})


if __name__ == "__main__":
    main()
