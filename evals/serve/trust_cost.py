"""Cost per query of Stages 2-3 with the trust model, as an A/B against a checkout without it.

A synthetic corpus (``--scopes`` scopes, each a disclosure and a chain of patches; a third of the
scopes also get patches of other tenants and explicit edges naming other tenants' records, as the
issue's attacks write them) is put in an :class:`AuthorityGraph`; each query resolves a random
record and the records of its scope (as a query naming its CVE would) for a tenant reader, and
the median and p95 of :func:`resolve_authority` are printed (anchors: records acme may read). ``--no-tenants`` makes every record
public (the single-tenant case). Run it with each checkout first on ``PYTHONPATH``:

    PYTHONPATH=/path/to/other/checkout python evals/serve/trust_cost.py
    python evals/serve/trust_cost.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import car_rag
from car_rag import CallerContext, Record, load_policy
from car_rag.graph import AuthorityGraph
from car_rag.resolution import Anchor, resolve_authority

TENANTS = ("acme", "globex", "initech")


def corpus(scopes: int, tenants: bool, rng: random.Random) -> list[Record]:
    made: list[dict[str, Any]] = []
    for n in range(scopes):
        owner = rng.choice(TENANTS) if tenants and n % 4 else None
        scope = {"package": f"pkg{n}", "cve_id": f"CVE-2099-{n}"}
        base = {"scope": scope, "tenant": owner, "text": "t"}
        made.append({"doc_id": f"d{n}", "doc_type": "vulnerability_disclosure", "published_at": "2024-01-01", **base})
        made += [
            {"doc_id": f"p{n}-{p}", "doc_type": "patch_release", "published_at": f"2024-{2 + p:02d}-01", **base} for p in range(3)
        ]
        if tenants and n % 3 == 0:  # another tenant's attacks: a far-future patch, an explicit edge
            other = rng.choice([t for t in TENANTS if t != owner])
            made.append({**base, "doc_id": f"x{n}", "doc_type": "patch_release", "published_at": "9999-12-31", "tenant": other})
            made.append({"doc_id": f"y{n}", "doc_type": "note", "text": "y", "tenant": other, "supersedes": [f"d{n}", f"p{n}-0"]})
    return [Record.model_validate(r) for r in made]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scopes", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--no-tenants", action="store_true")
    args = parser.parse_args()
    rng = random.Random(32)
    policy = load_policy("security-advisory")
    graph = AuthorityGraph(policy)
    for record in corpus(args.scopes, not args.no_tenants, rng):
        graph.add(record)
    caller = CallerContext("acme")
    ids = sorted(d for d, r in graph.records.items() if caller.can_read(r))  # what acme's questions reach
    times = []
    for _ in range(args.queries):
        doc_id = rng.choice(ids)
        scope = graph.records[doc_id].scope
        named = {"cve_id": [scope["cve_id"]]} if scope else {}
        started = time.perf_counter()
        resolve_authority(graph, policy, "q", [Anchor(doc_id, 1)], caller, scope_ids=named)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    print(
        f"{car_rag.__file__}: {len(graph)} records, {len(graph.edges())} edges, tenants={not args.no_tenants}: "
        f"median {statistics.median(times):.3f} ms, p95 {times[int(0.95 * len(times))]:.3f} ms over {args.queries} queries"
    )


if __name__ == "__main__":
    main()
