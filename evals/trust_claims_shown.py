"""The trust fuzz (:mod:`serve_trust_fuzz`) with the untrusted claims it leaves counted as readers
see them (issue 32's bound): for each reader, the claims it is shown (both records readable) on
its most-claimed record, and in all. Same arguments as the fuzz; prints one table after it.

    python evals/trust_claims_shown.py --writes 1000
"""

from __future__ import annotations

from collections import Counter

import serve_trust_fuzz as fuzz
from car_rag.graph import AuthorityGraph, Edge

_disputed_edges = AuthorityGraph.disputed_edges
_shown: dict[str, tuple[int, int]] = {}


def _counting(self: AuthorityGraph) -> list[Edge]:
    """The fuzz asks for every claim once, over the final graph: count them per reader then."""
    edges = _disputed_edges(self)
    records = self.records
    for name, reader in fuzz.READERS.items():
        seen = Counter(
            e.target
            for e in edges
            if e.untrusted and reader.can_read(records[e.superseder]) and reader.can_read(records[e.target])
        )
        _shown[name] = (max(seen.values(), default=0), sum(seen.values()))
    return edges


if __name__ == "__main__":
    AuthorityGraph.disputed_edges = _counting  # type: ignore[method-assign]
    fuzz.main()
    print("\n| reader | claims shown on its most-claimed record | claims shown in all |\n|---|---:|---:|")
    for name, (most, total) in _shown.items():
        print(f"| {name} | {most} | {total} |")
