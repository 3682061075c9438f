"""Queries whose offline-reader answers become hand-labelled classifier data for the legal
and compliance domains (none of them in the reader protocol's held-out samples).

    python evals/labels/draw_queries.py     # writes evals/labels/queries-{legal,compliance}-*.txt

- legal: 20 T0 (good law) and 20 T1 (overruled) template questions of ``legalprecedentqa``
  (they name the case, so answers of both polarities occur), and 20 of the free-form
  ``legalprecedentqa-freeform`` questions *outside* the held-out sample
  (evals/reader_protocol/plan.json, ``outside_sample``);
- compliance: 10 queries per answer (active, compliant, non_compliant) of ``finsuperqa``.

Seeded (one ``random.Random(f"{SEED}:{name}")`` per draw); ids written in file order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20261123
HERE = Path(__file__).resolve().parent
CORPORA = HERE.parents[2] / "shared" / "data" / "car-benchmarks" / "corpora"


def _queries(suite: str) -> list[dict]:
    return [json.loads(line) for line in (CORPORA / f"{suite}.queries.jsonl").read_text().splitlines() if line.strip()]


def _draw(name: str, pool: list[dict], n: int) -> list[str]:
    chosen = {q["query_id"] for q in random.Random(f"{SEED}:{name}").sample(pool, n)}
    return [q["query_id"] for q in pool if q["query_id"] in chosen]


def _write(name: str, ids: list[str], why: str) -> None:
    (HERE / f"queries-{name}.txt").write_text(
        f"# {why}\n# python evals/labels/draw_queries.py (seed {SEED})\n" + "\n".join(ids) + "\n"
    )
    print(name, len(ids))


def main() -> None:
    plan = json.loads((HERE.parent / "reader_protocol" / "plan.json").read_text())
    template = _queries("legalprecedentqa")
    ids = []
    for answer in ("good_law", "overruled"):
        ids += _draw(f"legal-{answer}", [q for q in template if q["answer"] == answer], 20)
    _write(
        "legal-template",
        sorted(ids, key=[q["query_id"] for q in template].index),
        "legalprecedentqa template questions for legal classifier labels: 20 good_law, 20 overruled",
    )
    outside = set(plan["outside_sample"]["legalprecedentqa-freeform"])
    _write(
        "legal-freeform",
        _draw("legal-freeform", [q for q in _queries("legalprecedentqa-freeform") if q["query_id"] in outside], 20),
        "legalprecedentqa-freeform questions outside the held-out sample, for legal classifier labels",
    )
    fin = _queries("finsuperqa")
    ids = []
    for answer in ("active", "compliant", "non_compliant"):
        ids += _draw(f"compliance-{answer}", [q for q in fin if q["answer"] == answer], 10)
    _write(
        "compliance",
        sorted(ids, key=[q["query_id"] for q in fin].index),
        "finsuperqa questions for compliance classifier labels: 10 per answer",
    )


if __name__ == "__main__":
    main()
