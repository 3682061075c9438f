"""What the Stage-2-in-SQL checks share (``evals/scale_out/``, ``tests/integration/test_stage2_sql.py``):
what a result says, to compare two modes' answers, and a store copied into PostgreSQL with its vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from car_rag.resolution import RetrievalResult
from car_rag.store import CARStore

__all__ = ["answer_of", "copy_into_postgres"]


def answer_of(result: RetrievalResult) -> dict[str, Any]:
    """Everything ``result`` says but its timings (records in order with their statuses, roles,
    chains and controllers; posterior, links, ambiguity), and its anchors."""
    said = result.to_dict()
    said.pop("timings_ms")
    said["anchors"] = [(a.doc_id, a.rank) for a in result.anchors]
    return said


def copy_into_postgres(store: CARStore, url: str, folder: Path, *, chunk_size: int = 2000) -> CARStore:
    """``store``'s records, in its ingest order, with the vectors its exact search holds, in a new
    store on pgvector at ``url`` (nothing embedded again); the new store, open (``folder``: its own)."""
    state = store.log.load()
    held = store.dense.held()
    if held is None:
        raise ValueError(f"{store.location}: its vectors are not held for exact search (over the limit)")
    vectors = dict(zip(held[0], held[1]))
    copy = CARStore.open(folder, store.policy, embedder=store.embedder, authority_url=url, vector_store="pgvector", follow=False)
    report = copy.ingest(state.records, embeddings=vectors, progress=False, chunk_size=chunk_size)
    if report.errors or len(copy) != len(state.records):
        copy.close()
        raise ValueError(f"{store.location}: {len(report.errors)} records refused copying into PostgreSQL: {report.errors[:1]}")
    return copy
