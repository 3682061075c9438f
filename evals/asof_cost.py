"""What as_of and a filter cost a query (issue 35), measured interleaved on one suite's store:
each question is retrieved without either, as of one fixed date, as of a new date (seeded), and
under a filter, one after the other, so load on the machine weighs on all four alike. Prints p50
per case and its ratio to the plain query. Not the 100k perf harness: the suite's own store.

    python evals/asof_cost.py --stores .car-stores --suite legalprecedentqa --queries 60
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from car_rag.eligibility import RecordFilter
from car_rag.queries import load_queries
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore
from car_rag_evals.suites import load_suite, store_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=Path, default=Path(".car-stores"))
    parser.add_argument("--suite", default="legalprecedentqa")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--as-of", default="2029-01-01", help="the fixed date")
    args = parser.parse_args()
    suite = load_suite(args.suite)
    questions = [q.query for q in load_queries(suite.queries)[: args.queries]]
    rng = random.Random(7)
    with CARStore.open(store_path(suite, args.stores), follow=False) as store:
        retriever = ControllingAuthorityRetriever(store)
        for question in questions[:5]:  # warm: the model, the masks of the fixed date
            retriever.retrieve(question)
            retriever.retrieve(question, as_of=args.as_of)
        dated = RecordFilter(since="2020-01-01", doc_types=sorted({r.doc_type for r in store.records.values()})[:2])
        times: dict[str, list[float]] = {"plain": [], "fixed as_of": [], "new as_of each query": [], "filter": []}
        for question in questions:
            new = (date(2020, 1, 1) + timedelta(days=rng.randrange(4000))).isoformat()
            cases: dict[str, dict[str, Any]] = {
                "plain": {},
                "fixed as_of": {"as_of": args.as_of},
                "new as_of each query": {"as_of": new},
                "filter": {"filters": dated},
            }
            for name, options in cases.items():
                tick = time.perf_counter()
                retriever.retrieve(question, **options)
                times[name].append((time.perf_counter() - tick) * 1000)
    base = statistics.median(times["plain"])
    print(f"{args.suite} ({len(store.records)} records), {len(questions)} questions, p50:")
    for name, measured in times.items():
        print(f"  {name:22s} {statistics.median(measured):7.1f} ms  {statistics.median(measured) / base:.2f}x")


if __name__ == "__main__":
    main()
