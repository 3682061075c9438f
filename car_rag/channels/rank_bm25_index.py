"""BM25 with ``rank-bm25``, the implementation the CAR paper's figures used (for parity runs).

Tokens as in the paper's GHSA scripts: lower-cased, punctuation replaced by spaces, split
on white space, no stop words. About 700x slower per query than bm25s at 100k records:
use it to compare, not to serve.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from car_rag.channels.base import LexicalIndex, ReaderIndexes
from car_rag.extras import require

__all__ = ["RankBM25Index", "tokenize"]


_PUNCTUATION = re.compile(r"[^\w\s]")


def tokenize(text: str) -> list[str]:
    """The paper's tokens; pass it as a framework BM25's preprocessor for an identical Stage 1."""
    return _PUNCTUATION.sub(" ", text.lower()).split()


class RankBM25Index(LexicalIndex):
    """rank-bm25's Okapi BM25 (statistics fixed when built: a caller's mask is answered by an
    index over the masked records alone, built on the mask's first query)."""

    backend = "rank-bm25"

    def __init__(self) -> None:
        super().__init__()
        self._cls = require("rank_bm25", "rank-bm25", "the rank-bm25 backend").BM25Okapi
        self._corpus: list[list[str]] = []
        self._bm25 = None
        self._readers: ReaderIndexes[Any] = ReaderIndexes(lambda positions: self._okapi([self._corpus[p] for p in positions]))

    def _okapi(self, corpus: list[list[str]]) -> Any:
        """rank-bm25's index over ``corpus``; None where no record holds a word (it cannot index that)."""
        return self._cls(corpus) if any(corpus) else None

    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self.doc_ids = list(doc_ids)
        self._corpus = [tokenize(t) for t in texts]
        self._bm25 = self._okapi(self._corpus)
        self._readers.clear()

    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        scores = np.zeros(len(self.doc_ids), dtype=np.float32)
        if self._bm25 is None or (mask is not None and not mask.any()):
            return scores
        if mask is None or mask.all():
            return np.asarray(self._bm25.get_scores(tokenize(query)), dtype=np.float32)
        positions, reader = self._readers.get(mask)
        if reader is not None:
            scores[positions] = reader.get_scores(tokenize(query))
        return scores

    def _save_body(self, folder: Path) -> None:
        (folder / "corpus_tokens.json").write_text(json.dumps(self._corpus))

    def _load_body(self, folder: Path) -> None:
        self._corpus = json.loads((folder / "corpus_tokens.json").read_text())
        self._bm25 = self._okapi(self._corpus)
        self._readers.clear()
