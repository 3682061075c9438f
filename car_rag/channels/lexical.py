"""Which BM25 backend: build one by name, or load the one a saved index was built with.

Kept apart from :mod:`car_rag.channels.base` so the base class and its backends import one
way only (each backend imports the base; this factory imports the backends, lazily).
"""

from __future__ import annotations

import json
from pathlib import Path

from car_rag.channels.base import LexicalIndex

__all__ = ["BACKENDS", "load_lexical_index", "make_lexical_index"]

BACKENDS = ("bm25s", "bm25-incremental", "rank-bm25")


def make_lexical_index(backend: str = "bm25s") -> LexicalIndex:
    if backend == "bm25s":
        from car_rag.channels.bm25s_index import BM25sIndex

        return BM25sIndex()
    if backend == "bm25-incremental":
        from car_rag.channels.incremental_bm25 import IncrementalBM25Index

        return IncrementalBM25Index()
    if backend == "rank-bm25":
        from car_rag.channels.rank_bm25_index import RankBM25Index

        return RankBM25Index()
    raise ValueError(f"unknown BM25 backend {backend!r}; choose one of {BACKENDS}")


def load_lexical_index(folder: Path) -> LexicalIndex:
    meta = json.loads((folder / "index.json").read_text())
    index = make_lexical_index(meta["backend"])
    index.doc_ids = meta["doc_ids"]
    index._load_body(folder)
    return index
