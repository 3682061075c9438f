"""Smoke check of the core engine on ghsa-freeform (159 real advisories, 2,318 documents).

TCA@5 here is the GHSA exports' definition: a gold (release-note) record in the top 5.
Run:  python evals/ghsa_smoke.py [--corpora DIR] [--store DIR] [--out evals/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from car_rag import CARStore, ControllingAuthorityRetriever  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPORA = ROOT.parent / "shared" / "data" / "car-benchmarks" / "corpora"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--store", type=Path, help="reuse/keep the store here (default: temporary)")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results")
    args = parser.parse_args()

    store_dir = args.store or Path(tempfile.mkdtemp(prefix="car-ghsa-"))
    store = CARStore.open(store_dir, "security-advisory")
    print(store.ingest(args.corpora / "ghsa-freeform.corpus.jsonl").summary())
    queries = load_queries(args.corpora / "ghsa-freeform.queries.jsonl")
    rows = []
    for anchors, k1 in (("bm25", 5), ("dense", 10), ("hybrid", 10)):
        retriever = ControllingAuthorityRetriever(store, anchors=anchors, k1=k1)
        tca = anchor_hits = 0
        stage23 = []
        for q in queries:
            result = retriever.retrieve(q.query)
            stage23.append(result.timings_ms["stage23"])
            tca += any(g in result.doc_ids(5) for g in q.gold_doc_ids)
            anchor_hits += any(a.doc_id in q.anchor_doc_ids for a in result.anchors[:5])
        rows.append(
            {
                "anchors": anchors,
                "k1": k1,
                "tca_at_5": round(tca / len(queries), 4),
                "tca_hits": tca,
                "anchor_recall_at_5": round(anchor_hits / len(queries), 4),
                "stage23_median_ms": round(statistics.median(stage23), 4),
                "queries": len(queries),
            }
        )
        print(rows[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ghsa_smoke.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| anchors | k1 | TCA@5 | hits | anchor recall@5 | Stage 2+3 median (ms) |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['anchors']} | {r['k1']} | {r['tca_at_5']:.3f} | {r['tca_hits']}/{r['queries']} | "
        f"{r['anchor_recall_at_5']:.3f} | {r['stage23_median_ms']:.3f} |"
        for r in rows
    ]
    (args.out / "ghsa_smoke.md").write_text("# ghsa-freeform smoke check (`python evals/ghsa_smoke.py`)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
