"""``car-rag demo``: what dense-only, BM25-only and car-rag put in front of the model.

Builds a store over the small two-domain corpus shipped in the package (security
advisories and case law, with superseders whose vocabulary differs from the queries) and
prints the three top-k lists side by side, marking superseded records and the gold.
"""

from __future__ import annotations

import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import TextIO

from car_rag.queries import Query, load_queries
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore

__all__ = ["run_demo", "demo_files"]

_COL = 44


def demo_files() -> tuple[Path, Path, Path]:
    """Paths of the packaged demo corpus, queries and policy."""
    folder = resources.files("car_rag") / "data" / "demo"
    return Path(str(folder / "corpus.jsonl")), Path(str(folder / "queries.jsonl")), Path(str(folder / "policy.toml"))


def _cell(doc_id: str, query: Query, superseded: bool) -> str:
    mark = "*" if doc_id in query.gold_doc_ids else " "
    tag = " [SUPERSEDED]" if superseded else ""
    room = _COL - 2 - len(tag)
    name = doc_id if len(doc_id) <= room else doc_id[: room - 1] + "…"
    return f"{mark} {name}{tag}".ljust(_COL)


def _violations(ids: list[str], store: CARStore) -> int:
    """Superseded records shown without what supersedes them: stale authority presented as current."""
    shown = set(ids)
    return sum(1 for d in ids if store.graph.ancestors(d) and not (store.graph.ancestors(d) & shown))


def run_demo(out: TextIO, *, k: int = 5, store_dir: Path | None = None) -> dict[str, int]:
    """Print the side-by-side comparison; returns gold-in-top-k counts per system."""
    corpus, queries_file, policy = demo_files()
    temporary = store_dir is None
    folder = Path(tempfile.mkdtemp(prefix="car-demo-")) if store_dir is None else Path(store_dir)
    try:
        store = CARStore.open(folder, policy)
        report = store.ingest(corpus, progress=False)
        print(f"demo store: {len(store)} records ({report.summary()})", file=out)
        car = ControllingAuthorityRetriever(store, anchors="hybrid")
        queries = load_queries(queries_file)
        hits = {"dense": 0, "bm25": 0, "car-rag": 0}
        stale = {"dense": 0, "bm25": 0, "car-rag": 0}
        for query in queries:
            result = car.retrieve(query.query)
            vector = store.embedder.encode([query.query])[0]
            columns = {
                "dense": [h.doc_id for h in store.dense.search(vector, k)],
                "bm25": [h.doc_id for h in store.lexical.search(query.query, k)],
                "car-rag": result.doc_ids(k),
            }
            status = {r.doc_id: r.status == "superseded" for r in result}
            print(f"\n{query.query_id} [{query.hop_type}] {query.query}", file=out)
            print("     " + "  ".join((f"{n}-only" if n != "car-rag" else n).ljust(_COL) for n in columns).rstrip(), file=out)
            for row in range(k):
                cells = []
                for name, ids in columns.items():
                    if row >= len(ids):
                        cells.append(" " * _COL)
                        continue
                    voided = status.get(ids[row], False) if name == "car-rag" else store.graph.is_superseded(ids[row])
                    cells.append(_cell(ids[row], query, voided))
                print(f"{row + 1:>2} " + "  ".join(cells).rstrip(), file=out)
            for rec in result.active[:k]:
                for edge in rec.voids:
                    print(f"   car-rag: {rec.doc_id} supersedes {edge.target} ({edge.rule})", file=out)
            for name, ids in columns.items():
                hits[name] += any(g in ids for g in query.gold_doc_ids)
                stale[name] += _violations(ids, store)
        print(f"\n* = controlling (gold) record.  Over {len(queries)} questions, top {k}:", file=out)
        for name in columns:
            print(
                f"  {name:<8} controlling record shown for {hits[name]:>2}/{len(queries)};"
                f" superseded records shown without their superseder: {stale[name]}",
                file=out,
            )
        store.close()
        return hits
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
